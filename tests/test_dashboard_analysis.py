"""What the dashboard's figures say: crossovers, regime rate buckets, the regime table's
runs of shape buckets, and timelines whose averages and integrals agree with the
simulator's own accounting."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import schema_3_fields
from tuner.dashboard.cells import bucket_spans, operator_runs
from tuner.store.row import span_label
from tuner.dashboard.sweep import Curve, Sweep, order_changes, rate_bucket, run_sweep, sweep_rates
from tuner.dashboard.timeline import bin_averages, record, step_integrals
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment
from tuner.store.row import TableRow

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "search_spaces" / "seed_example.yaml"
STORAGE = f"sqlite:///{ROOT / 'results.db.example'}"  # where sweep workers read compiled resources


def test_step_integrals_hand_worked() -> None:
    # value 2 on [1, 3), 5 on [3, 4), 0 from 4 on; nothing before t = 1
    times, values = np.array([1.0, 3.0, 4.0]), np.array([2.0, 5.0, 0.0])
    got = step_integrals(times, values, np.array([0.0, 1.0, 2.0, 3.5, 4.0, 10.0]))
    assert got.tolist() == pytest.approx([0.0, 0.0, 2.0, 6.5, 9.0, 9.0])
    starts, means = bin_averages(times, values, 4.0, 2)  # bins [0, 2) and [2, 4)
    assert starts.tolist() == [0.0, 2.0] and means.tolist() == pytest.approx([1.0, 3.5])


@pytest.mark.parametrize(("a", "b", "expected"), [
    ([1, 1, 5, 6], [1, 1, 2, 2], [(2, 3, True, None)]),  # leaves a tie: located between two rates
    ([1, 3, 5, 6], [2, 2, 2, 2], [(1, 2, True, 1.5)]),  # strict swap: interpolated where equal
    ([5, 5, 1, 5], [1, 5, 5, 1], [(2, 3, False, None), (3, 4, True, 3.5)]),
    ([4, 4, 4, 4], [4, 4, 4, 4], []),  # equal curves never cross
    ([100, 100.5, 300, 400], [100, 100, 200, 200], [(2, 3, True, None)]),  # 0.5% apart is level
    ([1, 3, 3, 5], [2, 2, 4, 4], [(1, 2, True, 1.5), (2, 3, False, 2.5), (3, 4, True, 3.5)]),
    ([3, 4, 5, 6], [1, 1, 1, 1], []),  # ahead from the first rate on: nothing changes
    ([5, 5, 5, 5], [1, 1, 1, 1], []),
    ([5, 5, 1, 1], [1, 1, 1, 5], [(3, 4, False, None)]),  # ahead, level, then behind
    ([5, 3, 1, 1], [1, 1, 3, 5], [(2, 3, False, 2.5)]),  # ahead from the start, then a strict swap
])
def test_order_changes(a, b, expected) -> None:
    assert order_changes([1, 2, 3, 4], a, b) == expected


def test_sweep_spans_every_regime_rate_bucket() -> None:
    problem = load_problem(ROOT / "search_spaces" / "llm_decode.yaml")
    buckets = [rate_bucket(r) for r in problem.regimes.values()]
    assert (buckets[0].low, buckets[0].high) == (0.5, 1.5)
    rates = sweep_rates(buckets, 8)
    assert rates[0] == pytest.approx(0.25) and rates[-1] == pytest.approx(12.5)
    seed = load_problem(SEED)  # fixed rates are buckets of zero width
    assert [(b.low, b.high) for b in map(rate_bucket, seed.regimes.values())] == [(100, 100), (300, 300), (720, 720)]


def test_seed_example_crossover_is_where_fast_saturates() -> None:
    """fast serves 4 admitted requests in 8 ms (c/S = 500 req/s), lean 8 in 10 ms (800 req/s):
    lean must pull ahead of fast exactly in the sweep interval that holds 500 req/s, once."""
    problem = load_problem(SEED)
    family = problem.family_of("stage")
    lean, fast = (Assignment.uniform(problem, {"stage": family.find(name=name)}) for name in ("lean", "fast"))
    sweep = run_sweep(problem, STORAGE, [("lean", lean, False), ("fast", fast, True)], points=8, seeds=4,
                      min_requests=100, min_horizon_s=2.0, max_horizon_s=5.0)
    (crossing,) = sweep.crossovers()
    assert crossing.label == "lean" and crossing.tuned_wins_above
    assert crossing.low <= 500.0 <= crossing.high
    assert crossing.lead_at_high - crossing.lead_half_width > 0  # the lead is real, seed by seed
    assert crossing.significant_from == crossing.high
    base = dict(zip(sweep.rates, sweep.baseline.means))
    assert max(base.values()) < 500.0 * 1.05  # fast never exceeds its capacity (5% for Poisson counts)
    assert len(sweep.rates) == 8 and all(len(g) == 4 for c in sweep.curves for g in c.goodputs)


def test_sweep_is_reproducible() -> None:
    problem = load_problem(SEED)
    lean = Assignment.uniform(problem, {"stage": problem.family_of("stage").find(name="lean")})
    runs = [run_sweep(problem, STORAGE, [("lean", lean, True)], points=3, seeds=2, min_requests=50,
                      min_horizon_s=1.0, max_horizon_s=2.0) for _ in range(2)]
    assert runs[0] == runs[1]


def test_crossovers_compare_each_tuned_curve_with_the_baseline() -> None:
    sweep = Sweep("p", "r", (1.0, 2.0, 3.0), (1.0,) * 3, 1,
                  (Curve("a", ((1.0,), (2.0,), (3.0,))), Curve("b", ((2.0,), (2.0,), (2.0,)), is_baseline=True)),
                  (), ("declared",))
    (c,) = sweep.crossovers()  # a: behind at 1, level at 2, ahead at 3
    assert (c.label, c.low, c.high, c.tuned_wins_above, c.estimate) == ("a", 2.0, 3.0, True, None)
    assert c.describe() == ("a pulls ahead of the per-bucket isolated-fastest assignment between 2 and 3 req/s offered "
                            "(at 3 req/s: +1 req/s, paired over seeds)")


@pytest.mark.parametrize("variant", ["lean", "fast"])
def test_timeline_averages_agree_with_the_simulators_integrals(variant: str) -> None:
    """The plotted bins come from the recording; Metrics integrates separately inside the
    simulator loop. Both must give the same memory and SM-time integrals."""
    problem = load_problem(SEED)
    assignment = Assignment.uniform(problem, {"stage": problem.family_of("stage").find(name=variant)})
    timeline = record(problem, assignment, "bursty", 3.0, variant)
    window, width = timeline.metrics.window_s, timeline.bin_s
    inside = int(round(window / width))
    assert np.sum(timeline.sm_fraction[:inside]) * width == pytest.approx(timeline.metrics.sm_busy_fraction * window, rel=1e-3)
    assert np.sum(timeline.memory_bytes[:inside]) * width == pytest.approx(timeline.metrics.memory_byte_seconds, rel=1e-3)
    assert timeline.memory_bytes[0] >= 40 * 2**30  # the weights are resident from t = 0
    # Little's law over the window: mean queue = arrival rate x mean wait (drain edge effects aside)
    little = timeline.metrics.arrivals / window * timeline.metrics.wait_mean_s
    assert timeline.queue_mean == pytest.approx(little, rel=0.15, abs=0.05)


def test_study_snapshot_leaves_out_a_trial_read_half_written(monkeypatch) -> None:
    import copy

    import optuna

    from tuner.dashboard import studies

    stored = optuna.create_study(study_name="s", direction="maximize")
    stored.optimize(lambda t: t.suggest_categorical("op", ["a", "b"]) == "a", n_trials=3)
    torn = copy.deepcopy(stored.trials[1])
    torn._values = None  # COMPLETE, value not read yet: what a reader can meet mid-commit
    trials = [stored.trials[0], torn, stored.trials[2]]
    monkeypatch.setattr(optuna, "load_study", lambda **_: type("S", (), {
        "get_trials": lambda self, deepcopy=False: trials, "_study_id": 7, "direction": stored.direction})())
    snapshot, study_id = studies.snapshot(object(), "s")
    assert study_id == 7 and [t.number for t in snapshot.trials] == [0, 1]  # renumbered: the torn one is out
    assert [t.value for t in snapshot.trials] == [stored.trials[0].value, stored.trials[2].value]


def _row(regime: str = "heavy", op: str = "qkv", bucket: int = 0, bounds: dict | None = None, config: str = "a",
         baseline: str = "a", **fields) -> TableRow:
    values = {
        "problem": "p", "regime": regime, "op": op, "bucket": bucket, "bucket_bounds": bounds, "regime_index": 0,
        "op_index": 0, "config": config, "params": {"name": config}, "shape": None, "device": "generic",
        "source": "declared", "triton_version": None, "kernel_source_hash": None, "problem_hash": "0" * 64,
        "study_name": f"tuner:p:{regime}", "trial_number": 3, "seeds": 3, "horizon_s": 2.0, "goodput_rps": 749.17,
        "goodput_ci_rps": 39.21, "baseline_config": baseline, "baseline_goodput_rps": 72.67, "delta_ci_rps": 71.49,
        "one_config_goodput_rps": 60.0, "oracle_goodput_rps": None, "regime_rate_rps": 720.0,
        "created_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
        **schema_3_fields(realized_rates_rps=[702.4, 731.9, 725.6], warmup_s=0.5, capacity_rps=812.0,
                          capacity_ci_rps=41.5, baseline_capacity_rps=80.3, capacity_delta_ci_rps=76.2,
                          one_config_capacity_rps=66.1),
    }
    values.update(fields)
    return TableRow(**values)


M_EDGES = [(None, 16), (16, 32), (32, 64), (64, 128)]


def _m_rows(configs: str, baselines: str, op: str = "qkv", op_index: int = 0) -> list[TableRow]:
    return [_row(op=op, op_index=op_index, bucket=i, bounds={"M": list(M_EDGES[i])}, config=c, baseline=b)
            for i, (c, b) in enumerate(zip(configs, baselines))]


def _texts(rows: list[TableRow], key: str = "config") -> list[tuple[str, list[tuple[str, bool]]]]:
    return [(op, [(r.text(), r.differs) for r in runs]) for op, runs in operator_runs(rows, key)]


def test_runs_merge_buckets_sharing_a_config_and_mark_the_baseline_differences() -> None:
    assert _texts(_m_rows("aaba", "aaaa")) == [
        ("qkv", [("M..32:a", False), ("M33..64:b", True), ("M65..128:a", False)])]
    # the same tuned config splits where the baseline changes: a run is marked whole or not at all
    rows = _m_rows("aaaa", "abbb")
    assert _texts(rows) == [("qkv", [("M..16:a", False), ("M17..128:a", True)])]
    assert _texts(rows, "baseline_config") == [("qkv", [("M..16:a", False), ("M17..128:b", False)])]
    (_, (_, marked)), = operator_runs(rows)
    assert marked.baseline == ("b",) and marked.buckets == 3
    # an operator's only bucket has no label; operators keep the table's order
    single = _row(op="attn", op_index=1, config="flash", baseline="flash")
    assert _texts([*_m_rows("aaaa", "aaaa"), single]) == [("qkv", [("M..128:a", False)]), ("attn", [("flash", False)])]


def test_runs_over_two_key_dimensions_merge_only_along_one() -> None:
    bounds = [{"B": [None, 1], "L": [None, 16]}, {"B": [None, 1], "L": [16, 32]},
              {"B": [1, 2], "L": [None, 16]}, {"B": [1, 2], "L": [16, 32]}]
    assert span_label(bounds[:2]) == "B..1/L..32"  # one B bucket, L from the first to the last
    assert span_label(bounds[1:3]) == "B..1/L17..32–B2/L..16"  # not one range: first–last
    assert span_label(bounds) == "B..1/L..16–B2/L17..32"
    assert span_label(bounds[2:3]) == "B2/L..16" and span_label([None]) == ""
    rows = [_row(op="attn", bucket=i, bounds=b, config="x" if i < 3 else "y", baseline="x")
            for i, b in enumerate(bounds)]
    assert _texts(rows) == [("attn", [("B..1/L..16–B2/L..16:x", False), ("B2/L17..32:y", True)])]
    assert bucket_spans(rows, "attn", [0, 1, 3]) == "B..1/L..32 B2/L17..32"
    assert bucket_spans(rows, "attn", [3, 2, 1, 0]) == "all"


def _board(params: dict | None = None) -> SimpleNamespace:
    """What the first page needs of a Dashboard: a problem file that knows ``params``
    (``{(op, config): params}``) of configs no row runs, or no problem file."""
    family = lambda op: SimpleNamespace(find=lambda name: (  # noqa: E731
        SimpleNamespace(param_dict=params[op, name]) if (op, name) in params else None))
    return SimpleNamespace(storage="sqlite:///x.db", optuna_dashboard_url=None, assignment=lambda *_: None,
                           problem=lambda name: None if params is None else SimpleNamespace(family_of=family))


def _lines(html: str, problem: str = "p") -> dict[str, dict[str, str]]:
    """Each regime line of a problem's figures table: ``{regime: {td class: inner HTML}}``."""
    lines = re.findall(rf'<tr data-problem="{problem}" data-regime="(\w+)"[^>]*>(.*?)</tr>', html)
    return {regime: dict(re.findall(r'<td class="([\w -]+)"[^>]*>(.*?)</td>', line)) for regime, line in lines}


def _matrix(html: str, problem: str = "p") -> dict[str, dict[str, str]]:
    """The config matrix: ``{regime: {operator: cell's inner HTML}}``."""
    table = re.search(rf'<table class="matrix" data-problem="{problem}">(.*?)</table>', html).group(1)
    return {regime: dict(re.findall(r'<td class="[\w ]+" data-op="(\w+)"[^>]*>(.*?)</td>', line))
            for regime, line in re.findall(r'<tr data-regime="(\w+)">(.*?)</tr>', table)}


GEMM_A = {"BLOCK_N": 64, "SPLIT_K": 1, "PERSISTENT": False}
GEMM_B = {"BLOCK_N": 128, "SPLIT_K": 4, "PERSISTENT": True}


def _two_regimes() -> list[TableRow]:
    """heavy: qkv's 4 M buckets run a a b a where the baseline runs a a a a (a, b: GEMM_A,
    GEMM_B) and attn runs split4 where the baseline runs split1, which no row runs; light:
    every config the baseline's, its own goodput."""
    heavy = [dataclasses.replace(r, params=GEMM_B if r.config == "b" else GEMM_A) for r in _m_rows("aaba", "aaaa")]
    attn = {"op": "attn", "op_index": 1, "params": {"splits": 4}}
    light = dict(regime="light", regime_index=1, goodput_rps=100.0, goodput_ci_rps=None, baseline_goodput_rps=100.0,
                 delta_ci_rps=None)
    return [*heavy, _row(config="split4", baseline="split1", **attn),
            *(dataclasses.replace(r, params=GEMM_A, **light) for r in _m_rows("aaaa", "aaaa")),
            _row(config="split1", baseline="split1", **attn | {"params": {"splits": 1}}, **light)]


def test_changes_name_exactly_the_differing_parameters() -> None:
    from tuner.problem.changes import changes

    assert [c.text() for c in changes(GEMM_A, GEMM_B)] == ["BLOCK_N 64→128", "SPLIT_K 1→4", "PERSISTENT off→on"]
    assert changes(GEMM_A, dict(GEMM_A)) == ()
    assert [c.text() for c in changes({"a": 1, "b": 2}, {"a": 1, "c": 3})] == ["c —→3", "b 2→—"]


def test_the_first_page_has_one_line_per_regime_and_shows_each_figure_once() -> None:
    from tuner.dashboard.index import index_body

    rows = _two_regimes()
    html = index_body(_board(), rows)
    lines = _lines(html)
    assert list(lines) == ["heavy", "light"]  # 6 rows, 2 regimes: one line each
    heavy, light = lines["heavy"], lines["light"]
    assert heavy["goodput"] == "749 ± 39" and heavy["baseline"] == "72.7"  # digits the interval supports
    # 749.17 / 72.67 = 10.309; (749.17 - 72.67 ∓ 71.49) / 72.67 = +832.5% and +1029.3%
    assert heavy["ratio"] == "10.309×<div class=ci>+832.5% to +1029.3%</div>"
    assert 'title="tuned − baseline +676 ± 71 req/s, paired by seed"' in html
    # 812 / 80.3 = 10.112; (812 - 80.3 ∓ 76.2) / 80.3 = +816.3% and +1006.1%
    assert heavy["capacity"] == "812 ± 42" and heavy["capacity-baseline"] == "80.3"
    assert heavy["capacity-ratio"] == "10.112×<div class=ci>+816.3% to +1006.1%</div>"
    assert heavy["rate"] == ("720<div class=realised>realised 702, 732, 726</div>"  # 3 significant digits
                             "<div class=window>3 × 2 s (warm-up 0.5 s)</div>")
    assert "overloaded" not in heavy["goodput"]
    assert (light["goodput"], light["ratio"]) == ("100", "1.000×")  # one seed's worth: no interval
    # each regime's figures once, not on every operator's or bucket's row
    assert html.count("749 ± 39") == 1 and html.count(">100<") == 2
    assert html.count("<tr data-problem=") == 2
    heads = re.findall(r"<th[^>]*>(.*?)</th>", html)
    assert all(re.sub(r"<[^>]+>", "", h).strip() for h in heads)  # every column labelled
    assert "<th>per-bucket isolated-fastest</th>" in html
    assert "capacity at 90% SLO attainment (simulated, req/s)" in html


def test_the_config_matrix_shows_only_what_differs_from_the_baseline() -> None:
    from tuner.dashboard.index import index_body

    rows = _two_regimes()
    cells = _matrix(index_body(_board(), rows))
    heavy, light = cells["heavy"], cells["light"]
    # qkv: one span of buckets differs; its summary names it, the details list every span
    summary, items = re.fullmatch(r"<details><summary>(.*?)</summary><ul class=buckets>(.*)</ul></details>",
                                  heavy["qkv"]).groups()
    assert summary == "M33..64: BLOCK_N 64→128, SPLIT_K 1→4, PERSISTENT off→on"
    assert re.findall(r"<li[^>]*><span class=span>(.*?)</span> (.*?)</li>", items) == [
        ("M..32", "= baseline"), ("M33..64", "BLOCK_N 64→128, SPLIT_K 1→4, PERSISTENT off→on"),
        ("M65..128", "= baseline")]
    assert 'class=differs title="tuned b; baseline a"' in items
    # attn: the baseline's split1 has its parameters from the light regime's row
    assert heavy["attn"] == "splits 1→4"
    assert light == {"qkv": "= baseline", "attn": "= baseline"}  # no details where nothing differs
    # without that row: from the problem file, else the two names
    alone = [r for r in rows if r.regime == "heavy"]
    assert _matrix(index_body(_board({("attn", "split1"): {"splits": 1}}), alone))["heavy"]["attn"] == "splits 1→4"
    assert _matrix(index_body(_board(), alone))["heavy"]["attn"] == "split1 → split4"


def test_a_cell_summarises_several_differing_spans_by_parameter() -> None:
    from tuner.dashboard.matrix import config_matrix

    rows = [dataclasses.replace(r, params=GEMM_B if r.config == "b" else {**GEMM_A, "SPLIT_K": 2} if r.config == "c"
                                else GEMM_A) for r in _m_rows("baca", "aaaa")]
    ((_, cells),) = config_matrix(rows).regimes
    assert cells["qkv"].summary() == "2 of 4 buckets: BLOCK_N, SPLIT_K, PERSISTENT"
    # every bucket differs alike: no span label; the baseline's parameters from the file, else the names
    every = [dataclasses.replace(r, params=GEMM_B) for r in _m_rows("bbbb", "aaaa")]
    from_file = config_matrix(every, lambda *key: GEMM_A if key == ("p", "qkv", "a") else None)
    assert from_file.regimes[0][1]["qkv"].summary() == "BLOCK_N 64→128, SPLIT_K 1→4, PERSISTENT off→on"
    assert config_matrix(every).regimes[0][1]["qkv"].summary() == "a → b"
    assert config_matrix(every).operators == (("qkv", 4),)


@pytest.mark.parametrize(("tuned", "base", "ci", "expected"), [
    (50.0, 100.0, 60.0, "-100.0% to +10.0%"),  # (-50 - 60) / 100 = -110%: no loss exceeds 100%
    (0.0, 100.0, 0.5, "-100.0% to -99.5%"),
    (110.0, 100.0, 0.0, "+10.0% in every seed"),
    (110.0, 100.0, None, ""), (110.0, 0.0, 1.0, ""), (None, 100.0, 1.0, ""),
])
def test_the_ratio_interval_is_clipped_at_minus_100_percent(tuned, base, ci, expected) -> None:
    from tuner.dashboard.cells import change_interval

    assert change_interval(tuned, base, ci) == expected


def test_the_first_page_shows_the_overload_flags_and_dashes_for_missing_capacities() -> None:
    from tuner.dashboard.index import index_body
    from tuner.sim.metrics import OVERLOADED

    heavy = [_row(op=op, bucket=0, **schema_3_fields(overloaded_seeds=2, objective="capacity"))
             for op in ("qkv", "attn")]
    light = [_row(regime="light", op=op, regime_rate_rps=None, baseline_goodput_rps=0.0,
                  **schema_3_fields(realized_rates_rps=None, capacity_rps=None, capacity_ci_rps=None,
                                    baseline_capacity_rps=None, capacity_delta_ci_rps=None,
                                    one_config_capacity_rps=None))
             for op in ("qkv", "attn")]
    html = index_body(_board(), [*heavy, *light])
    lines = _lines(html)
    h, lt = lines["heavy"], lines["light"]
    assert h["goodput"].endswith(">overloaded: tuned 2 of 3, baseline 0 of 3</div>")  # under the goodput it marks
    assert (f'<div class="overloaded" title="{OVERLOADED} (backlog grew through the window in 2 of 3 seeds tuned, '
            "0 of 3 baseline; compare capacities)\">") in html
    assert 'data-regime="heavy" class=overloaded-regime>' in html and "<p class=overloaded>" in html
    assert "maximised capacity" in html and "maximised goodput" in html
    assert (lt["capacity"], lt["capacity-baseline"], lt["capacity-ratio"]) == ("—", "—", "—")
    assert lt["rate"].startswith("—<div class=realised>realised —</div>")
    # a baseline of 0 has no ratio: the paired difference shows instead
    assert lt["ratio"] == "—<div class=ci>+749 ± 71 req/s</div>"
    quiet = index_body(_board(), light)
    assert "<p class=overloaded>" not in quiet and "overloaded-regime" not in quiet


def test_regimes_with_different_attainment_targets_label_each_capacity() -> None:
    from tuner.dashboard.index import index_body

    rows = [_row(**schema_3_fields()), _row(regime="light", **schema_3_fields(attainment_target=0.95))]
    html = index_body(_board(), rows)
    assert "capacity at the SLO (simulated, req/s)" in html and "capacity at 90%" not in html
    lines = _lines(html)
    assert lines["heavy"]["capacity"] == "4.60 ± 0.30<div class=target>at 90% attainment</div>"
    assert lines["light"]["capacity"] == "4.60 ± 0.30<div class=target>at 95% attainment</div>"


def test_the_regime_summary_and_study_note_show_capacities_or_dashes() -> None:
    from tuner.dashboard.cells import regime_summary
    from tuner.dashboard.render import summary_table
    from tuner.dashboard.standalone import study_note
    from tuner.sim.metrics import OVERLOADED

    rows = [_row(**schema_3_fields(overloaded_seeds=1, baseline_overloaded_seeds=2))]
    summary = dict(regime_summary(rows))
    assert summary["offered load (req/s)"].startswith("720 declared; realised 3.9, 4.2, 4.1 per seed")
    assert summary["seeds × window"].startswith("3 × 2 s; the first 6 s of each window served but not judged")
    assert summary["study maximised"] == "goodput"
    assert summary["capacity at 90% SLO attainment (req/s)"] == (
        "tuned 4.60 ± 0.30; per-bucket isolated-fastest 2.8: tuned / baseline 1.643×, tuned − baseline "
        "+1.80 ± 0.20 (paired by seed); one config per operator (isolated-fastest at service.baseline_batch) 2.1")
    assert summary["goodput (req/s)"].startswith("tuned 749 ± 39; per-bucket isolated-fastest 72.7")
    assert summary["overloaded"].startswith(f"{OVERLOADED} (backlog grew through the window in 1 of 3 seeds tuned, "
                                            "2 of 3 baseline")
    table = summary_table(rows)
    assert '<tr class=overloaded><th>overloaded</th>' in table and "capacity at 90% SLO attainment" in table
    note = study_note(rows, None, None)
    assert "- capacity at 90% SLO attainment (req/s): tuned 4.60 ± 0.30;" in note
    assert f"- **{OVERLOADED} (backlog grew" in note and "- study maximised: goodput" in note

    none = [_row(**schema_3_fields(capacity_rps=None, capacity_ci_rps=None, baseline_capacity_rps=None,
                                   capacity_delta_ci_rps=None, one_config_capacity_rps=None))]
    summary = dict(regime_summary(none))
    assert summary["capacity at 90% SLO attainment (req/s)"] == (
        "tuned —; per-bucket isolated-fastest —: tuned / baseline —, tuned − baseline — (paired by seed); "
        "one config per operator (isolated-fastest at service.baseline_batch) —")
    assert "overloaded" not in summary and "overloaded" not in summary_table(none)
    assert "tuned − baseline — (paired by seed)" in study_note(none, None, None)
    # only the tuned capacity known: no ratio or difference against a missing baseline
    half = dict(regime_summary([_row(**schema_3_fields(baseline_capacity_rps=None, capacity_delta_ci_rps=None))]))
    assert "tuned 4.60 ± 0.30; per-bucket isolated-fastest —: tuned / baseline —, tuned − baseline —" in (
        half["capacity at 90% SLO attainment (req/s)"])


def test_the_sweep_marks_the_tables_capacities_and_says_goodput_past_them_depends_on_the_window() -> None:
    from tuner.dashboard.figures import sweep_figure
    from tuner.dashboard.render import capacity_note
    from tuner.dashboard.sweep import ABOVE_CAPACITY, table_capacities

    sweep = Sweep("p", "heavy", (1.0, 3.0, 5.0), (1.0,) * 3, 2,
                  (Curve("tuned for heavy", ((1.0, 1.0), (3.0, 2.9), (4.0, 4.2))),
                   Curve("per-bucket isolated-fastest", ((1.0, 1.0), (2.8, 2.7), (2.8, 2.9)), is_baseline=True)),
                  (), ("declared",))
    rows = [_row(regime="light", **schema_3_fields(capacity_rps=9.0)), _row(**schema_3_fields())]
    marks = table_capacities(sweep, rows)  # the heavy regime's: the sweep replays its arrivals
    assert [(m.label, m.rate, m.is_baseline) for m in marks] == [
        ("tuned for heavy", 4.6, False), ("per-bucket isolated-fastest", 2.8, True)]
    fig = sweep_figure(sweep, marks)
    # drawn as dotted legend entries, not annotations, which overlapped the regimes' labels
    dotted = [t for t in fig.data if t.name.startswith("capacity")]
    assert [(t.x[0], t.x[1], t.line.color, t.line.dash) for t in dotted] == [
        (4.6, 4.6, "#1f77b4", "dot"), (2.8, 2.8, "#d62728", "dot")]
    assert dotted[0].name == "capacity at 90% SLO attainment: tuned for heavy 4.6 req/s"
    assert not [a for a in fig.layout.annotations if "capacity" in a.text]
    assert "dotted: the table's capacities at the SLO" in fig.layout.title.text
    note = capacity_note(sweep, marks)
    assert note.startswith(ABOVE_CAPACITY) and "depends on the window" in note
    assert note.endswith("capacity at 90% SLO attainment on regime heavy's traffic (dotted lines): "
                         "tuned for heavy 4.6 req/s, per-bucket isolated-fastest 2.8 req/s.")
    # rows without capacities: no line, and the note says so
    bare = [_row(**schema_3_fields(capacity_rps=None, baseline_capacity_rps=None))]
    assert table_capacities(sweep, bare) == [] and table_capacities(sweep, []) == []
    assert not [t for t in sweep_figure(sweep, []).data if t.name.startswith("capacity")]
    assert "holds no capacity at the SLO for regime heavy" in capacity_note(sweep, [])


def test_a_capacity_study_draws_its_history_against_the_baselines_capacity() -> None:
    import optuna

    from tuner.dashboard.studies import history_figure, objective_label

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="tuner:p:heavy", direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 5), n_trials=3)
    fig = history_figure(study, 2.8, "profiles declared", "capacity", 0.9)
    assert "capacity at 90% SLO attainment simulated" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "capacity at 90% SLO attainment (req/s), simulated"
    assert [s.y0 for s in fig.layout.shapes] == [2.8]
    assert objective_label("goodput", 0.9) == "goodput"
    assert "goodput simulated" in history_figure(study, None, "profiles declared").layout.title.text
