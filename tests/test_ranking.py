"""One ranking rule for the study's pick and the oracle's (``tuner.search.ranking``), checked
on hand-made evaluations and trials: more goodput wins; a tie (relative 1e-9) goes to the
lower median latency, then to the one met first."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution

from tuner.search.evaluate import Evaluation
from tuner.search.ranking import best_of, better, select_best


def ev(goodput: float, latency: float | None) -> Evaluation:
    return Evaluation((goodput, goodput), latency_p50_s=latency)


@pytest.mark.parametrize(("a", "b", "a_wins"), [
    (ev(101.0, 0.9), ev(100.0, 0.1), True),  # more goodput wins whatever the latency
    (ev(100.0, 0.2), ev(100.0, 0.1), False),  # a tie: the lower latency
    (ev(100.0, 0.1), ev(100.0 * (1 + 5e-10), 0.2), True),  # within the tolerance is a tie
    (ev(100.0, 0.1), ev(100.0, 0.1), False),  # equal in both: the one met first stays
    (ev(100.0, 0.1), ev(100.0, None), True),  # an unknown latency ranks last
])
def test_better_by_hand(a, b, a_wins):
    assert better(a, b) is a_wins


class _Space:
    """What select_best reads of a JointSpace: the objective and each trial's assignment
    (here its one cell's config name) and knob values."""

    class problem:  # noqa: N801 - stands in for the Problem attribute
        objective = "goodput"

    def key(self, params):
        return (params["cell"], ()) if "cell" in params else None


def trial(number: int, cell: str, goodput: float, latency: float) -> optuna.trial.FrozenTrial:
    made = optuna.trial.create_trial(
        params={"cell": cell}, distributions={"cell": CategoricalDistribution(["a", "b", "c", "d"])},
        value=goodput, intermediate_values={0: goodput, 1: goodput},
        user_attrs={"latency_p50_s": latency}, constraints={"memory": 0.0, "legality": 0.0})
    made.number = number
    return made


def test_the_study_and_the_oracle_pick_alike_on_ties():
    """Equal goodput: the lower latency wins in the study's pick and the oracle's walk
    alike; equal latency too: the earlier."""
    trials = [trial(0, "a", 100.0, 0.3), trial(1, "b", 100.0, 0.1), trial(2, "c", 99.0, 0.01),
              trial(3, "d", 100.0, 0.1)]
    study_pick = select_best(_Space(), trials, n_seeds=2)  # type: ignore[arg-type]
    assert study_pick is not None and study_pick.assignment == "b" and study_pick.trial == 1
    oracle_pick = best_of([(t.params["cell"], ev(t.value, t.user_attrs["latency_p50_s"])) for t in trials])
    assert oracle_pick is not None and oracle_pick[0] == "b"
