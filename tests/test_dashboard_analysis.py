"""What the dashboard's figures say: crossovers, regime buckets, and timelines whose
averages and integrals agree with the simulator's own accounting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tuner.dashboard.sweep import Curve, Sweep, bucket, order_changes, run_sweep, sweep_rates
from tuner.dashboard.timeline import bin_averages, record, step_integrals
from tuner.problem import load_problem

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


def test_sweep_spans_every_regime_bucket() -> None:
    problem = load_problem(ROOT / "search_spaces" / "llm_decode.yaml")
    buckets = [bucket(r) for r in problem.regimes.values()]
    assert (buckets[0].low, buckets[0].high) == (0.5, 1.5)
    rates = sweep_rates(buckets, 8)
    assert rates[0] == pytest.approx(0.25) and rates[-1] == pytest.approx(12.5)
    seed = load_problem(SEED)  # fixed rates are buckets of zero width
    assert [(b.low, b.high) for b in map(bucket, seed.regimes.values())] == [(100, 100), (300, 300), (720, 720)]


def test_seed_example_crossover_is_where_fast_saturates() -> None:
    """fast serves 4 admitted requests in 8 ms (c/S = 500 req/s), lean 8 in 10 ms (800 req/s):
    lean must pull ahead of fast exactly in the sweep interval that holds 500 req/s, once."""
    problem = load_problem(SEED)
    family = problem.family_of("stage")
    lean, fast = {"stage": family.find(name="lean")}, {"stage": family.find(name="fast")}
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
    lean = {"stage": problem.family_of("stage").find(name="lean")}
    runs = [run_sweep(problem, STORAGE, [("lean", lean, True)], points=3, seeds=2, min_requests=50,
                      min_horizon_s=1.0, max_horizon_s=2.0) for _ in range(2)]
    assert runs[0] == runs[1]


def test_crossovers_compare_each_tuned_curve_with_the_baseline() -> None:
    sweep = Sweep("p", "r", (1.0, 2.0, 3.0), (1.0,) * 3, 1,
                  (Curve("a", ((1.0,), (2.0,), (3.0,))), Curve("b", ((2.0,), (2.0,), (2.0,)), is_baseline=True)),
                  (), ("declared",))
    (c,) = sweep.crossovers()  # a: behind at 1, level at 2, ahead at 3
    assert (c.label, c.low, c.high, c.tuned_wins_above, c.estimate) == ("a", 2.0, 3.0, True, None)
    assert c.describe() == ("a pulls ahead of the isolated-fastest assignment between 2 and 3 req/s offered "
                            "(at 3 req/s: +1 req/s, paired over seeds)")


@pytest.mark.parametrize("variant", ["lean", "fast"])
def test_timeline_averages_agree_with_the_simulators_integrals(variant: str) -> None:
    """The plotted bins come from the recording; Metrics integrates separately inside the
    simulator loop. Both must give the same memory and SM-time integrals."""
    problem = load_problem(SEED)
    timeline = record(problem, {"stage": problem.family_of("stage").find(name=variant)}, "bursty", 3.0, variant)
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
