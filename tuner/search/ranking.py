"""Which of two evaluated assignments wins: the one ranking rule of the study and the oracle.

More of the objective wins; two within :data:`TIE_TOLERANCE` of each other tie, and a
tie goes to the lower median latency, then to the one met first (the earlier trial, the
earlier point of the oracle's walk). The study's trials are read back here as
:class:`~tuner.search.evaluate.Evaluation` values, so the study, the oracle and the
figures compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..problem.assignment import Assignment
from .evaluate import Constraints, Evaluation
from .knob_axis import KnobKey
from .space import JointSpace
from .trial_record import TrialRecord

if TYPE_CHECKING:
    from .local import Incumbent

#: The trial states that count as done: complete, or pruned (it measured a prefix of the seeds).
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

#: Objective values within this relative distance of each other tie (broken by latency).
TIE_TOLERANCE = 1e-9

T = TypeVar("T")


@dataclass(frozen=True)
class Choice:
    """A joint assignment and its evaluation in the study's objective; ``trial`` is its
    study trial number, if any. A regime's outcome fills in both figures: ``evaluation``
    is then always goodput and ``capacity`` the capacity at the SLO, whichever the study
    maximised; ``capacity_error`` says why a capacity asked for beside a goodput study
    is missing (its goodput and the rows stand without it)."""

    assignment: Assignment
    evaluation: Evaluation
    trial: int | None = None
    capacity: Evaluation | None = None
    capacity_error: str | None = None
    knobs: KnobKey = ()  # the engine knob values it ran with (:mod:`tuner.search.knob_axis`)


def better(a: Evaluation, b: Evaluation) -> bool:
    """Whether ``a`` beats ``b``: strictly more of the objective, or a tie with lower
    median latency (an unknown latency ranks last). Equal in both: ``b``, met first, stays."""
    if a.mean > b.mean + abs(b.mean) * TIE_TOLERANCE:
        return True
    if a.mean < b.mean - abs(b.mean) * TIE_TOLERANCE:
        return False
    return _latency_key(a.latency_p50_s) < _latency_key(b.latency_p50_s)


def best_of(candidates: Iterable[tuple[T, Evaluation]]) -> tuple[T, Evaluation] | None:
    """The winner of ``candidates`` (in the order they were met) by :func:`better`; None for none."""
    best: tuple[T, Evaluation] | None = None
    for candidate in candidates:
        if best is None or better(candidate[1], best[1]):
            best = candidate
    return best


def select_best(space: JointSpace, trials: Sequence[FrozenTrial], n_seeds: int,
                knobs: KnobKey | None = None) -> Choice | None:
    """The best feasible complete trial (every seed measured) by :func:`better`, earlier
    trials met first, among those run with knob values ``knobs`` (None: any). None when
    no trial qualifies."""
    metric = space.problem.objective
    keyed = ((t, key) for t in trials if t.state == TrialState.COMPLETE and not _infeasible(t)
             and len(t.intermediate_values) == n_seeds and (key := space.key(t.params)) is not None
             and (knobs is None or key[1] == knobs))
    best = best_of(((t, key), evaluation_of(t, metric)) for t, key in sorted(keyed, key=lambda pair: pair[0].number))
    if best is None:
        return None
    (trial, (assignment, found)), evaluation = best
    return Choice(assignment, evaluation, trial.number, knobs=found)


def incumbent(space: JointSpace, study: optuna.Study, n_seeds: int, knobs: KnobKey | None = None
              ) -> Incumbent | None:
    """The study's best assignment so far (among the trials run with knob values ``knobs``;
    None: any), its knob values and the cells its simulations used (None: not recorded)."""
    trials = finished_trials(study)
    best = select_best(space, trials, n_seeds, knobs)
    if best is None:
        return None
    visited = next(TrialRecord.of(t).visited for t in trials if t.number == best.trial)
    return best.assignment, best.knobs, (frozenset(visited) if visited else None)


def evaluation_of(trial: FrozenTrial, metric: str) -> Evaluation:
    """What a finished trial measured, as the evaluation that produced it."""
    values = tuple(v for _, v in sorted(trial.intermediate_values.items()))
    recorded = TrialRecord.of(trial)
    constraints = Constraints(trial.constraints.get("memory", 0.0), trial.constraints.get("legality", 0.0),
                              recorded.infeasible)
    return recorded.evaluation(values, constraints, metric)


def finished_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's complete and pruned trials, in trial order."""
    return study.get_trials(deepcopy=False, states=FINISHED)


def _infeasible(trial: FrozenTrial) -> bool:
    return any(v > 0.0 for v in trial.constraints.values())


def _latency_key(latency: float | None) -> float:
    return math.inf if latency is None else latency
