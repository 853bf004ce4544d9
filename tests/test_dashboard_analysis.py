"""What the dashboard's figures say: crossovers, regime rate buckets, the regime table's
runs of shape buckets, and timelines whose averages and integrals agree with the
simulator's own accounting."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import schema_3_fields
from tuner.dashboard.cells import bucket_spans, operator_runs
from tuner.store.table import span_label
from tuner.dashboard.sweep import Curve, Sweep, order_changes, rate_bucket, run_sweep, sweep_rates
from tuner.dashboard.timeline import bin_averages, record, step_integrals
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment
from tuner.store.table import TableRow

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


def test_the_regime_table_has_one_line_per_regime() -> None:
    from types import SimpleNamespace

    from tuner.dashboard.render import index_body

    rows = [*_m_rows("aaba", "aaaa"), _row(op="attn", op_index=1, config="flash", baseline="flash"),
            *(_row(regime="light", op=op, bucket=b, config="a", baseline="a", goodput_rps=100.0, goodput_ci_rps=None,
                   baseline_goodput_rps=100.0, delta_ci_rps=None, one_config_goodput_rps=None)
              for op, b in (("qkv", 0), ("attn", 0)))]
    html = index_body(SimpleNamespace(storage="sqlite:///x.db", optuna_dashboard_url=None), rows)
    lines = re.findall(r'<tr data-problem="p" data-regime="(\w+)">(.*?)</tr>', html)
    assert [regime for regime, _ in lines] == ["heavy", "light"]
    heavy, light = (dict(re.findall(r'<td class="([\w-]+)">(.*?)</td>', line)) for _, line in lines)
    assert heavy["goodput"] == "749.17 ± 39.21" and heavy["baseline"] == "72.67" and heavy["ratio"] == "10.31×"
    assert heavy["delta"] == "+676 ± 71" and heavy["one-config"] == "60.00"
    assert 'class=differs title="name=b; per-bucket isolated-fastest: a">M33..64:b*</span>' in heavy["configs"]
    assert "<b>attn</b> " in heavy["configs"] and "M..32:a" in heavy["configs"]
    assert (light["goodput"], light["delta"], light["one-config"]) == ("100.00", "+0", "—")
    assert "<th>per-bucket isolated-fastest</th>" in html and ">one config per operator</th>" in html
