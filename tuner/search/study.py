"""One Optuna study per (problem, regime): objective, warm starts, pruning, the pick.

Contract of a study (DESIGN §5). It is named ``tuner:{problem}:{regime}`` and lives
in any storage Optuna accepts; everything a worker needs is in that storage, so many
workers on many machines may share it (run the same command against the same URL).
The study's user attributes record what its numbers mean — regime description, seeds,
horizon, problem-file hash — and a run with other settings is refused rather than
mixed in. One trial is one joint assignment: a categorical parameter per (operator,
bucket) cell, named ``op`` or ``op@BUCKET`` (:mod:`tuner.search.space`), proposed by
the local-search sampler of :mod:`tuner.search.local`. Its value is the mean goodput over
seeds ``base_seed + k``; each seed's goodput is reported at step ``k`` so the Wilcoxon
pruner compares it with the best trial pairwise (common random numbers). Constraints
(memory, legality) are set with ``trial.set_constraint`` and mirrored in the user
attribute ``constraint`` as ``[memory, legality]``; infeasible trials score 0.

Warm starts (enqueued once): the per-bucket isolated-fastest assignment (THE baseline),
the one-config-per-operator and smallest-footprint baselines, the *footprint ladder*
(per workspace cap, each cell's fastest config under it — the engine reserves the peak
workspace, so this is the memory trade-off's natural axis), and the best of the
neighbouring regimes' studies. So the tuned assignment is never below a baseline by
construction — which is why the tests judge the search against the oracle and a
hand-derived optimum instead.

Optuna commits each finished trial, so an interruption loses at most the trial in
flight, and a rerun continues: ``trials`` is the target number of finished (complete
or pruned) trials in the study, not the number to add. A point already evaluated in
the study is not simulated again: the new trial replays the stored values.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..errors import SearchError, TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from .. import interrupts
from .baselines import BASELINES, ONE_CONFIG, PER_BUCKET, ROUTING_AWARE, footprint_ladder, routing_aware
from .evaluate import Constraints, Evaluation, check_constraints, evaluate
from .local import LocalSearchSampler, names_of, suggest
from .settings import TuneSettings
from .space import JointSpace, Point

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

#: Goodputs within this relative distance of the best count as a tie (broken by latency).
TIE_TOLERANCE = 1e-9


def study_name(problem: str, regime: str) -> str:
    return f"tuner:{problem}:{regime}"


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
    """Everything a regime's tuning produced, for the table and the report."""

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

    @property
    def baseline(self) -> Choice:
        """THE baseline: the per-bucket isolated-fastest assignment."""
        return self.baselines[PER_BUCKET.name]


class Progress(Protocol):
    """What a study reports while it runs (the CLI draws a bar; the default does nothing)."""

    def start(self, regime: str, done: int, total: int) -> None: ...

    def update(self, done: int, best: float | None) -> None: ...

    def finish(self) -> None: ...

    def note(self, text: str) -> None:
        """What the regime does after its trials (baselines, capacities): seconds to minutes."""


class _Silent:
    def start(self, regime: str, done: int, total: int) -> None:
        pass

    def update(self, done: int, best: float | None) -> None:
        pass

    def finish(self) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class _Counter:
    simulations: int = 0


def tune_regime(
    problem: Problem,
    regime: str,
    storage: optuna.storages.BaseStorage | str,
    settings: TuneSettings | None = None,
    *,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
    progress: Progress | None = None,
    capacities: dict | None = None,
) -> RegimeOutcome:
    """Run (or continue) the regime's study, then evaluate baselines and, if asked, the oracle.

    Args:
        callbacks: extra Optuna callbacks, called after each finished trial.
        progress: told the trial count and best goodput as trials finish.
        capacities: a memo of capacities to share across the regimes of one run (the
            capacity of an assignment on one traffic shape is the same in every regime
            that differs only in rate).

    Raises:
        SearchError: the regime is unknown, the stored study was made with other seeds,
            horizon or problem file, or no assignment is feasible.
    """
    settings = settings or TuneSettings()
    study = run_study(problem, regime, storage, settings, callbacks=callbacks, progress=progress)
    return regime_outcome(problem, regime, study, settings, progress=progress, capacities=capacities)


class TrialGate(Protocol):
    """How a study's trials are started when other workers may share it (:mod:`tuner.search.leases`).

    The count-then-start of a trial, and the warm starts' enqueueing, run inside
    :meth:`exclusive`, so that workers together never start more trials than the budget
    nor enqueue a warm start twice."""

    #: Whether trials other workers are running count against the budget (a fleet:
    #: yes, so the study ends with exactly its budget; one process: no). Only trials that
    #: record a ``worker`` count: a RUNNING trial left by a version without heartbeats
    #: would never end.
    counts_running: bool
    #: Recorded on each trial as the user attribute ``worker`` (None: not recorded).
    worker: str | None

    def exclusive(self) -> AbstractContextManager[Callable[[], None]]:
        """Hold the study's start lock; the value releases it early (idempotent)."""

    def wait(self) -> None:
        """Pause while other workers' trials fill the budget."""


class _Alone:
    """The gate of one process alone on its storage: no lock, running trials not counted."""

    counts_running = False
    worker = None

    @contextmanager
    def exclusive(self) -> Iterator[Callable[[], None]]:
        yield lambda: None

    def wait(self) -> None:  # pragma: no cover - nothing else runs trials
        raise AssertionError("a lone process never waits for other workers")


def run_study(
    problem: Problem,
    regime: str,
    storage: optuna.storages.BaseStorage | str,
    settings: TuneSettings,
    *,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
    progress: Progress | None = None,
    gate: TrialGate | None = None,
    salt: str = "",
    rehearse: bool = False,
    neighbours: optuna.storages.BaseStorage | None = None,
) -> optuna.Study:
    """Open (or create) the regime's study and run trials until it holds ``settings.trials``
    finished ones, or every point of the space has been tried.

    Args:
        gate: how trials start when other workers share the study (default: alone).
        salt: mixed into the sampler's seed, so workers that start together propose
            different points ("" for the first or only worker: same seed, same table).
        rehearse: run the study's next trial in a copy in memory before writing anything
            (:func:`_rehearsal`), so that a run that fails before a trial finished leaves
            the storage as it was.
        neighbours: where the other regimes' studies are read for warm starts (default:
            ``storage``).

    Raises:
        SearchError: the regime is unknown, or the stored study was made with other seeds,
            horizon or problem file.
    """
    problem.regime(regime)
    progress = progress or _Silent()
    gate = gate or _Alone()
    space = JointSpace.of(problem)
    horizon = settings.horizon_s if settings.horizon_s is not None else problem.regimes[regime].horizon_s
    seeds = settings.seed_list
    for baseline in BASELINES:  # a space without a legal baseline is refused before any write
        baseline.assignment(space)
    if isinstance(storage, str):
        storage = optuna.storages.RDBStorage(storage)
    rehearsed = _rehearsal(problem, regime, storage, settings, salt) if rehearse else {}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        pruner = optuna.pruners.WilcoxonPruner(p_threshold=settings.p_threshold, n_startup_steps=2)
    study = optuna.create_study(study_name=study_name(problem.name, regime), storage=storage,
                                direction="maximize", pruner=pruner, load_if_exists=True)
    _check_attrs(study, study_attrs(problem, regime, seeds, horizon))
    finished = _finished(study)
    # Seeded by the run's seed, the regime and the trials already there: the same command
    # on the same storage suggests the same points, and a resumed run does not replay the
    # suggestions its first part already evaluated.
    study.sampler = LocalSearchSampler(
        space, lambda s: _incumbent(space, s, len(seeds)),
        seed=zlib.crc32(f"{settings.base_seed}:{regime}:{len(finished)}{salt}".encode()) & 0x7FFFFFFF,
    )
    progress.start(regime, len(finished), settings.trials)
    if len(finished) < settings.trials and len(names_of(finished, space)) < space.size:
        objective = _Objective(problem, regime, space, seeds, horizon, _Counter(), settings.p_threshold, rehearsed)
        # a baseline with a dominated config is evaluated apart
        starts = [a for a in warm_starts(problem, regime, space, neighbours or storage) if space.contains(a)]
        # Ctrl-C reaches the simulations at once and waits out every database call
        # (tuner.interrupts: an interrupted Optuna call leaves SQLite's write lock held)
        with interrupts.deferred():
            with gate.exclusive():
                for assignment in starts:
                    study.enqueue_trial(space.params(space.point_of(assignment)), skip_if_exists=True)
            shown = _Shown(progress)
            study_id = storage.get_study_id_from_name(study.study_name)
            while True:
                interrupts.checkpoint()  # between trials: a Ctrl-C from the last one's bookkeeping
                with gate.exclusive() as release:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                        optuna.storages.fail_stale_trials(study)
                    trials = study.get_trials(deepcopy=False)
                    finished = [t for t in trials if t.state in FINISHED]
                    if len(finished) >= settings.trials or len(names_of(finished, space)) >= space.size:
                        break
                    running = sum(t.state == TrialState.RUNNING and "worker" in t.user_attrs
                                  for t in trials) if gate.counts_running else 0
                    room = len(finished) + running < settings.trials
                    if room:
                        study.optimize(_Started(objective, release, gate.worker, storage, study_id), n_trials=1,
                                       callbacks=[shown, *callbacks], gc_after_trial=False)
                if not room:
                    progress.note(f"waiting for {running} trials running in other workers")
                    gate.wait()
    progress.finish()
    return study


def _rehearsal(problem: Problem, regime: str, storage: optuna.storages.BaseStorage,
               settings: TuneSettings, salt: str) -> dict[Point, FrozenTrial]:
    """The study's next trial, run on a copy of the study in memory: its point and the
    finished trial (empty when the study needs no trial).

    Nothing is written to ``storage`` until a trial has finished, so an error or a Ctrl-C
    in a run's first trial — or a study refused for its settings — leaves the storage
    byte-identical. A lone worker's real run then proposes the same point (same seed,
    same trials) and replays the rehearsal instead of simulating it again; in a fleet
    another worker may have taken that point, and the rehearsal was a wasted simulation."""
    name = study_name(problem.name, regime)
    memory = optuna.storages.InMemoryStorage()
    done = 0
    if name in {s.study_name for s in storage.get_all_studies()}:
        optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=memory)
        done = len(memory.get_all_trials(memory.get_study_id_from_name(name), deepcopy=False, states=FINISHED))
    if done >= settings.trials:
        return {}
    study = run_study(problem, regime, memory, dataclasses.replace(settings, trials=done + 1), salt=salt,
                      neighbours=storage)
    space = JointSpace.of(problem)
    return {space.point(t.params): t for t in _finished(study)[done:] if space.point(t.params) is not None}


def regime_outcome(
    problem: Problem,
    regime: str,
    study: optuna.Study,
    settings: TuneSettings,
    *,
    progress: Progress | None = None,
    capacities: dict | None = None,
) -> RegimeOutcome:
    """The regime's tuned assignment from its study's finished trials, with both figures,
    the baselines' and, if asked, the oracle's (these simulate: seconds to minutes).

    Raises:
        SearchError: no assignment is feasible.
    """
    progress = progress or _Silent()
    space = JointSpace.of(problem)
    horizon = settings.horizon_s if settings.horizon_s is not None else problem.regimes[regime].horizon_s
    seeds = settings.seed_list
    counter = _Counter()
    baseline_assignments = {b.name: b.assignment(space) for b in BASELINES}
    routing = problem.regimes[regime].routing
    if routing is not None and routing.source != "uniform":
        baseline_assignments[ROUTING_AWARE] = routing_aware(space, routing)
    finished = _finished(study)
    known = _known(space, finished, len(seeds))
    tuned = select_best(space, finished, len(seeds))
    if tuned is None:
        fastest = baseline_assignments[PER_BUCKET.name]
        reason = known.get(fastest, Evaluation(())).constraints.reason or "every trial was infeasible"
        raise SearchError(f"{problem.path}: regime {regime!r}: no feasible assignment found in "
                          f"{len(finished)} trials ({PER_BUCKET.label}: {reason})")
    progress.note("baselines and capacities at the SLO (about ten simulations per seed each)")
    figures = _Figures(problem, regime, seeds, horizon, known, counter, capacities, progress.note)
    tuned = figures.choice(tuned.assignment, tuned.trial, capacity=True, label="tuned")
    baselines = {
        key: figures.choice(assignment, _trial_of(space, finished, assignment), capacity=key in CAPACITY_BASELINES,
                            label=key)
        for key, assignment in baseline_assignments.items()
    }
    oracle = None
    if settings.oracle:
        oracle = exhaustive(problem, regime, space, seeds, horizon, settings.oracle_limit, known, counter)
    return RegimeOutcome(
        problem=problem, regime=regime, study_name=study.study_name, space=space, settings=settings,
        horizon_s=horizon, tuned=tuned, baselines=baselines, oracle=oracle,
        trials=len(finished), study_simulations=sum(int(t.user_attrs.get("simulations", 0)) for t in finished),
        run_simulations=counter.simulations, objective=problem.objective,
    )


#: The baselines whose capacity a regime's outcome reports (the table stores the first two).
CAPACITY_BASELINES = (PER_BUCKET.name, ONE_CONFIG.name, ROUTING_AWARE)


@dataclass
class _Figures:
    """Both figures of a regime's tuned assignment and baselines: the study's objective from
    the study where it has them, the other metric computed. Capacities depend on the
    traffic shape, not the regime's rate, so ``capacities`` (shared across the regimes of
    one run) computes each (shape, assignment) once. ``note`` is told what is being
    simulated, seed by seed (the progress line of a phase that can take minutes)."""

    problem: Problem
    regime: str
    seeds: tuple[int, ...]
    horizon: float
    known: dict[Assignment, Evaluation]
    counter: _Counter
    capacities: dict[tuple[str, float, tuple[int, ...]], dict[Assignment, Evaluation]] | None
    note: Callable[[str], None] = lambda text: None

    def metric(self, assignment: Assignment, metric: str, label: str = "") -> Evaluation:
        if metric != "capacity" or self.capacities is None:
            return self._complete(assignment, metric, label)
        shape = (self.problem.regimes[self.regime].shape_key, self.horizon, self.seeds)
        known = self.capacities.setdefault(shape, {})
        if assignment not in known:
            twin = self._equivalent(assignment, known)
            known[assignment] = twin if twin is not None else self._complete(assignment, metric, label)
        return known[assignment]

    def _equivalent(self, assignment: Assignment, known: Mapping[Assignment, Evaluation]) -> Evaluation | None:
        """A capacity already found on this shape whose every probe this assignment would
        repeat: the same reserved workspace and the same configs in every cell those probes
        launched (the search's path depends only on the probes' runs, so it is the same)."""
        reserved = check_constraints(self.problem, assignment, self.regime).reserved_bytes
        for other, found in known.items():
            if (found.visited and found.constraints.reserved_bytes == reserved
                    and all(assignment.config(*cell) == other.config(*cell) for cell in found.visited)):
                return found
        return None

    def _complete(self, assignment: Assignment, metric: str, label: str) -> Evaluation:
        what = f"{metric} of {label or 'an assignment'}"
        return _complete(self.problem, self.regime, assignment, self.seeds, self.horizon, self.known,
                         self.counter, metric, note=lambda done: self.note(f"{what}: {done}"))

    def choice(self, assignment: Assignment, trial: int | None, capacity: bool, label: str = "") -> Choice:
        """``assignment`` with its goodput and, when asked or maximised, its capacity: the
        study's evaluations where they are complete (:func:`_complete` says when). A
        capacity that fails beside a goodput study is left out, with the error, so the
        goodput figures and the table's rows are still written."""
        found, error = None, None
        if self.problem.objective == "capacity":
            found = self.metric(assignment, "capacity", label)
        elif capacity:
            try:
                found = self.metric(assignment, "capacity", label)
            except TunerError as exc:
                error = str(exc)
        return Choice(assignment, self.metric(assignment, "goodput", label), trial, found, error)


def study_attrs(problem: Problem, regime: str, seeds: Sequence[int], horizon_s: float) -> dict[str, Any]:
    """What a study's numbers mean; the first three keys must match for trials to mix."""
    return {
        "seeds": list(seeds),
        "horizon_s": float(horizon_s),
        "problem_hash": problem.file_hash,
        "problem": problem.name,
        "problem_path": problem.path,
        "regime": regime,
        "regime_description": problem.regimes[regime].description,
        "objective": problem.objective,
    }


_MUST_MATCH = ("seeds", "horizon_s", "problem_hash")


def _check_attrs(study: optuna.Study, attrs: Mapping[str, Any]) -> None:
    """Record the study's attributes, or refuse a run whose settings differ from them.

    Attributes are written one by one, so a worker that joins a study another worker is
    creating may find some missing: while the study holds no trial it writes them too
    (the same values); once it does, a missing one is a mismatch."""
    stored = study.user_attrs
    forming = not stored or not study.get_trials(deepcopy=False)
    for key in _MUST_MATCH:
        if (key in stored or not forming) and stored.get(key) != attrs[key]:
            raise SearchError(
                f"study {study.study_name!r} was run with {key} {stored.get(key)!r} but this run asks for "
                f"{attrs[key]!r}; rerun with the same settings to continue it, or add --fresh to start over"
            )
    if forming:
        for key, value in attrs.items():
            if key not in stored:
                study.set_user_attr(key, value)


def _finished(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=FINISHED)


def _infeasible(trial: FrozenTrial) -> bool:
    return any(v > 0.0 for v in trial.constraints.values())


def select_best(space: JointSpace, trials: Sequence[FrozenTrial], n_seeds: int) -> Choice | None:
    """The best feasible complete trial: highest mean goodput; ties (relative 1e-9) go to
    the lower median latency, then the earlier trial. None when no trial qualifies."""
    candidates = [
        t for t in trials
        if t.state == TrialState.COMPLETE and not _infeasible(t) and len(t.intermediate_values) == n_seeds
        and space.point(t.params) is not None
    ]
    if not candidates:
        return None
    top = max(t.value for t in candidates)
    tied = [t for t in candidates if t.value >= top - abs(top) * TIE_TOLERANCE]
    best = min(tied, key=lambda t: (_latency_key(t.user_attrs.get("latency_p50_s")), t.number))
    return Choice(space.assignment(space.point(best.params)), _evaluation_of(best, space.problem.objective), best.number)


def _incumbent(space: JointSpace, study: optuna.Study, n_seeds: int) -> tuple[Point, frozenset[int] | None] | None:
    """The best point so far and the cells its simulations used (None: not recorded)."""
    trials = _finished(study)
    best = select_best(space, trials, n_seeds)
    if best is None:
        return None
    visited = next(t.user_attrs.get("visited") for t in trials if t.number == best.trial)
    return space.point_of(best.assignment), (frozenset(visited) if visited else None)


def _latency_key(latency: float | None) -> float:
    return math.inf if latency is None else latency


def _evaluation_of(trial: FrozenTrial, metric: str) -> Evaluation:
    values = tuple(v for _, v in sorted(trial.intermediate_values.items()))
    constraints = Constraints(trial.constraints.get("memory", 0.0), trial.constraints.get("legality", 0.0),
                              trial.user_attrs.get("infeasible"))
    return Evaluation(values if constraints.feasible else (), constraints, trial.user_attrs.get("latency_p50_s"),
                      metric=metric, rates=tuple(trial.user_attrs.get("rates", ())),
                      overloaded=trial.user_attrs.get("overloaded", 0),
                      lower_bounds=trial.user_attrs.get("lower_bounds", 0), limit=trial.user_attrs.get("limit"))


def _known(space: JointSpace, trials: Sequence[FrozenTrial], n_seeds: int) -> dict[Assignment, Evaluation]:
    """What the study already knows per assignment: complete evaluations and infeasible
    verdicts, else the seeds a pruned trial measured (values of a prefix of the seeds)."""
    known: dict[Assignment, Evaluation] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        point = space.point(trial.params)
        if point is None:
            continue
        assignment = space.assignment(point)
        evaluation = _evaluation_of(trial, space.problem.objective)
        previous = known.get(assignment)
        if previous is None or len(evaluation.values) > len(previous.values) or not evaluation.feasible:
            known[assignment] = evaluation
    return known


def _trial_of(space: JointSpace, trials: Sequence[FrozenTrial], assignment: Assignment) -> int | None:
    point = space.point_of(assignment)
    numbers = [t.number for t in trials if t.state == TrialState.COMPLETE and space.point(t.params) == point]
    return min(numbers) if numbers else None


def _complete(problem: Problem, regime: str, assignment: Assignment, seeds: Sequence[int],
              horizon: float, known: dict[Assignment, Evaluation], counter: _Counter,
              metric: str | None = None, note: Callable[[str], None] = lambda text: None) -> Evaluation:
    """A full evaluation of ``assignment`` in ``metric`` (default: the study's objective):
    the study's if complete, else every seed simulated. A pruned trial's prefix of seeds
    is not reused: it lacks its seeds' realised rates and overload flags (goodput) or the
    cells its probes launched (capacity), which the figures and the capacity memo need."""
    metric = metric or problem.objective
    have = known.get(assignment) if metric == problem.objective else None
    if have is not None and (not have.feasible or (
            len(have.values) == len(seeds) and (metric != "goodput" or len(have.rates) == len(seeds)))):
        return have

    def count(step: int, value: float, simulations: int) -> None:
        counter.simulations += simulations
        note(f"seed {step + 1}/{len(seeds)} done ({simulations} simulations)")

    def probe(rate: float, attainment: float) -> None:
        note(f"probed {rate:.3g} req/s: {attainment:.1%} met the SLO")

    note(f"{len(seeds)} seeds")
    result = evaluate(problem, assignment, regime, seeds, horizon, on_seed=count, metric=metric, on_probe=probe)
    if have is not None and have.latency_p50_s is not None and result.latency_p50_s is None:
        result = dataclasses.replace(result, latency_p50_s=have.latency_p50_s)
    if metric == problem.objective:
        known[assignment] = result
    return result


def exhaustive(problem: Problem, regime: str, space: JointSpace, seeds: Sequence[int], horizon: float,
               limit: int, known: dict[Assignment, Evaluation], counter: _Counter | None = None) -> OracleResult:
    """Evaluate every joint assignment of the space (when there are at most ``limit``)
    and keep the best, by the same rule as :func:`select_best`. The space holds each
    cell's non-dominated configs (:mod:`tuner.search.space`): a dominated one cannot win."""
    if space.size > limit:
        return OracleResult(space.size, limit)
    counter = counter or _Counter()
    before = counter.simulations
    best: tuple | None = None
    feasible = 0
    for point in space.points():
        assignment = space.assignment(point)
        evaluation = _complete(problem, regime, assignment, seeds, horizon, known, counter)
        if not evaluation.feasible:
            continue
        feasible += 1
        if best is None or _better(evaluation, best[1]):
            best = (assignment, evaluation)
    choice = None if best is None else Choice(best[0], best[1])
    return OracleResult(space.size, limit, choice, counter.simulations - before, feasible * len(seeds))


def _better(a: Evaluation, b: Evaluation) -> bool:
    """``a`` beats ``b`` (strictly more goodput, or a tie with lower latency); earlier wins ties."""
    if a.mean > b.mean + abs(b.mean) * TIE_TOLERANCE:
        return True
    if a.mean < b.mean - abs(b.mean) * TIE_TOLERANCE:
        return False
    return _latency_key(a.latency_p50_s) < _latency_key(b.latency_p50_s)


def warm_starts(problem: Problem, regime: str, space: JointSpace,
                storage: optuna.storages.BaseStorage) -> list[Assignment]:
    """The assignments a study starts from, in order, without repeats: the baselines (THE
    baseline first), the footprint ladder, then the best of this problem's other regimes
    already in the storage."""
    out: list[Assignment] = []
    for assignment in (*(b.assignment(space) for b in BASELINES), *footprint_ladder(space),
                       *_neighbour_bests(problem, regime, space, storage)):
        if assignment not in out:
            out.append(assignment)
    return out


def _neighbour_bests(problem: Problem, regime: str, space: JointSpace,
                     storage: optuna.storages.BaseStorage) -> list[Assignment]:
    """The best points of this problem's other regimes' studies in the storage, nearest
    regime (in file order) first; studies of another version of the problem are ignored."""
    names = list(problem.regimes)
    here = names.index(regime)
    existing = {s.study_name for s in storage.get_all_studies()}
    points: list[Assignment] = []
    for other in sorted((n for n in names if n != regime), key=lambda n: (abs(names.index(n) - here), names.index(n))):
        other_name = study_name(problem.name, other)
        if other_name not in existing:
            continue
        study = optuna.load_study(study_name=other_name, storage=storage)
        attrs = study.user_attrs
        if attrs.get("problem_hash") != problem.file_hash:
            continue
        best = select_best(space, _finished(study), len(attrs.get("seeds", ())))
        if best is not None and best.assignment not in points:
            points.append(best.assignment)
    return points


@dataclass
class _Objective:
    """Optuna's objective for one regime; holds only the run's constants (re-entrant)."""

    problem: Problem
    regime: str
    space: JointSpace
    seeds: tuple[int, ...]
    horizon: float
    counter: _Counter = field(default_factory=_Counter)
    p_threshold: float = 0.1
    rehearsed: dict[Point, FrozenTrial] = field(default_factory=dict)

    def __call__(self, trial: optuna.Trial) -> float:
        space = self.space
        point = suggest(trial, space)
        if point in self.rehearsed:
            return _repeat(trial, self.rehearsed.pop(point))
        prior = self._prior(trial, point)
        if prior is not None:
            return self._replay(trial, prior)
        assignment = space.assignment(point)
        constraints = check_constraints(self.problem, assignment, self.regime)
        twin = self._equivalent(trial, point, constraints) if constraints.feasible else None
        if twin is not None:
            trial.set_user_attr("equivalent_to", twin.number)
            return self._replay(trial, twin)
        simulations = 0

        def on_seed(step: int, value: float, runs: int) -> None:
            nonlocal simulations
            simulations += runs
            self.counter.simulations += runs
            with interrupts.shielded():
                trial.report(value, step)
                # with n paired seeds the Wilcoxon test's smallest one-sided p-value is 2**-n:
                # ask the pruner only when it could say yes (asking reads every trial)
                if step < len(self.seeds) - 1 and 2.0 ** -(step + 1) < self.p_threshold and trial.should_prune():
                    _record(trial, Constraints(), simulations)
                    raise optuna.TrialPruned(f"worse than the best trial after {step + 1} seeds (Wilcoxon)")

        with interrupts.interruptible():  # the simulations; what the trial writes waits for them
            evaluation = evaluate(self.problem, assignment, self.regime, self.seeds, self.horizon, on_seed,
                                  metric=self.problem.objective)
        _record(trial, evaluation.constraints, simulations, evaluation.latency_p50_s)
        if evaluation.rates:
            trial.set_user_attr("rates", list(evaluation.rates))
            trial.set_user_attr("overloaded", evaluation.overloaded)
        if evaluation.lower_bound:  # a capacity the search could only bound from below
            trial.set_user_attr("lower_bounds", evaluation.lower_bounds)
            trial.set_user_attr("limit", evaluation.limit)
        if evaluation.visited:
            index = {cell: i for i, cell in enumerate(space.cells)}
            trial.set_user_attr("visited", sorted(index[cell] for cell in evaluation.visited))
        return evaluation.mean

    def _prior(self, trial: optuna.Trial, point: Point) -> FrozenTrial | None:
        for other in trial.study.get_trials(deepcopy=False, states=FINISHED):
            if other.number != trial.number and self.space.point(other.params) == point:
                return other
        return None

    def _equivalent(self, trial: optuna.Trial, point: Point, constraints: Constraints) -> FrozenTrial | None:
        """A complete trial whose run this point repeats exactly: the same reserved
        workspace and the same configs in every cell its simulations used (the others
        are never launched on that trajectory, so every event is the same)."""
        for other in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            visited = other.user_attrs.get("visited")
            reserved = other.user_attrs.get("reserved_bytes")
            if not visited or reserved is None or reserved != constraints.reserved_bytes:
                continue
            if len(other.intermediate_values) != len(self.seeds):
                continue
            theirs = self.space.point(other.params)
            if theirs is not None and all(theirs[i] == point[i] for i in visited):
                return other
        return None

    def _replay(self, trial: optuna.Trial, prior: FrozenTrial) -> float:
        """Repeat a finished trial of the same point without simulating (same seeds, same numbers)."""
        for step, value in sorted(prior.intermediate_values.items()):
            trial.report(value, step)
        constraints = _evaluation_of(prior, self.problem.objective).constraints
        _record(trial, constraints, 0, prior.user_attrs.get("latency_p50_s"))
        trial.set_user_attr("duplicate_of", prior.number)
        for key in ("visited", "reserved_bytes", "rates", "overloaded", "lower_bounds", "limit"):
            if key in prior.user_attrs:
                trial.set_user_attr(key, prior.user_attrs[key])
        if prior.state == TrialState.PRUNED:
            raise optuna.TrialPruned(f"same assignment as pruned trial {prior.number}")
        return float(prior.value)


def _repeat(trial: optuna.Trial, rehearsed: FrozenTrial) -> float:
    """Record the rehearsed trial of this point as this trial, as it was (simulations
    included: the rehearsal ran them for this trial)."""
    for step, value in sorted(rehearsed.intermediate_values.items()):
        trial.report(value, step)
    for key, value in rehearsed.constraints.items():
        trial.set_constraint(key, value)
    for key, value in rehearsed.user_attrs.items():
        trial.set_user_attr(key, value)
    if rehearsed.state == TrialState.PRUNED:
        raise optuna.TrialPruned("pruned in its rehearsal")
    return float(rehearsed.value)


def _record(trial: optuna.Trial, constraints: Constraints, simulations: int, latency: float | None = None) -> None:
    for key, value in constraints.values().items():
        trial.set_constraint(key, value)
    trial.set_user_attr("constraint", [constraints.memory, constraints.legality])
    trial.set_user_attr("simulations", simulations)
    if constraints.reserved_bytes is not None:
        trial.set_user_attr("reserved_bytes", constraints.reserved_bytes)
    if constraints.reason is not None:
        trial.set_user_attr("infeasible", constraints.reason)
    if latency is not None:
        trial.set_user_attr("latency_p50_s", latency)


@dataclass
class _Started:
    """The objective as a gated worker runs it: the trial exists, the worker is recorded
    (so the trial counts against the budget), the start lock is released, then the real
    objective."""

    objective: Callable[[optuna.Trial], float]
    release: Callable[[], None]
    worker: str | None
    storage: optuna.storages.BaseStorage
    study_id: int

    def __call__(self, trial: optuna.Trial) -> float:
        if self.worker is not None:  # before the release: every trial counted as running has it
            # ... and a heartbeat before it, so that a trial counted as running always goes
            # stale if its worker dies (Optuna's heartbeat thread may not have written yet)
            if getattr(self.storage, "get_heartbeat_interval", lambda: None)() is not None:
                self.storage.record_heartbeat(  # type: ignore[attr-defined]
                    self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number))
            trial.set_user_attr("worker", self.worker)
        self.release()
        return self.objective(trial)


@dataclass
class _Shown:
    """Tells the progress display the finished count and best value after each trial."""

    progress: Progress

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        try:
            best: float | None = study.best_value
        except ValueError:
            best = None
        self.progress.update(len(_finished(study)), best)
