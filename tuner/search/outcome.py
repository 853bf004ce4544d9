"""A regime's outcome: its tuned assignment with both figures, the baselines' and the oracle's.

After the study's trials, the regime's figures are made complete: goodput and, where
asked or maximised, capacity at the SLO, for the tuned assignment and every baseline,
reusing what the study already measured (:func:`complete_evaluation`) and, across the
regimes of one run, capacities of the same traffic shape (capacity does not depend on
the rate). The oracle walks the whole space by the study's own ranking rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..errors import SearchError, TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from .baselines import BASELINES, ONE_CONFIG, PER_BUCKET, ROUTING_AWARE, routing_aware
from .capacity import PROBES_PER_SEED
from .evaluate import Evaluation, check_constraints, evaluate
from .guard import guard
from .knob_axis import KnobKey, with_key
from ..problem.scenario import Scenario
from .objective import SimulationCount
from .parallel import IN_PROCESS, SeedRunner
from .ranking import Choice, best_of, evaluation_of, finished_trials, select_best
from .same_run import repeats_run
from .settings import TuneSettings
from .space import JointSpace
from .study import StudyProgress, Silent, run_study
from .trial_record import TrialRecord


@dataclass(frozen=True)
class OracleResult:
    """The exhaustive search, or why it was skipped (``best`` None: the space is too large).

    ``simulations`` counts the simulations this run made for it (points the study had
    already evaluated are reused); ``cost`` is what it costs from scratch, feasible
    points × seeds — the number the search's own simulation count is compared with.
    """

    size: int
    limit: int
    best: Choice | None = None
    simulations: int = 0
    cost: int = 0


@dataclass(frozen=True)
class RegimeOutcome:
    """Everything a regime's tuning produced, for the table and the report.

    ``tuned`` is what the table stores: the study's best, or THE baseline where the guard
    (:mod:`tuner.search.guard`) kept it, ``guard`` saying why and ``candidate`` holding
    the study's best it turned down. ``knobs`` are the engine knob values every figure
    was simulated with (the deployment's, :mod:`tuner.search.deployment`); where they are
    not the engine's own, ``defaults`` is issue 40's answer (a), the per-bucket baseline
    under the engine's defaults, and ``deployment`` why those knob values."""

    problem: Problem
    regime: str
    study_name: str
    space: JointSpace
    settings: TuneSettings
    horizon_s: float
    tuned: Choice
    baselines: Mapping[str, Choice]
    oracle: OracleResult | None
    trials: int
    study_simulations: int
    run_simulations: int
    objective: str = "goodput"
    guard: str | None = None
    candidate: Choice | None = None
    knobs: KnobKey = ()
    defaults: Choice | None = None
    deployment: str | None = None
    #: the finished trials that ran under ``knobs``: the configs' share of the study's
    #: budget where it searched several knob settings
    trials_under_knobs: int = 0

    @property
    def baseline(self) -> Choice:
        """THE baseline: the per-bucket isolated-fastest assignment."""
        return self.baselines[PER_BUCKET.name]


def tune_regime(
    problem: Problem,
    regime: str,
    storage: optuna.storages.BaseStorage | str,
    settings: TuneSettings | None = None,
    *,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
    progress: StudyProgress | None = None,
    capacities: dict | None = None,
    seed_runner: SeedRunner = IN_PROCESS,
) -> RegimeOutcome:
    """Run (or continue) the regime's study, then evaluate baselines and, if asked, the oracle.

    Args:
        callbacks: extra Optuna callbacks, called after each finished trial.
        progress: told the trial count and best goodput as trials finish.
        capacities: a memo of capacities to share across the regimes of one run (the
            capacity of an assignment on one traffic shape is the same in every regime
            that differs only in rate).
        seed_runner: where seeds are simulated (a pool the command opened).

    Raises:
        SearchError: the regime is unknown, the stored study was made with other seeds,
            horizon or problem file, or no assignment is feasible.
    """
    settings = settings or TuneSettings()
    study = run_study(problem, regime, storage, settings, callbacks=callbacks, progress=progress,
                      seed_runner=seed_runner)
    return regime_outcome(problem, regime, study, settings, progress=progress, capacities=capacities,
                          seed_runner=seed_runner)


def regime_outcome(
    problem: Problem,
    regime: str,
    study: optuna.Study,
    settings: TuneSettings,
    *,
    progress: StudyProgress | None = None,
    capacities: dict | None = None,
    knobs: KnobKey | None = None,
    seed_runner: SeedRunner = IN_PROCESS,
) -> RegimeOutcome:
    """The regime's tuned assignment from its study's finished trials, with both figures,
    the baselines' and, if asked, the oracle's (these simulate: seconds to minutes).

    Args:
        knobs: the engine knob values the regime is served with (default: the engine's
            own): only the trials run with them count, and every figure is simulated
            with them; when they are not the defaults, answer (a) is figured too.

    Raises:
        SearchError: no assignment is feasible.
    """
    progress = progress or Silent()
    space = JointSpace.of(problem)
    key = space.axis.defaults if knobs is None else knobs
    every = finished_trials(study)
    finished = with_key(every, space.axis, key)
    scenario = settings.scenario(problem, regime).on(space.axis.variant(problem, key))
    horizon, seeds = scenario.horizon_s, scenario.seeds
    counter = SimulationCount()
    baseline_assignments = {b.name: b.assignment(space) for b in BASELINES}
    routing = problem.regime(regime).routing
    if routing is not None and routing.source != "uniform":
        baseline_assignments[ROUTING_AWARE] = routing_aware(space, routing)
    known = known_evaluations(space, finished, len(seeds))
    tuned = select_best(space, finished, len(seeds))
    if tuned is None:
        fastest = baseline_assignments[PER_BUCKET.name]
        reason = known.get(fastest, Evaluation(())).constraints.reason or "every trial was infeasible"
        raise SearchError(f"{problem.path}: regime {regime!r}: no feasible assignment found in "
                          f"{len(finished)} trials ({PER_BUCKET.label}: {reason})")
    figures = _Figures(scenario, known, counter, capacities, progress.note, progress.simulated, key, seed_runner)
    progress.after_trials(figures.estimate([tuned.assignment, *baseline_assignments.values()],
                                           capacity=[tuned.assignment] + [a for key, a in baseline_assignments.items()
                                                                          if key in CAPACITY_BASELINES]))
    progress.note("baselines and capacities at the SLO (about ten simulations per seed each)")
    tuned = figures.choice(tuned.assignment, tuned.trial, capacity=True, label="tuned")
    baselines = {
        key: figures.choice(assignment, _trial_of(space, finished, assignment), capacity=key in CAPACITY_BASELINES,
                            label=key)
        for key, assignment in baseline_assignments.items()
    }
    oracle = None
    if settings.oracle:
        oracle = exhaustive(figures.scenario, space, settings.oracle_limit, known, counter, seed_runner)
    defaults = None
    if key != space.axis.defaults:  # answer (a): the per-bucket baseline under the engine's own settings
        at_defaults = dataclasses.replace(figures, scenario=figures.scenario.on(problem), knobs=space.axis.defaults,
                                          known=known_evaluations(
            space, with_key(every, space.axis, space.axis.defaults), len(seeds)))
        defaults = at_defaults.choice(baseline_assignments[PER_BUCKET.name], None, capacity=True,
                                      label="the engine's defaults")
    guarded = guard(tuned, baselines[PER_BUCKET.name], problem.objective)
    return RegimeOutcome(
        problem=problem, regime=regime, study_name=study.study_name, space=space, settings=settings,
        horizon_s=horizon, tuned=guarded.stored, baselines=baselines, oracle=oracle,
        guard=guarded.reason, candidate=tuned if guarded.kept_baseline else None,
        trials=len(every), study_simulations=sum(TrialRecord.of(t).simulations or 0 for t in every),
        run_simulations=counter.simulations, objective=problem.objective, knobs=key, defaults=defaults,
        trials_under_knobs=len(finished),
    )


def capacity_at_slo(problem: Problem, regime: str, study: optuna.Study, settings: TuneSettings, knobs: KnobKey,
                    assignment: Assignment, *, capacities: dict | None = None,
                    progress: StudyProgress | None = None, seed_runner: SeedRunner = IN_PROCESS) -> Evaluation:
    """``assignment``'s capacity at the SLO in ``regime`` with knob values ``knobs``: the
    study's where it maximised capacity, else searched, and remembered in ``capacities``
    (shared with the regimes' outcomes, which then find it there).

    Raises:
        TunerError: the capacity search failed (an illegal config at some probed rate).
    """
    progress = progress or Silent()
    space = JointSpace.of(problem)
    known = known_evaluations(space, with_key(finished_trials(study), space.axis, knobs), settings.seeds)
    scenario = settings.scenario(problem, regime).on(space.axis.variant(problem, knobs))
    figures = _Figures(scenario, known, SimulationCount(), capacities, progress.note, progress.simulated, knobs,
                       seed_runner)
    return figures.metric(assignment, "capacity", f"{space.axis.text(knobs)} in {regime}")


#: The baselines whose capacity a regime's outcome reports (the table stores the first two).
CAPACITY_BASELINES = (PER_BUCKET.name, ONE_CONFIG.name, ROUTING_AWARE)


@dataclass
class _Figures:
    """Both figures of a regime's tuned assignment and baselines: the study's objective from
    the study where it has them, the other metric computed. Capacities depend on the
    traffic shape, not the regime's rate, so ``capacities`` (shared across the regimes of
    one run) computes each (shape, assignment) once. ``note`` is told what is being
    simulated, seed by seed (the progress line of a phase that can take minutes)."""

    scenario: Scenario
    known: dict[Assignment, Evaluation]
    counter: SimulationCount
    capacities: dict[tuple[str, float, tuple[int, ...], KnobKey], dict[Assignment, Evaluation]] | None
    note: Callable[[str], None] = lambda text: None
    simulated: Callable[[int], None] = lambda count: None
    knobs: KnobKey = ()  # the problem's knob values (a capacity is remembered per deployment)
    seed_runner: SeedRunner = IN_PROCESS


    def estimate(self, goodput: Sequence[Assignment], capacity: Sequence[Assignment]) -> int:
        """About how many simulations the figures still need: each seed of a goodput the
        study does not hold in full, and a capacity search per seed for each assignment
        whose capacity on this traffic shape is not yet known."""
        scenario = self.scenario
        seeds, objective = len(scenario.seeds), scenario.problem.objective
        needed = sum(seeds for a in dict.fromkeys(goodput)
                     if not (objective == "goodput" and _complete(self.known.get(a), scenario.seeds, objective)))
        known = (self.capacities or {}).get(self._shape, {})
        needed += sum(PROBES_PER_SEED * seeds for a in dict.fromkeys(capacity)
                      if a not in known and not (objective == "capacity"
                                                 and _complete(self.known.get(a), scenario.seeds, objective)))
        return needed

    def metric(self, assignment: Assignment, metric: str, label: str = "") -> Evaluation:
        if metric != "capacity" or self.capacities is None:
            return self._complete(assignment, metric, label)
        known = self.capacities.setdefault(self._shape, {})
        if assignment not in known:
            twin = self._equivalent(assignment, known)
            known[assignment] = twin if twin is not None else self._complete(assignment, metric, label)
        return known[assignment]

    @property
    def _shape(self) -> tuple:
        """What a capacity depends on beside the assignment: the traffic shape, the window,
        the seeds and the deployment's knob values."""
        scenario = self.scenario
        return (scenario.spec.shape_key, scenario.horizon_s, scenario.seeds, self.knobs)

    def _equivalent(self, assignment: Assignment, known: Mapping[Assignment, Evaluation]) -> Evaluation | None:
        """A capacity already found on this shape whose every probe this assignment would
        repeat: the same reserved workspace and the same configs in every cell those probes
        launched (the search's path depends only on the probes' runs, so it is the same)."""
        reserved = check_constraints(self.scenario.problem, assignment, self.scenario.regime).reserved_bytes
        for other, found in known.items():
            if repeats_run(reserved, found.constraints.reserved_bytes, found.visited,
                           lambda cell: assignment.config(*cell) == other.config(*cell)):  # noqa: B023 (used at once)
                return found
        return None

    def _complete(self, assignment: Assignment, metric: str, label: str) -> Evaluation:
        what = f"{metric} of {label or 'an assignment'}"
        return complete_evaluation(self.scenario, assignment, self.known, self.counter, metric,
                                   note=lambda done: self.note(f"{what}: {done}"),
                                   simulated=self.simulated, seed_runner=self.seed_runner)

    def choice(self, assignment: Assignment, trial: int | None, capacity: bool, label: str = "") -> Choice:
        """``assignment`` with its goodput and, when asked or maximised, its capacity: the
        study's evaluations where they are complete (:func:`complete_evaluation` says when). A
        capacity that fails beside a goodput study is left out, with the error, so the
        goodput figures and the table's rows are still written."""
        found, error = None, None
        if self.scenario.problem.objective == "capacity":
            found = self.metric(assignment, "capacity", label)
        elif capacity:
            try:
                found = self.metric(assignment, "capacity", label)
            except TunerError as exc:
                error = str(exc)
        return Choice(assignment, self.metric(assignment, "goodput", label), trial, found, error, self.knobs)


def known_evaluations(space: JointSpace, trials: Sequence[FrozenTrial], n_seeds: int) -> dict[Assignment, Evaluation]:
    """What the study already knows per assignment: complete evaluations and infeasible
    verdicts, else the seeds a pruned trial measured (values of a prefix of the seeds)."""
    known: dict[Assignment, Evaluation] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        found = space.key(trial.params)
        if found is None:
            continue
        assignment = found[0]
        evaluation = evaluation_of(trial, space.problem.objective)
        previous = known.get(assignment)
        if previous is None or len(evaluation.values) > len(previous.values) or not evaluation.feasible:
            known[assignment] = evaluation
    return known


def _trial_of(space: JointSpace, trials: Sequence[FrozenTrial], assignment: Assignment) -> int | None:
    numbers = [t.number for t in trials if t.state == TrialState.COMPLETE
               and (found := space.key(t.params)) is not None and found[0] == assignment]
    return min(numbers) if numbers else None


def _complete(have: Evaluation | None, seeds: Sequence[int], metric: str) -> bool:
    """Whether the study's ``have`` serves as the full evaluation in ``metric``: an
    infeasible verdict, or every seed's value (and, for goodput, its realised rate)."""
    return have is not None and (not have.feasible or (
        len(have.values) == len(seeds) and (metric != "goodput" or len(have.rates) == len(seeds))))


def complete_evaluation(scenario: Scenario, assignment: Assignment, known: dict[Assignment, Evaluation],
                        counter: SimulationCount,
                        metric: str | None = None, note: Callable[[str], None] = lambda text: None,
                        simulated: Callable[[int], None] = lambda count: None,
                        seed_runner: SeedRunner = IN_PROCESS) -> Evaluation:
    """A full evaluation of ``assignment`` in ``metric`` (default: the study's objective):
    the study's if complete, else every seed simulated. A pruned trial's prefix of seeds
    is not reused: it lacks its seeds' realised rates and overload flags (goodput) or the
    cells its probes launched (capacity), which the figures and the capacity memo need."""
    problem, seeds = scenario.problem, scenario.seeds
    metric = metric or problem.objective
    have = known.get(assignment) if metric == problem.objective else None
    if have is not None and _complete(have, seeds, metric):
        return have

    probed = [0]  # probes counted as they ran (in this process only: a pool reports per seed)

    def count(step: int, value: float, simulations: int) -> None:
        counter.simulations += simulations
        simulated(max(simulations - probed[0], 0))
        probed[0] = max(probed[0] - simulations, 0)
        note(f"seed {step + 1}/{len(seeds)} done ({simulations} simulations)")

    def probe(rate: float, attainment: float) -> None:
        probed[0] += 1
        simulated(1)
        note(f"probed {rate:.3g} req/s: {attainment:.1%} met the SLO")

    note(f"{len(seeds)} seeds")
    result = evaluate(scenario, assignment, on_seed=count, metric=metric, on_probe=probe, seed_runner=seed_runner)
    if have is not None and have.latency_p50_s is not None and result.latency_p50_s is None:
        result = dataclasses.replace(result, latency_p50_s=have.latency_p50_s)
    if metric == problem.objective:
        known[assignment] = result
    return result


def exhaustive(scenario: Scenario, space: JointSpace, limit: int, known: dict[Assignment, Evaluation],
               counter: SimulationCount | None = None, seed_runner: SeedRunner = IN_PROCESS) -> OracleResult:
    """Evaluate every joint assignment of the space (when there are at most ``limit``)
    and keep the best, by the study's ranking rule (:func:`tuner.search.ranking.better`). The space holds each
    cell's non-dominated configs (:mod:`tuner.search.space`): a dominated one cannot win."""
    if space.size > limit:
        return OracleResult(space.size, limit)
    counter = counter or SimulationCount()
    before = counter.simulations
    evaluated = ((assignment, complete_evaluation(scenario, assignment, known, counter, seed_runner=seed_runner))
                 for assignment in map(space.assignment, space.points()))
    feasible = [(assignment, evaluation) for assignment, evaluation in evaluated if evaluation.feasible]
    best = best_of(feasible)
    choice = None if best is None else Choice(*best)
    return OracleResult(space.size, limit, choice, counter.simulations - before, len(feasible) * len(scenario.seeds))
