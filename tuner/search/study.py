"""One Optuna study per (problem, regime): the trial loop and the gate that shares it.

Contract of a study (DESIGN §5). It is named ``tuner:{problem}:{regime}`` and lives
in any storage Optuna accepts; everything a worker needs is in that storage, so many
workers on many machines may share it (run the same command against the same URL).
The study's user attributes record what its numbers mean — regime description, seeds,
horizon, problem-file hash — and a run with other settings is refused rather than
mixed in. One trial is one joint assignment: a categorical parameter per (operator,
bucket) cell, named ``op`` or ``op@BUCKET`` (:mod:`tuner.search.space`), and where the
problem lists engine knobs one per knob, ``knob:NAME`` (:mod:`tuner.search.knob_axis`), proposed by
the local-search sampler of :mod:`tuner.search.local`, scored by the objective of
:mod:`tuner.search.objective`: the mean of the objective over seeds ``base_seed + k``,
each seed reported at step ``k`` so the Wilcoxon pruner compares it with the best trial
pairwise (common random numbers). Constraints (memory, legality) are set with
``trial.set_constraint`` and mirrored in the user attribute ``constraint`` as
``[memory, legality]``; infeasible trials score 0. The study starts from the warm
starts of :mod:`tuner.search.warm_starts`, enqueued once.

Optuna commits each finished trial, so an interruption loses at most the trial in
flight, and a rerun continues: ``trials`` is the target number of finished (complete
or pruned) trials in the study, not the number to add. A point already evaluated in
the study is not simulated again: the new trial replays the stored values.
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from .. import interrupts
from ..errors import SearchError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from .baselines import BASELINES
from .knob_axis import KnobKey
from .local import LocalSearchSampler, names_of
from ..problem.scenario import Scenario
from .objective import Objective, SimulationCount
from .parallel import IN_PROCESS, SeedRunner
from .ranking import FINISHED, finished_trials, incumbent
from .settings import TuneSettings, study_name
from .space import JointSpace
from .trial_record import TrialRecord
from .warm_starts import pinned_starts, warm_starts


class StudyProgress(Protocol):
    """What a study reports while it runs (the CLI draws a bar; the default does nothing)."""

    def start(self, regime: str, done: int, total: int) -> None: ...

    def update(self, done: int, best: float | None) -> None: ...

    def finish(self) -> None: ...

    def note(self, text: str) -> None:
        """What the regime does after its trials (baselines, capacities): seconds to minutes."""

    def after_trials(self, simulations: int) -> None:
        """The trials are done; about ``simulations`` more follow (baselines' goodput and
        capacity searches not already known), counted by :meth:`simulated`."""

    def simulated(self, count: int) -> None:
        """``count`` of those simulations are done."""


class Silent:
    """The progress of a study nobody watches."""

    def start(self, regime: str, done: int, total: int) -> None:
        pass

    def update(self, done: int, best: float | None) -> None:
        pass

    def finish(self) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def after_trials(self, simulations: int) -> None:
        pass

    def simulated(self, count: int) -> None:
        pass


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
    progress: StudyProgress | None = None,
    gate: TrialGate | None = None,
    salt: str = "",
    rehearse: bool = False,
    neighbours: optuna.storages.BaseStorage | None = None,
    knobs: KnobKey | None = None,
    seed_runner: SeedRunner = IN_PROCESS,
) -> optuna.Study:
    """Open (or create) the regime's study and run trials until it holds ``settings.trials``
    finished ones, or every point of the space has been tried.

    With ``knobs``, the study is *continued under that knob setting*: every new trial
    runs with it, and the budget counts only the trials that did, so the configs of the
    setting a deployment adopts are searched with a budget of their own rather than the
    share of it the knob search left them (:mod:`tuner.search.deployment`).

    Args:
        gate: how trials start when other workers share the study (default: alone).
        salt: mixed into the sampler's seed, so workers that start together propose
            different points ("" for the first or only worker: same seed, same table).
        rehearse: run the study's next trial in a copy in memory before writing anything
            (:func:`_rehearsal`), so that a run that fails before a trial finished leaves
            the storage as it was.
        neighbours: where the other regimes' studies are read for warm starts (default:
            ``storage``).
        seed_runner: where each trial's seeds are simulated (a pool the command opened).

    Raises:
        SearchError: the regime is unknown, or the stored study was made with other seeds,
            horizon or problem file.
    """
    problem.regime(regime)
    space = JointSpace.of(problem)
    for baseline in BASELINES:  # a space without a legal baseline is refused before any write
        baseline.assignment(space)
    if isinstance(storage, str):
        storage = optuna.storages.RDBStorage(storage)
    rehearsed = _rehearsal(problem, regime, storage, settings, salt, seed_runner) if rehearse and knobs is None else {}
    return _run_trials(problem, regime, space, storage, settings, callbacks, progress or Silent(), gate or _Alone(),
                       salt, neighbours or storage, rehearsed, _Budget(space, knobs), seed_runner)


@dataclass(frozen=True)
class _Budget:
    """Which finished trials count against a study's budget, and how many points it has:
    all of them, or under a pinned knob setting only its own."""

    space: JointSpace
    knobs: KnobKey | None

    def counted(self, finished: Sequence[FrozenTrial]) -> list[FrozenTrial]:
        if self.knobs is None:
            return list(finished)
        return [t for t in finished if self.space.axis.trial_key(t) == self.knobs]

    def exhausted(self, finished: Sequence[FrozenTrial], trials: int) -> bool:
        counted = self.counted(finished)
        points = self.space.joint_size if self.knobs is None else self.space.size
        return len(counted) >= trials or len(names_of(counted, self.space)) >= points


def _run_trials(problem: Problem, regime: str, space: JointSpace, storage: optuna.storages.BaseStorage,
                settings: TuneSettings, callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]],
                progress: StudyProgress, gate: TrialGate, salt: str, neighbours: optuna.storages.BaseStorage,
                rehearsed: Mapping[tuple[Assignment, KnobKey], FrozenTrial], budget: _Budget,
                seed_runner: SeedRunner) -> optuna.Study:
    """:func:`run_study`'s loop, on a checked request: open the study, enqueue the warm
    starts, then one trial at a time under the gate until the budget is met."""
    scenario = settings.scenario(problem, regime)
    seeds = scenario.seeds
    study = optuna.create_study(study_name=study_name(problem.name, regime), storage=storage,
                                direction="maximize", pruner=_pruner(settings, budget), load_if_exists=True)
    _check_attrs(study, study_attrs(scenario))
    finished = finished_trials(study)
    pinned = budget.knobs
    # Seeded by the run's seed, the regime and the trials already there: the same command
    # on the same storage suggests the same points, and a resumed run does not replay the
    # suggestions its first part already evaluated.
    study.sampler = LocalSearchSampler(
        space, lambda s: incumbent(space, s, len(seeds), pinned),
        seed=zlib.crc32(f"{settings.base_seed}:{regime}:{len(finished)}{salt}".encode()) & 0x7FFFFFFF,
        pinned=pinned,
    )
    progress.start(regime, len(budget.counted(finished)), settings.trials)
    if not budget.exhausted(finished, settings.trials):
        objective = Objective(scenario, space, SimulationCount(), settings.p_threshold, dict(rehearsed), seed_runner)
        # a baseline with a dominated config is evaluated apart
        starts = warm_starts(problem, regime, space, neighbours) if pinned is None else \
            pinned_starts(space, study, pinned)
        starts = [(a, knobs) for a, knobs in starts if space.contains(a)]
        # Ctrl-C reaches the simulations at once and waits out every database call
        # (tuner.interrupts: an interrupted Optuna call leaves SQLite's write lock held)
        with interrupts.deferred():
            with gate.exclusive():
                for assignment, knobs in starts:
                    study.enqueue_trial({**space.params_of(assignment), **space.axis.params(knobs)},
                                        skip_if_exists=True)
            shown = _Shown(progress, budget)
            study_id = storage.get_study_id_from_name(study.study_name)
            while True:
                interrupts.checkpoint()  # between trials: a Ctrl-C from the last one's bookkeeping
                with gate.exclusive() as release:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                        optuna.storages.fail_stale_trials(study)
                    trials = study.get_trials(deepcopy=False)
                    finished = [t for t in trials if t.state in FINISHED]
                    if budget.exhausted(finished, settings.trials):
                        break
                    running = sum(t.state == TrialState.RUNNING and TrialRecord.of(t).worker is not None
                                  for t in budget.counted(trials)) if gate.counts_running else 0
                    room = len(budget.counted(finished)) + running < settings.trials
                    if room:
                        study.optimize(_Started(objective, release, gate.worker, storage, study_id), n_trials=1,
                                       callbacks=[shown, *callbacks], gc_after_trial=False)
                if not room:
                    progress.note(f"waiting for {running} trials running in other workers")
                    gate.wait()
    progress.finish()
    return study


def _pruner(settings: TuneSettings, budget: _Budget) -> optuna.pruners.BasePruner:
    """Wilcoxon's pruner, which holds each trial's seeds against the study's best trial;
    none under a pinned setting, whose trials are held against the best under the same
    setting, which the study's best (under another setting) may far outrun."""
    if budget.knobs is not None:
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.WilcoxonPruner(p_threshold=settings.p_threshold, n_startup_steps=2)


def _rehearsal(problem: Problem, regime: str, storage: optuna.storages.BaseStorage,
               settings: TuneSettings, salt: str, seed_runner: SeedRunner) -> dict[tuple[Assignment, KnobKey], FrozenTrial]:
    """The study's next trial, run on a copy of the study in memory: its assignment and the
    finished trial (empty when the study needs no trial).

    Nothing is written to ``storage`` until a trial has finished, so an error or a Ctrl-C
    in a run's first trial — or a study refused for its settings — leaves the storage
    byte-identical. A lone worker's real run then proposes the same assignment (same seed,
    same trials) and replays the rehearsal instead of simulating it again; in a fleet
    another worker may have taken that assignment, and the rehearsal was a wasted simulation."""
    name = study_name(problem.name, regime)
    memory = optuna.storages.InMemoryStorage()
    done = 0
    if name in {s.study_name for s in storage.get_all_studies()}:
        optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=memory)
        done = len(memory.get_all_trials(memory.get_study_id_from_name(name), deepcopy=False, states=FINISHED))
    if done >= settings.trials:
        return {}
    space = JointSpace.of(problem)
    study = _run_trials(problem, regime, space, memory, dataclasses.replace(settings, trials=done + 1), (), Silent(),
                        _Alone(), salt, storage, {}, _Budget(space, None), seed_runner)
    return {key: t for t in finished_trials(study)[done:] if (key := space.key(t.params)) is not None}


def study_attrs(scenario: Scenario) -> dict[str, Any]:
    """What a study's numbers mean; the first three keys must match for trials to mix."""
    problem, regime = scenario.problem, scenario.regime
    return {
        "seeds": list(scenario.seeds),
        "horizon_s": float(scenario.window_s),
        "problem_hash": problem.file_hash,
        "problem": problem.name,
        "problem_path": str(Path(problem.path).resolve()),  # the dashboard finds the file by it
        "regime": regime,
        "regime_description": scenario.spec.description,
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
            TrialRecord(worker=self.worker).write(trial)
        self.release()
        return self.objective(trial)


@dataclass
class _Shown:
    """Tells the progress display the finished count and best value after each trial."""

    progress: StudyProgress
    budget: _Budget

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        counted = self.budget.counted(finished_trials(study))
        values = [t.value for t in counted if t.state == TrialState.COMPLETE and t.value is not None]
        self.progress.update(len(counted), max(values) if values else None)
