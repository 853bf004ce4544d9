"""Optuna's objective for one regime: a trial's assignment scored by simulation, or by a result
the study already holds.

A trial's value is the mean of the objective over the seeds; each seed's value is
reported at its step, so the Wilcoxon pruner compares it with the best trial pairwise.
A result is reused, never simulated twice, in three cases, all recorded the one way
(:func:`copy_result`): the run's rehearsal of this very trial, an earlier trial of the
same assignment, and an earlier trial whose run this assignment repeats
(:mod:`tuner.search.same_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import optuna
from optuna.trial import FrozenTrial, TrialState

from .. import interrupts
from ..problem.scenario import Scenario
from .evaluate import Constraints, check_constraints, evaluate
from .knob_axis import KnobKey
from .local import suggest
from ..problem.assignment import Assignment
from .parallel import IN_PROCESS, SeedRunner
from .ranking import FINISHED
from .same_run import repeats_run
from .space import JointSpace
from .trial_record import BOOKKEEPING, TrialRecord


@dataclass
class SimulationCount:
    """Simulations run so far (a run's total, shared by its objective, figures and oracle)."""

    simulations: int = 0


@dataclass
class Objective:
    """Optuna's objective for one regime; holds only the run's constants (re-entrant).
    ``scenario`` is the regime's, on the problem as written; each trial's knob values make
    the deployment it is simulated on."""

    scenario: Scenario
    space: JointSpace
    counter: SimulationCount = field(default_factory=lambda: SimulationCount())
    p_threshold: float = 0.1
    rehearsed: dict[tuple[Assignment, KnobKey], FrozenTrial] = field(default_factory=dict)
    seed_runner: SeedRunner = IN_PROCESS

    def __call__(self, trial: optuna.Trial) -> float:
        space = self.space
        assignment, knobs = suggest(trial, space), space.axis.suggest(trial)
        if (assignment, knobs) in self.rehearsed:  # the rehearsal ran this very trial
            return copy_result(trial, self.rehearsed.pop((assignment, knobs)))
        prior = self._prior(trial, (assignment, knobs))
        if prior is not None:
            return copy_result(trial, prior, {"duplicate_of": prior.number})
        scenario = self.scenario.on(space.axis.variant(self.scenario.problem, knobs))  # the deployment
        constraints = check_constraints(scenario.problem, assignment, scenario.regime)
        twin = self._equivalent(trial, assignment, knobs, constraints) if constraints.feasible else None
        if twin is not None:
            return copy_result(trial, twin, {"duplicate_of": twin.number, "equivalent_to": twin.number})
        simulations = 0

        def on_seed(step: int, value: float, runs: int) -> None:
            nonlocal simulations
            simulations += runs
            self.counter.simulations += runs
            with interrupts.shielded():
                trial.report(value, step)
                # with n paired seeds the Wilcoxon test's smallest one-sided p-value is 2**-n:
                # ask the pruner only when it could say yes (asking reads every trial)
                if step < len(scenario.seeds) - 1 and 2.0 ** -(step + 1) < self.p_threshold and trial.should_prune():
                    record(trial, TrialRecord.run(Constraints(), simulations), Constraints())
                    raise optuna.TrialPruned(f"worse than the best trial after {step + 1} seeds (Wilcoxon)")

        with interrupts.interruptible():  # the simulations; what the trial writes waits for them
            evaluation = evaluate(scenario, assignment, on_seed, metric=scenario.problem.objective,
                                  seed_runner=self.seed_runner)
        index = {cell: i for i, cell in enumerate(space.cells)}
        record(trial, TrialRecord.run(evaluation.constraints, simulations, evaluation, index), evaluation.constraints)
        return evaluation.mean

    def _prior(self, trial: optuna.Trial, key: tuple[Assignment, KnobKey]) -> FrozenTrial | None:
        for other in trial.study.get_trials(deepcopy=False, states=FINISHED):
            if other.number != trial.number and self.space.key(other.params) == key:
                return other
        return None

    def _equivalent(self, trial: optuna.Trial, assignment: Assignment, knobs: KnobKey,
                    constraints: Constraints) -> FrozenTrial | None:
        """A complete trial (every seed measured) with the same knob values whose run this
        assignment repeats (:func:`tuner.search.same_run.repeats_run`)."""
        mine = assignment.in_cell_order
        for other in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if len(other.intermediate_values) != len(self.scenario.seeds) or self.space.axis.trial_key(other) != knobs:
                continue
            found = self.space.key(other.params)
            if found is None:
                continue
            theirs = found[0].in_cell_order
            recorded = TrialRecord.of(other)
            # the space's configs are one object per name: identity first, value for any other
            if repeats_run(constraints.reserved_bytes, recorded.reserved_bytes, recorded.visited,
                           lambda i: theirs[i] is mine[i] or theirs[i] == mine[i]):  # noqa: B023 (used at once)
                return other
        return None


def copy_result(trial: optuna.Trial, source: FrozenTrial, marks: Mapping[str, int] | None = None) -> float:
    """Record ``source``'s result as ``trial``'s without simulating: each seed's value at
    its step, the constraints, and what the source recorded of its run (latency, workspace,
    cells launched, realised rates); pruned again where it was pruned.

    ``marks`` None: ``source`` ran for this very trial (its rehearsal), and is copied as it
    is, its simulations included. Otherwise it is another trial whose result this one
    repeats: its bookkeeping stays its own, and this trial records no simulation and
    ``marks`` (which trial it repeats)."""
    for step, value in sorted(source.intermediate_values.items()):
        trial.report(value, step)
    for key, value in source.constraints.items():
        trial.set_constraint(key, value)
    recorded = TrialRecord.of(source)
    if marks is None:
        recorded.write(trial)
    else:  # the bookkeeping stays this trial's own (its worker is already set)
        own = {**dict.fromkeys(BOOKKEEPING), "simulations": 0, **marks}
        replace(recorded, **own).write(trial)
    if source.state == TrialState.PRUNED:
        raise optuna.TrialPruned("pruned in its rehearsal" if marks is None
                                 else f"same assignment as pruned trial {source.number}")
    return float(source.value)


def record(trial: optuna.Trial, recorded: TrialRecord, constraints: Constraints) -> None:
    """Record on ``trial`` its constraints (Optuna's, which its samplers read) and what it
    records of its run (:class:`~tuner.search.trial_record.TrialRecord`)."""
    for key, value in constraints.values().items():
        trial.set_constraint(key, value)
    recorded.write(trial)
