"""Substitution attribution and the regression gate (tuner attribute / tuner gate).

A two-operator service built here: ``mem`` (lean 5 ms, no workspace / fast 4 ms with
2 GiB of workspace per executor) and ``norm`` (``a`` and ``b``, identical 1 ms
profiles). Memory admits (72-40)/4 = 8 requests under lean and (72-40-16)/4 = 4 under
fast, so the capacities are 8/6 ms ≈ 1333 req/s and 4/5 ms = 800 req/s: at 1100 req/s
(heavy) only the switch of ``mem`` to ``fast`` can cost goodput.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT, SEED_EXAMPLE
from tuner.attribution import assignments_per_regime, attribute, compare, decide, gate
from tuner.cli import main

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
    a = attribute(problem, base, cand, "heavy", SEEDS)
    assert [e.op for e in a.effects] == ["mem", "norm"]
    assert a.blamed == "mem" and a.ranked[0].op == "mem"
    mem, norm = a.ranked[0], a.ranked[1]
    assert mem.add.high < 0 and mem.effect.excludes_zero and mem.remove.high < 0
    assert mem.add.mean < -0.2 * a.comparison.base_runs.mean_goodput  # the lost capacity: 1333 → 800 req/s
    assert abs(norm.effect.mean) < 0.01 * abs(mem.effect.mean)
    assert a.total.mean == pytest.approx(sum(e.add.mean for e in a.effects) + a.interaction.mean)
    # the CLI says the same, as JSON
    result = cli("attribute", "mem=lean norm=a", "mem=fast;norm=b", "--problem", str(problem.path),
                 "--regime", "heavy", "--seeds", "5", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)["regimes"][0]
    assert document["blamed"] == "mem" and document["effects"][0]["ci_excludes_zero"]


def test_a_neutral_change_passes_the_gate_and_its_cis_include_zero(problem):
    a = attribute(problem, per_regime(problem, "norm=a")["heavy"], per_regime(problem, "norm=b")["heavy"],
                  "heavy", SEEDS)
    (norm,) = a.effects
    assert norm.op == "norm" and not norm.add.excludes_zero and not a.total.excludes_zero
    assert norm.add.low <= 0 <= norm.add.high and a.blamed is None
    result = cli("gate", "norm=a", "norm=b", "--problem", str(problem.path), "--seeds", "3")
    assert result.exit_code == 0, result.output
    assert "gate: pass" in result.output and "FAIL" not in result.output


def test_identical_assignments_give_identical_metrics_and_zero_deltas(problem):
    same = per_regime(problem, "mem=fast norm=b")["heavy"]
    comparison = compare(problem, same, dict(same), "heavy", SEEDS)
    assert comparison.base_runs == comparison.candidate_runs
    a = attribute(problem, same, dict(same), "heavy", SEEDS)
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


def test_a_table_gives_each_regime_its_own_row(tmp_path):
    # results.db.example: seed_example's rows are light=fast, bursty=lean, heavy=lean
    table = str(ROOT / "results.db.example")
    problem_args = ("--problem", str(SEED_EXAMPLE), "--horizon", "5", "--seeds", "2")
    ok = cli("gate", table, "stage=lean", *problem_args, "--regime", "heavy", "--regime", "bursty")
    assert ok.exit_code == 0, ok.output
    bad = cli("gate", table, "stage=fast", *problem_args, "--regime", "heavy")
    assert bad.exit_code == 1 and "blamed operator: stage" in bad.output


@pytest.mark.parametrize("args, words", [
    (("nosuch=lean", "stage=fast"), "unknown operator 'nosuch'"),
    (("stage=lean", "stage=turbo"), "no config 'turbo'"),
    (("stage=lean", "stage=fast", "--regime", "rush"), "no regime 'rush'"),
    (("missing.db", "stage=fast"), "no such table file"),
    (("stage=lean", "stage=fast", "--seeds", "1"), "at least 2"),
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


def test_a_batch_simulator_gives_the_same_attribution_with_each_run_once(problem):
    from tuner.sim import simulate

    base, cand = per_regime(problem, "mem=lean norm=a")["heavy"], per_regime(problem, "mem=fast norm=b")["heavy"]
    batches = []

    def batch(runs):
        batches.append(len(runs))
        return [simulate(problem, assignment, "heavy", seed, 2.0).metrics for assignment, seed in runs]

    together = attribute(problem, base, cand, "heavy", range(3), 2.0, batch=batch)
    # base, candidate and the two mixes (with two operators, one added alone is the other
    # removed alone): 4 distinct assignments x 3 seeds, in one batch
    assert batches == [4 * 3]
    assert together == attribute(problem, base, cand, "heavy", range(3), 2.0)
