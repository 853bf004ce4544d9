"""The guard (tuner.search.guard): a regime stores the study's configs only where they beat
THE baseline (per-bucket isolated-fastest) beyond the paired interval and lose on nothing.

The end-to-end case is ``tests/problems/guard_trap.yaml``, built so that the study's best
wins goodput at the regime's rate and loses capacity, with bounds worked out by hand:
``quick`` takes 1 ms + 1 ms per request, so it serves at most 1,000 req/s whatever the
batch; ``steady`` serves 64 requests per 10 ms, 6,400 req/s, and at the regime's 500
req/s a request that arrives while a batch runs waits up to 10 ms, past the 19.5 ms
deadline when it waits more than 9.5 ms, while ``quick``'s batches of about one request
finish in ~2 ms: ``quick`` has the goodput, ``steady`` the capacity.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.problem.assignment import Assignment
from tuner.search.evaluate import Constraints, Evaluation
from tuner.search.guard import figures, guard
from tuner.search.ranking import Choice

ROOT = Path(__file__).resolve().parents[1]
TRAP = ROOT / "tests" / "problems" / "guard_trap.yaml"
KEPT = "kept the per-bucket isolated-fastest configs: "


@pytest.fixture(scope="module")
def trapped(tmp_path_factory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("guard") / "g.db"
    result = CliRunner().invoke(main, ["tune", str(TRAP), "--storage", f"sqlite:///{path}", "--trials", "4",
                                       "--horizon", "2"])
    assert result.exit_code == 0, (result.output, result.exception)
    return path, result.stdout


def test_a_goodput_gain_that_costs_capacity_stores_the_baseline_and_says_why(trapped) -> None:
    path, out = trapped
    with sqlite3.connect(path) as conn:
        [(config, baseline, guard_text, goodput, base_goodput, capacity)] = conn.execute(
            "SELECT config, baseline_config, guard, goodput_rps, baseline_goodput_rps, capacity_rps "
            "FROM tuner_configs").fetchall()
        [(variant,)] = conn.execute(
            "SELECT p.param_value FROM trials t JOIN trial_params p USING (trial_id) JOIN trial_values v "
            "USING (trial_id) ORDER BY v.value DESC LIMIT 1").fetchall()
    assert (config, baseline) == ("steady", "steady") and variant == 1.0  # the study's best: quick (index 1)
    assert guard_text.startswith(KEPT + "goodput +") and "but capacity at the SLO -" in guard_text
    assert guard_text.endswith("req/s is a loss")
    assert goodput == base_goodput and capacity > 1000  # the stored figures are steady's
    assert "moderate: stored the per-bucket isolated-fastest configs" in out and guard_text in out


def test_the_table_readers_show_the_guard(trapped) -> None:
    """gate and attribute warn that the regime holds the baseline; the dashboard's verdict
    is the reason; ``table show`` prints it under the regime."""
    from tuner.attribution import assignments_per_regime
    from tuner.dashboard.verdicts import verdict
    from tuner.problem import load_problem
    from tuner.runtime.served import read_table

    path, _ = trapped
    problem = load_problem(TRAP)
    told: list[str] = []
    assignments_per_regime(problem, f"sqlite:///{path}", ["moderate"], "CAND", told.append)
    [line] = told
    assert line.endswith(": CAND: regime moderate: " + read_table(path).regime_rows("moderate")[0].guard)
    assert verdict(read_table(path).regime_rows("moderate")).startswith(KEPT)
    shown = CliRunner().invoke(main, ["table", "show", "--storage", f"sqlite:///{path}"])
    assert shown.exit_code == 0 and "guard_trap / moderate: " + KEPT in shown.stdout


# --- the rule, on hand-made evaluations ----------------------------------------------------

A, B = Assignment((("op", ()),)), Assignment((("op", (None,)),))


def _choice(assignment: Assignment, goodput: tuple[float, ...], capacity: tuple[float, ...] | None = None,
            p90: tuple[float, ...] = ()) -> Choice:
    return Choice(assignment, Evaluation(goodput, latency_p90_s=p90),
                  capacity=None if capacity is None else Evaluation(capacity, metric="capacity"))


def test_a_significant_gain_losing_nothing_is_stored() -> None:
    tuned = _choice(A, (11.0, 12.0, 13.0), (20.0, 21.0, 22.0), (0.010, 0.011, 0.012))
    base = _choice(B, (10.0, 10.5, 11.0), (20.0, 20.5, 21.0), (0.010, 0.011, 0.012))
    assert guard(tuned, base, "goodput").stored is tuned and guard(tuned, base, "goodput").reason is None


def test_a_tie_broken_by_latency_is_not_a_gain() -> None:
    """toy_llm's case: equal goodput on every seed; the study preferred a lower median
    latency, and lost capacity (per seed -0.5, -0.4, -0.5: -0.47 ± 4.30 x 0.058 / sqrt 3)."""
    tuned, base = _choice(A, (4.0, 4.0, 3.9), (18.5, 19.0, 19.2)), _choice(B, (4.0, 4.0, 3.9), (19.0, 19.4, 19.7))
    kept = guard(tuned, base, "goodput")
    assert kept.stored is base and kept.reason == KEPT + "capacity at the SLO -0.47 ± 0.14 req/s is a loss"
    level = _choice(A, (4.0, 4.0, 3.9), (19.0, 19.4, 19.7))
    assert guard(level, base, "goodput").reason == \
        KEPT + "goodput +0 ± 0 req/s and capacity at the SLO +0 ± 0 req/s are not gains"


def test_a_gain_within_its_interval_is_not_a_gain() -> None:
    kept = guard(_choice(A, (10.0, 12.0, 10.5)), _choice(B, (10.0, 10.0, 11.0)), "goodput")
    assert kept.stored.assignment == B and kept.reason.endswith("req/s is not a gain")


def test_a_capacity_gain_with_goodput_tied_is_stored_under_either_objective() -> None:
    """The seed example's bursty regime: both serve the regime's rate, one has headroom."""
    tuned = _choice(A, (10.0, 10.0, 10.0), (22.0, 23.0, 24.0))
    base = _choice(B, (10.0, 10.0, 10.0), (20.0, 20.5, 21.0))
    assert guard(tuned, base, "capacity").reason is None
    assert guard(tuned, base, "goodput").reason is None
    assert guard(base, tuned, "capacity").reason == KEPT + "capacity at the SLO -2.5 ± 1.2 req/s is a loss"  # -2, -2.5, -3


def test_a_longer_tail_is_a_loss() -> None:
    tuned = _choice(A, (11.0, 12.0, 13.0), p90=(0.030, 0.031, 0.032))
    base = _choice(B, (10.0, 10.5, 11.0), p90=(0.010, 0.011, 0.012))
    assert guard(tuned, base, "goodput").reason == KEPT + "goodput +1.5 ± 1.2 req/s, but p90 latency +20 ± 0 ms is a loss"


def test_a_tail_measured_while_falling_behind_is_not_compared() -> None:
    """Where either assignment's backlog grew through the window on some seed, its p90
    depends on the window's length, as its goodput does: the gain stands on goodput."""
    tuned = _choice(A, (11.0, 12.0, 13.0), p90=(0.030, 0.031, 0.032))
    base = _choice(B, (10.0, 10.5, 11.0), p90=(0.010, 0.011, 0.012))
    behind = Choice(B, dataclasses.replace(base.evaluation, overloaded=1))
    assert set(figures(tuned, behind)) == {"goodput"}
    assert guard(tuned, behind, "goodput").reason is None


def test_one_seed_shows_no_gain() -> None:
    kept = guard(_choice(A, (12.0,)), _choice(B, (10.0,)), "goodput")
    assert kept.stored.assignment == B and "from one seed shows no gain" in kept.reason and "--seeds 2" in kept.reason


def test_nothing_to_guard_against() -> None:
    """The same configs, or a baseline that cannot run at all (it serves nothing)."""
    same = _choice(A, (10.0, 11.0))
    assert guard(same, _choice(A, (10.0, 11.0)), "goodput").stored is same
    infeasible = Choice(B, Evaluation((), Constraints(memory=0.5)))
    tuned = _choice(A, (1.0, 1.0))
    assert guard(tuned, infeasible, "goodput").stored is tuned


def test_a_deployment_is_set_aside_for_throughput_lost_not_for_a_longer_tail() -> None:
    """The engine setting's rule (tuner.search.deployment): more sequences per step serve
    more within the SLO and take longer per request; the p90 is reported, not a veto.
    Per seed, p90 +20 ms each (interval 0); capacity -2, -2.5, -3 = -2.5 ± 1.2."""
    from tuner.search.deployment import latency_change, loss_against_defaults

    slower = _choice(A, (10.0, 10.0, 10.0), (22.0, 23.0, 24.0), (0.030, 0.031, 0.032))
    defaults = _choice(B, (10.0, 10.0, 10.0), (20.0, 20.5, 21.0), (0.010, 0.011, 0.012))
    assert loss_against_defaults(slower, defaults) is None
    assert latency_change(slower, defaults) == \
        "p90 latency +20 ± 0 ms against the engine's defaults (their goodput and capacity at the SLO held)"
    assert loss_against_defaults(defaults, slower) == \
        "capacity at the SLO -2.5 ± 1.2 req/s worse than the engine's defaults"
    assert latency_change(defaults, slower) is None
