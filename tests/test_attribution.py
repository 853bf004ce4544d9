"""Substitution attribution and the regression gate (tuner attribute / tuner gate).

A two-operator service built here: ``mem`` (lean 5 ms, no workspace / fast 4 ms with
2 GiB of workspace per executor) and ``norm`` (``a`` and ``b``, identical 1 ms
profiles). Memory admits (72-40)/4 = 8 requests under lean and (72-40-16)/4 = 4 under
fast, so the capacities are 8/6 ms ≈ 1333 req/s and 4/5 ms = 800 req/s: at 1100 req/s
(heavy) only the switch of ``mem`` to ``fast`` can cost goodput.

A bucketed service (:func:`bucketed`): ``mm`` has shape ``M = batch`` and buckets
``M..2`` and ``M3..8``; its config ``x`` takes 4 ms at every M, ``y`` takes M ms (faster
up to M = 3, twice as slow at M = 8). One executor, batches of up to 8, 1500 req/s: with
``x`` everywhere a full batch takes 4.1 ms (capacity 8/4.1 ms ≈ 1950 req/s), with ``y``
in ``M3..8`` 8.1 ms (≈ 988 req/s < 1500), while ``y`` in ``M..2`` only makes small
batches faster. So the switch to ``y`` is lost in bucket ``M3..8`` and nowhere else.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tests.conftest import SEED_EXAMPLE, schema_3_fields
from tuner.problem.scenario import Scenario
from tuner.errors import AssignmentError
from tuner.attribution import assignments_per_regime, attribute, compare, decide, gate
from tuner.attribution.render import verdict_line
from tuner.cli import main
from tuner.problem import resolve_assignment
from tuner.problem.assignment import Assignment
from tuner.sim import simulate

SEEDS = range(5)


def two_ops() -> dict:
    profile = {"sm": 0.1, "dram": 0.05}
    return {
        "name": "two_ops",
        "service": {
            "batching": "dynamic", "max_batch": 1, "executors": 8,
            "memory": {"budget": "72 GiB", "fixed": "40 GiB", "per_request": "4 GiB"},
            "operators": [{"name": "mem", "family": "mem"}, {"name": "norm", "family": "norm"}],
            "slo": {"deadline": "100 ms"},
        },
        "families": {
            "mem": {"space": {"variant": ["lean", "fast"]}, "configs": [
                {"name": "lean", "params": {"variant": "lean"}, "profile": {"latency": "5 ms", "workspace": 0, **profile}},
                {"name": "fast", "params": {"variant": "fast"},
                 "profile": {"latency": "4 ms", "workspace": "2 GiB", **profile}},
            ]},
            "norm": {"space": {"variant": ["a", "b"]}, "configs": [
                {"name": "a", "params": {"variant": "a"}, "profile": {"latency": "1 ms", "workspace": 0, **profile}},
                {"name": "b", "params": {"variant": "b"}, "profile": {"latency": "1 ms", "workspace": 0, **profile}},
            ]},
        },
        "regimes": {
            "light": {"arrivals": {"process": "poisson", "rate": 50}, "horizon": "5 s"},
            "heavy": {"arrivals": {"process": "poisson", "rate": 1100}, "horizon": "5 s"},
        },
    }


@pytest.fixture
def problem(write_problem):
    return write_problem(two_ops())


def per_regime(problem, text, regimes=("heavy",)):
    return assignments_per_regime(problem, text, regimes)


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_the_regressing_operator_gets_the_largest_effect_and_its_ci_excludes_zero(problem):
    base, cand = per_regime(problem, "mem=lean norm=a")["heavy"], per_regime(problem, "mem=fast norm=b")["heavy"]
    a = attribute(Scenario.of(problem, "heavy", SEEDS), base, cand)
    assert [e.op for e in a.effects] == ["mem", "norm"] and [e.label for e in a.effects] == ["mem", "norm"]
    assert a.blamed == "mem" and a.ranked[0].op == "mem"
    assert a.blamed_cell is None  # mem has one bucket: there is no bucket to name
    mem, norm = a.ranked[0], a.ranked[1]
    assert mem.add.high < 0 and mem.effect.excludes_zero and mem.remove.high < 0
    assert mem.add.mean < -0.2 * a.comparison.base_runs.mean  # the lost capacity: 1333 → 800 req/s
    assert abs(norm.effect.mean) < 0.01 * abs(mem.effect.mean)
    assert a.total.mean == pytest.approx(sum(e.add.mean for e in a.effects) + a.interaction.mean)
    # the CLI says the same, as JSON
    result = cli("attribute", "mem=lean norm=a", "mem=fast;norm=b", "--problem", str(problem.path),
                 "--regime", "heavy", "--seeds", "5", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)["regimes"][0]
    assert document["blamed"] == "mem" and document["effects"][0]["ci_excludes_zero"]


def test_a_neutral_change_passes_the_gate_and_its_cis_include_zero(problem):
    a = attribute(Scenario.of(problem, "heavy", SEEDS), per_regime(problem, "norm=a")["heavy"], per_regime(problem, "norm=b")["heavy"])
    (norm,) = a.effects
    assert norm.op == "norm" and not norm.add.excludes_zero and not a.total.excludes_zero
    assert norm.add.low <= 0 <= norm.add.high and a.blamed is None
    result = cli("gate", "norm=a", "norm=b", "--problem", str(problem.path), "--seeds", "3")
    assert result.exit_code == 0, result.output
    assert "gate: PASS" in result.output and "FAIL" not in result.output


def test_identical_assignments_give_identical_metrics_and_zero_deltas(problem):
    same = per_regime(problem, "mem=fast norm=b")["heavy"]
    spelled_otherwise = per_regime(problem, "norm=b;mem=fast")["heavy"]
    comparison = compare(Scenario.of(problem, "heavy", SEEDS), same, spelled_otherwise)
    assert comparison.base_runs == comparison.candidate_runs and comparison.changed == ()
    a = attribute(Scenario.of(problem, "heavy", SEEDS), same, spelled_otherwise)
    assert a.effects == () and set(a.total.values) == {0.0} and set(a.interaction.values) == {0.0}
    assert decide(comparison, 0.0, 0.95).passed


def test_the_gate_decision_does_not_depend_on_the_order_of_regimes_or_operators(problem):
    forward = gate(problem, assignments_per_regime(problem, "mem=lean norm=a", ("heavy", "light")),
                   assignments_per_regime(problem, "mem=fast norm=b", ("heavy", "light")), SEEDS[:3])
    backward = gate(problem, assignments_per_regime(problem, "norm=a mem=lean", ("light", "heavy")),
                    assignments_per_regime(problem, "norm=b;mem=fast", ("light", "heavy")), SEEDS[:3])
    assert forward == backward
    assert [v.regime for v in forward.verdicts] == ["heavy", "light"]
    assert [v.passed for v in forward.verdicts] == [False, True]
    assert forward.failed[0].attribution.blamed == "mem"
    outputs = []
    for regimes, base, cand in ((("heavy", "light"), "mem=lean norm=a", "mem=fast norm=b"),
                                (("light", "heavy"), "norm=a;mem=lean", "norm=b;mem=fast")):
        flags = [x for r in regimes for x in ("--regime", r)]
        result = cli("gate", base, cand, "--problem", str(problem.path), "--seeds", "3", *flags)
        assert result.exit_code == 1, result.output
        outputs.append(result.output)
    assert outputs[0] == outputs[1]
    assert "regime heavy: FAIL" in outputs[0] and "blamed operator: mem" in outputs[0]


def test_the_seed_examples_fast_kernel_fails_the_gate_under_heavy_load_and_stage_is_blamed(tmp_path):
    report = tmp_path / "gate.md"
    result = cli("gate", "stage=lean", "stage=fast", "--problem", str(SEED_EXAMPLE), "--regime", "heavy",
                 "--horizon", "10", "--seeds", "3", "--report", str(report))
    assert result.exit_code == 1, result.output
    assert "regime heavy: FAIL" in result.output and "blamed operator: stage" in result.output
    text = report.read_text()
    # isolated latency says faster (10 → 8 ms), the service says far worse
    assert "10.000 → 8.000 | -20.0%" in text and "`stage` **(blamed)**" in text
    assert "| heavy | 7" in text  # base goodput ~730 req/s


def test_a_table_gives_each_regime_its_own_row(seed_example, tmp_path):
    from tuner.store.export import export_json

    # the rows results.db.example holds for the seed example: light=fast, bursty=lean, heavy=lean
    lean, fast = (resolve_assignment(seed_example, [f"stage={name}"]) for name in ("lean", "fast"))
    rows = _table_rows(seed_example, {"light": fast, "bursty": lean, "heavy": lean})
    table = str(export_json(seed_example.name, rows, tmp_path / "seed_example.json"))
    problem_args = ("--problem", str(SEED_EXAMPLE), "--horizon", "5", "--seeds", "2")
    ok = cli("gate", table, "stage=lean", *problem_args, "--regime", "heavy", "--regime", "bursty")
    assert ok.exit_code == 0, ok.output
    bad = cli("gate", table, "stage=fast", *problem_args, "--regime", "heavy")
    assert bad.exit_code == 1 and "blamed operator: stage" in bad.output
    same = cli("gate", table, "stage=fast", *problem_args, "--regime", "light")
    assert same.exit_code == 0 and "+0.0%" in same.output, same.output


def test_the_gate_judges_capacity_at_the_slo_on_request():
    """The seed example's servers: `lean` admits 8 requests at once for 10 ms each (800 req/s
    of service), `fast` 4 for 8 ms (500 req/s); an M/D/c queue meets a 100 ms deadline for
    90% of requests just under those rates. Light traffic ties on goodput, not on capacity."""
    args = ("--problem", str(SEED_EXAMPLE), "--horizon", "10", "--seeds", "2", "--metric", "capacity")
    bad = cli("gate", "stage=lean", "stage=fast", *args, "--regime", "light")
    assert bad.exit_code == 1 and "capacity" in bad.output and "blamed operator: stage" in bad.output, bad.output
    base, cand = (float(x) for x in re.search(r"capacity ([\d.]+)/s → ([\d.]+)/s", bad.output).groups())
    assert 700 < base < 820 and 430 < cand < 520
    goodput = cli("gate", "stage=lean", "stage=fast", *args[:-2], "--regime", "light")
    assert goodput.exit_code == 0, goodput.output
    attributed = cli("attribute", "stage=lean", "stage=fast", *args, "--regime", "light", "--json")
    regime = json.loads(attributed.output)["regimes"][0]
    assert regime["metric"] == "capacity" and regime["base_capacity_rps"] == pytest.approx(base)
    assert regime["operators"][0]["effect"]["mean"] == pytest.approx(cand - base, abs=0.01)  # gate prints 2 decimals


@pytest.mark.parametrize("args, words", [
    (("nosuch=lean", "stage=fast"), "unknown operator 'nosuch'"),
    (("stage=lean", "stage=turbo"), "no config 'turbo'"),
    (("stage=lean", "stage=fast", "--regime", "rush"), "no regime 'rush'"),
    (("missing.db", "stage=fast"), "no such table file"),
    (("stage=lean", "stage=fast", "--seeds", "1"), "--seeds: '1' is below the minimum 2 (a paired comparison needs"),
    (("stage=lean", "stage=fast", "--tolerance", "-1"), "--tolerance"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    for command in ("gate", "attribute"):
        if command == "attribute" and ("--seeds" in args or "--tolerance" in args):
            continue
        result = cli(command, *args, "--problem", str(SEED_EXAMPLE), "--horizon", "1")
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tuner: error:") and words in lines[0], result.output


@pytest.mark.parametrize("seeds", ["0", "1"])
def test_the_gate_says_at_once_that_it_needs_two_seeds(seeds):
    """`--seeds 0` used to say "at least 1", and `--seeds 1` then "at least 2": the gate's
    own minimum comes first, whatever the value."""
    result = cli("gate", "stage=lean", "stage=fast", "--problem", str(SEED_EXAMPLE), "--seeds", seeds)
    assert result.exit_code == 2 and result.stderr == (
        f"tuner: error: --seeds: '{seeds}' is below the minimum 2 (a paired comparison needs two seeds)\n")


def test_attribute_keeps_its_minimum_of_one_seed():
    refused = cli("attribute", "stage=lean", "stage=fast", "--problem", str(SEED_EXAMPLE), "--seeds", "0")
    assert refused.exit_code == 2 and refused.stderr == "tuner: error: --seeds: '0' is below the minimum 1\n"
    one = cli("attribute", "stage=lean", "stage=fast", "--problem", str(SEED_EXAMPLE), "--seeds", "1",
              "--regime", "light", "--horizon", "1", "--json")
    assert one.exit_code == 0, one.output


def test_a_batch_simulator_gives_the_same_attribution_with_each_run_once(problem):
    from tuner.sim import simulate

    base, cand = per_regime(problem, "mem=lean norm=a")["heavy"], per_regime(problem, "mem=fast norm=b")["heavy"]
    batches = []

    def batch(runs):
        batches.append(len(runs))
        return [simulate(problem, assignment, "heavy", seed, 2.0).metrics for assignment, seed in runs]

    together = attribute(Scenario.of(problem, "heavy", range(3), 2.0), base, cand, batch=batch)
    # base, candidate and the two mixes (with two operators, one added alone is the other
    # removed alone): 4 distinct assignments x 3 seeds, in one batch
    assert batches == [4 * 3]
    assert together == attribute(Scenario.of(problem, "heavy", range(3), 2.0), base, cand)


# --- per-shape buckets -------------------------------------------------------------------

BUCKET_SEEDS = range(3)
FULL_BATCH_Y_S = 8e-3 + 0.1e-3  # y at M = 8, then norm


def bucketed() -> dict:
    profile = {"sm": 0.1, "dram": 0.05}
    return {
        "name": "bucketed",
        "service": {
            "batching": "dynamic", "max_batch": 8, "executors": 1,
            "memory": {"budget": "80 GiB", "fixed": 0, "per_request": "1 GiB"},
            "operators": [{"name": "mm", "family": "mm", "shape": {"M": "batch"}, "buckets": {"M": [2, 8]}},
                          {"name": "norm", "family": "norm"}],
            "slo": {"deadline": "100 ms"},
        },
        "families": {
            "mm": {"space": {"variant": ["x", "y"]}, "configs": [
                {"name": "x", "params": {"variant": "x"}, "profile": {"latency": "4 ms", **profile}},
                {"name": "y", "params": {"variant": "y"}, "profile": {"latency": "M * ms", **profile}},
            ]},
            "norm": {"space": {"variant": ["a", "b"]}, "configs": [
                {"name": "a", "params": {"variant": "a"}, "profile": {"latency": "0.1 ms", **profile}},
                {"name": "b", "params": {"variant": "b"}, "profile": {"latency": "0.1 ms", **profile}},
            ]},
        },
        "regimes": {
            "light": {"arrivals": {"process": "poisson", "rate": 20}, "horizon": "3 s"},
            "heavy": {"arrivals": {"process": "poisson", "rate": 1500}, "horizon": "3 s"},
        },
    }


@pytest.fixture
def buckets(write_problem):
    return write_problem(bucketed())


def goodputs(problem, assignment, regime="heavy"):
    return [simulate(problem, assignment, regime, seed=s).metrics.goodput_rps for s in BUCKET_SEEDS]


def test_by_bucket_names_op_at_label_units_and_the_operator_summary_substitutes_all_its_buckets_at_once(buckets):
    assert [b.label for b in buckets.operator("mm").bucketing.buckets] == ["M..2", "M3..8"]
    base, cand = per_regime(buckets, "mm=x norm=a")["heavy"], per_regime(buckets, "mm=y norm=b")["heavy"]
    a = attribute(Scenario.of(buckets, "heavy", BUCKET_SEEDS), base, cand, by_bucket=True)
    # one unit per changed cell; norm has one bucket, so it keeps its plain name
    assert [e.label for e in a.effects] == ["mm@M..2", "mm@M3..8", "norm"]
    assert [(e.base_config, e.candidate_config) for e in a.effects] == [("x", "y")] * 2 + [("a", "b")]
    small, large, norm = a.effects
    base_g, cand_g = goodputs(buckets, base), goodputs(buckets, cand)
    assert min(base_g) > 0.9 * 1500 and max(cand_g) < 8 / FULL_BATCH_Y_S  # 1500 req/s fit x, not y
    assert large.add.high < 0 and large.effect.excludes_zero and large.add.mean < -(0.9 * 1500 - 8 / FULL_BATCH_Y_S)
    assert small.effect.mean >= 0  # y is faster than x up to M = 3: it cannot cost goodput there
    assert set(norm.add.values) == {0.0}  # identical profiles
    # the per-operator summary is mm's two buckets substituted together, seed by seed,
    # in both directions (assignments spelled independently here, simulated directly)
    mm_only = resolve_assignment(buckets, ["mm=y", "norm=a"])
    mm_back = resolve_assignment(buckets, ["mm=x", "norm=b"])
    summary = {o.label: o for o in a.operators}
    assert list(summary) == ["mm", "norm"] and summary["mm"].bucket_labels == ("M..2", "M3..8")
    assert summary["mm"].add.values == tuple(y - x for y, x in zip(goodputs(buckets, mm_only), base_g))
    assert summary["mm"].remove.values == tuple(c - m for c, m in zip(cand_g, goodputs(buckets, mm_back)))
    assert summary["norm"] == norm
    # ... which is exactly the default unit, and the interaction is over the units in use
    by_op = attribute(Scenario.of(buckets, "heavy", BUCKET_SEEDS), base, cand)
    assert by_op.effects == a.operators and [e.label for e in by_op.effects] == ["mm", "norm"]
    for result in (a, by_op):
        assert result.total.values == pytest.approx(
            [sum(e.add.values[i] for e in result.effects) + result.interaction.values[i] for i in range(3)])
    # the operator is blamed, and the one bucket whose change costs goodput with it
    assert a.blamed == "mm" and a.blamed_cell == large
    assert by_op.blamed == "mm" and by_op.blamed_cell is None  # by operator, the buckets are not told apart


def test_a_bucket_spec_changes_one_cell_and_the_blame_names_it(buckets):
    base = per_regime(buckets, "default")["heavy"]
    cand = per_regime(buckets, "mm@M3..8=y")["heavy"]
    x, y = (buckets.family_of("mm").find(name=n) for n in ("x", "y"))
    assert base.configs("mm") == (x, x)  # the family default is its first config
    assert cand == base.replace({("mm", 1): y}) and cand == per_regime(buckets, "mm@1=y")["heavy"]
    a = attribute(Scenario.of(buckets, "heavy", BUCKET_SEEDS), base, cand)
    (e,) = a.effects
    assert (e.label, e.buckets, e.cell_label) == ("mm", (1,), "mm@M3..8")
    assert a.blamed == "mm" and a.blamed_cell == e  # one bucket changed: it is the one to name
    result = gate(buckets, {"heavy": base}, {"heavy": cand}, BUCKET_SEEDS)
    line = verdict_line(result.verdicts[0])
    assert "regime heavy: FAIL" in line and "blamed operator: mm@M3..8 (x → y, effect -" in line


def test_the_gate_blames_the_operator_and_bucket_and_reports_each_cells_isolated_latency(buckets, tmp_path):
    report = tmp_path / "gate.md"
    result = cli("gate", "mm=x norm=a", "mm=y norm=b", "--problem", str(buckets.path), "--seeds", "3",
                 "--report", str(report))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("regime heavy: FAIL") and lines[1].startswith("regime light: PASS")
    assert "blamed operator: mm (x → y, effect -" in lines[0] and "bucket mm@M3..8 (x → y, effect -" in lines[0]
    text = report.read_text()
    # isolated latency at each bucket's representative shape (its upper edge: M = 2, M = 8):
    # x 4 ms everywhere, y M ms, so y is twice as fast in M..2 and twice as slow in M3..8
    assert "| heavy | `mm@M..2` | x → y | 4.000 → 2.000 | -50.0% |" in text
    assert "| heavy | `mm@M3..8` **(blamed)** | x → y | 4.000 → 8.000 | +100.0% |" in text
    assert "| heavy | `norm` | a → b | 0.100 → 0.100 | +0.0% |" in text
    assert "| heavy | `mm` (its 2 changed buckets together) | x → y |" in text


def test_attribute_by_bucket_on_the_command_line(buckets):
    args = ("mm=x norm=a", "mm=y norm=b", "--problem", str(buckets.path), "--regime", "heavy", "--seeds", "3")
    document = json.loads(cli("attribute", *args, "--by-bucket", "--json").output)["regimes"][0]
    assert [e["label"] for e in document["effects"]] == ["mm@M..2", "mm@M3..8", "norm"]
    assert [e["label"] for e in document["operators"]] == ["mm", "norm"]
    assert document["blamed"] == "mm" and document["blamed_bucket"] == "M3..8" and document["by_bucket"]
    assert document["base"] == {"mm": "x", "norm": "a"} and document["candidate"] == {"mm": "y", "norm": "b"}
    by_op = json.loads(cli("attribute", *args, "--json").output)["regimes"][0]
    assert [e["label"] for e in by_op["effects"]] == ["mm", "norm"] and by_op["blamed_bucket"] is None
    assert by_op["effects"][0]["effect"] == document["operators"][0]["effect"]
    shown = cli("attribute", *args, "--by-bucket")
    assert shown.exit_code == 0, shown.output
    assert "mm@M3..8: x → y" in shown.output and "← blamed" in shown.output
    assert "per operator, its changed buckets substituted together" in shown.output


def _table_rows(problem, per_regime_assignments):
    from datetime import datetime, timezone

    provenance = dict(device="generic", triton_version=None, problem_hash=problem.file_hash, study_name="s",
                      trial_number=0, seeds=1, horizon_s=1.0, goodput_rps=1.0, goodput_ci_rps=None,
                      baseline_goodput_rps=1.0, delta_ci_rps=None, one_config_goodput_rps=None,
                      oracle_goodput_rps=None, regime_rate_rps=None, created_at=datetime.now(timezone.utc),
                      **schema_3_fields(realized_rates_rps=[1.0], warmup_s=0.0, capacity_rps=1.0, capacity_ci_rps=None,
                                        baseline_capacity_rps=1.0, capacity_delta_ci_rps=None,
                                        one_config_capacity_rps=None))
    baseline = Assignment.default(problem)
    return [row for regime, assignment in per_regime_assignments.items()
            for row in assignment.to_rows(problem, regime, provenance, baseline=baseline)]


def test_a_bucketed_table_gives_each_regime_its_own_cells(buckets, tmp_path):
    from tuner.errors import StorageError
    from tuner.store.export import export_json

    x, y = (buckets.family_of("mm").find(name=n) for n in ("x", "y"))
    a, b = (buckets.family_of("norm").find(name=n) for n in ("a", "b"))
    light = Assignment((("mm", (y, x)), ("norm", (a,))))
    heavy = Assignment((("mm", (x, y)), ("norm", (b,))))
    path = export_json(buckets.name, _table_rows(buckets, {"light": light, "heavy": heavy}), tmp_path / "t.json")
    got = assignments_per_regime(buckets, str(path), ("heavy", "light"), "BASE")
    assert got == {"heavy": heavy, "light": light}
    assert got["light"].specs(buckets) == ["mm@M..2=y", "mm@M3..8=x", "norm=a"]
    # against specs equal to the light row: nothing changed in light, every cell in heavy
    result = cli("attribute", str(path), "mm@M..2=y norm=a", "--problem", str(buckets.path), "--seeds", "2",
                 "--by-bucket", "--json")
    assert result.exit_code == 0, result.output
    labels = {r["regime"]: [e["label"] for e in r["effects"]] for r in json.loads(result.output)["regimes"]}
    assert labels == {"light": [], "heavy": ["mm@M..2", "mm@M3..8", "norm"]}
    # a table that lacks a bucket's row is refused, naming the cell
    rows = [r for r in _table_rows(buckets, {"heavy": heavy}) if not (r.op == "mm" and r.bucket == 1)]
    broken = export_json(buckets.name, rows, tmp_path / "broken.json")
    with pytest.raises(StorageError, match="mm bucket 1: no row"):
        assignments_per_regime(buckets, str(broken), ("heavy",), "BASE")


def test_a_bucket_is_named_only_when_it_alone_is_responsible():
    from tuner.attribution import Attribution, Delta, Effect

    def cell(bucket, *effects):
        d = Delta(tuple(effects), 0.95)
        return Effect("mm", (bucket,), (f"M{bucket}",), f"mm@M{bucket}", "x", "y", d, d)

    def attribution(*cells):
        values = tuple(sum(c.add.values[i] for c in cells) for i in range(len(cells[0].add.values)))
        d = Delta(values, 0.95)
        summary = Effect("mm", tuple(c.buckets[0] for c in cells), tuple(c.bucket_labels[0] for c in cells),
                         "mm", "x", "y", d, d)
        return Attribution(comparison=None, effects=cells, operators=(summary,), by_bucket=True)

    hurts, noise, also_hurts = cell(0, -10.0, -11.0, -12.0), cell(1, -1.0, 1.5, -0.2), cell(2, -5.0, -6.0, -5.5)
    assert attribution(hurts, noise).blamed_cell == hurts  # the other interval contains 0
    assert attribution(hurts, noise, also_hurts).blamed_cell is None  # two buckets share the loss
    assert attribution(cell(0, -10.0), cell(1, 2.0)).blamed_cell is None  # one seed: no interval to trust
    assert attribution(hurts, noise).blamed == "mm"


def test_a_spec_longer_than_a_file_name_is_read_as_a_spec(problem) -> None:
    """A bucketed problem's full OP@BUCKET=CONFIG list easily runs past the OS's 255-byte
    file-name limit; asking whether it is a file raised OSError ('File name too long')
    instead of reading it as the spec it is (here: one naming unknown operators)."""
    text = "mem=lean " + " ".join(f"norm{i}=a" for i in range(30))
    assert len(text) > 255
    with pytest.raises(AssignmentError, match="norm0"):
        per_regime(problem, text)


def test_a_table_tuned_from_another_version_of_the_file_is_said_so(tmp_path):
    """BASE is results.db.example's table, the problem file edited since (one comment):
    the gate still runs on the stored configs, with one warning naming BASE."""
    from pathlib import Path

    edited = tmp_path / "seed_example.yaml"
    edited.write_text(Path(SEED_EXAMPLE).read_text() + "\n# edited after tuning\n")
    example = Path(__file__).resolve().parents[1] / "results.db.example"
    result = cli("gate", str(example), "stage=lean", "--problem", str(edited), "--horizon", "2", "--seeds", "2",
                 "--regime", "heavy")
    assert result.exit_code in (0, 1), result.output
    assert result.stderr.count("tuned from another version") == 1 and ": BASE:" in result.stderr
    same = cli("gate", str(example), "stage=lean", "--problem", str(SEED_EXAMPLE), "--horizon", "2", "--seeds", "2",
               "--regime", "heavy")
    assert "tuned from another version" not in same.stderr
