"""One worker's run over a problem's regimes: each study's trials, then the rows of every
study it finds complete (:func:`run_regimes`, for :func:`tuner.search.tuning.tune_problem`
and each ``--jobs`` helper).

The order of writes is what makes an interruption safe: the store's schema is checked
before Optuna touches the database (a database of another schema version is refused
with nothing written); nothing is written until a trial has finished (each regime's
next trial is rehearsed in memory first, :func:`tuner.search.study.run_study`), so a
run that fails before then leaves the database byte-identical; each trial is committed
by Optuna as it finishes; a regime's
table rows are replaced in one transaction only after its study, baselines and oracle
are done. Regimes run in the problem file's order, so later regimes warm-start from
the earlier ones' best assignments. Any number of workers may run this at once on one
storage (:mod:`tuner.search.leases` says how they stay exact).
"""

from __future__ import annotations

import importlib.metadata
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol
from datetime import datetime, timezone

import optuna
from optuna.trial import FrozenTrial
from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError

from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..errors import StorageError
from ..interrupts import checkpoint
from ..store import Store, TableRow
from ..store.store import (
    is_read_only, parse_url, read_only_error, resolve_url, serialise_sqlite_writes, shown, writer_engine_kwargs,
)
from ..stats import paired_delta
from .baselines import ONE_CONFIG
from .capacity import PROBES_PER_SEED
from .evaluate import Evaluation
from .leases import MAX_RETRY, ROWS_LEASE_S, LeaseGate, Worker, fail_running, held
from .deployment import SET_ASIDE_FOR, Deployment, choose_deployment, latency_change, loss_against_defaults
from .knob_axis import KnobKey
from .outcome import RegimeOutcome, capacity_at_slo, regime_outcome
from .parallel import IN_PROCESS, SeedRunner
from .ranking import finished_trials
from .space import JointSpace
from .settings import TuneSettings, study_name
from .study import StudyProgress, run_study


def open_storage(url: str, worker: Worker | None = None) -> optuna.storages.RDBStorage:
    """Optuna's storage on ``url``, its failures as one-line :class:`StorageError`.

    With a ``worker``, its trials record heartbeats and a trial whose worker died is
    retried; on SQLite its transactions are serialised (:func:`serialise_sqlite_writes`).
    Workers that create a fresh database's tables at the same moment may collide: the
    loser tries again.
    """
    parsed = parse_url(resolve_url(url))
    for attempt in range(3):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                kwargs: dict = {} if worker is None else dict(
                    engine_kwargs=writer_engine_kwargs(parsed), heartbeat_interval=worker.heartbeat_s,
                    grace_period=worker.grace_s,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(MAX_RETRY))
                storage = optuna.storages.RDBStorage(resolve_url(url), **kwargs)
            serialise_sqlite_writes(storage.engine)
            return storage
        except (IntegrityError, ProgrammingError):  # another worker created the tables meanwhile
            if attempt == 2:
                raise
            time.sleep(0.5)
        except (SQLAlchemyError, optuna.exceptions.OptunaError, RuntimeError, ValueError, ImportError) as exc:
            if is_read_only(exc):
                raise read_only_error(shown(parsed), "SQLite: attempt to write a readonly database") from None
            text = str(exc).strip().splitlines()
            raise StorageError(f"{shown(parsed)}: Optuna cannot use this storage: "
                               f"{text[0] if text else type(exc).__name__}") from None
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class TuneJob:
    """What a worker is asked to tune, and who it is (see
    :func:`tuner.search.tuning.tune_problem` for the arguments' meaning)."""

    problem: Problem
    url: str
    settings: TuneSettings
    regimes: tuple[str, ...]
    worker: Worker
    progress: StudyProgress | None = None
    callbacks: tuple[Callable[[optuna.Study, FrozenTrial], None], ...] = ()
    on_regime: Callable[[RegimeOutcome], None] | None = None
    orphaned: Callable[[], bool] = lambda: False
    warn: Callable[[str], None] = lambda message: None
    seed_runner: SeedRunner = IN_PROCESS  # where seeds are simulated: the command's pool, if it opened one


class Team(Protocol):
    """Other workers this one started (the ``--jobs`` helpers): waited for at the end,
    stopped on an error, their running trials then marked FAIL with this worker's."""

    @property
    def worker_ids(self) -> list[str]: ...

    def join(self) -> list[str]: ...

    def stop(self) -> None: ...


def run_regimes(job: TuneJob, start_team: Callable[[], Team] | None = None) -> list[RegimeOutcome]:
    """Run the studies of ``job.regimes`` in order and write the rows of those complete
    (a worker that does not write rows only runs trials). ``start_team`` starts the other
    workers once the storage is open. Returns the outcomes whose rows this call wrote."""
    problem, url, settings, worker = job.problem, job.url, job.settings, job.worker
    store = Store(url, create=True)
    team: Team | None = None
    storage: optuna.storages.RDBStorage | None = None
    stopped = False
    try:
        storage = open_storage(url, worker)
        if start_team is not None:
            team = start_team()
        rows = _Rows(store, problem, settings, worker, job.progress, job.on_regime, job.seed_runner)
        held_elsewhere = []
        studies = {}

        def study_of(name: str, knobs: KnobKey | None = None) -> optuna.Study:
            """The regime's study run to its budget (continued under ``knobs``: :func:`run_study`)."""
            gate = LeaseGate(store, study_name(problem.name, name), worker.id, job.orphaned)
            return run_study(problem, name, storage, settings, callbacks=job.callbacks, progress=job.progress,
                             gate=gate, salt=worker.salt, rehearse=worker.writes_rows, knobs=knobs,
                             seed_runner=job.seed_runner)

        for name in job.regimes:
            studies[name] = study = study_of(name)
            # a problem with start-up knobs writes its rows once every regime's study is done
            if worker.writes_rows and not problem.knobs and rows.write(name, study, wait=False) is None:
                held_elsewhere.append((name, study))
        for name, study in held_elsewhere:  # another worker was writing them: wait, write if it died first
            rows.write(name, study, wait=True)
        if worker.writes_rows and problem.knobs:
            rows.write_deployment(studies, lambda knobs: {name: study_of(name, knobs) for name in job.regimes})
        if team is not None:
            for failure in team.join():
                job.warn(failure)
            team = None
        return rows.outcomes
    except BaseException:  # Ctrl-C, or an error: no trial of this run may stay RUNNING
        stopped = True
        raise
    finally:
        workers = [worker.id]
        if team is not None:
            team.stop()
            workers += team.worker_ids
        if stopped and storage is not None:
            fail_running(storage, [study_name(problem.name, name) for name in job.regimes], workers)
        store.close()


def rows_key(settings: TuneSettings, deployment: str = "") -> str:
    """What a regime's rows depend on beyond the study's own attributes (seeds, horizon,
    problem file): rows written with another key are computed again. ``deployment``: the
    engine knob values chosen across the regimes, for a problem that lists knobs."""
    oracle = settings.oracle_limit if settings.oracle else 0
    chosen = (f";knobs={deployment};set aside for={','.join(SET_ASIDE_FOR)};configs continued under it"
              if deployment else "")
    return f"trials={settings.trials};oracle={oracle}" + chosen


@dataclass
class _Rows:
    """Writes complete studies' regime rows, once each across every worker."""

    store: Store
    problem: Problem
    settings: TuneSettings
    worker: Worker
    progress: StudyProgress | None
    on_regime: Callable[[RegimeOutcome], None] | None
    seed_runner: SeedRunner = IN_PROCESS
    outcomes: list[RegimeOutcome] = field(default_factory=list)
    capacities: dict = field(default_factory=dict)

    def write(self, regime: str, study: optuna.Study, wait: bool, outcome: RegimeOutcome | None = None,
              key: str | None = None) -> bool | None:
        """Compute (unless given) and write the regime's rows unless they are written from
        this study with these settings (``key``: :func:`rows_key`): True when this call
        wrote them, False when they already were, None when another worker holds the
        regime's lease (only without ``wait``)."""
        key, store = key or rows_key(self.settings), self.store
        if store.written_key(study.study_name) == key:
            return False
        with held(store, f"rows:{study.study_name}", self.worker.id, wait=wait, seconds=ROWS_LEASE_S,
                  renew=True) as taken:
            if not taken:
                return None
            if store.written_key(study.study_name) == key:
                return False
            outcome = outcome or regime_outcome(self.problem, regime, study, self.settings, progress=self.progress,
                                                capacities=self.capacities, seed_runner=self.seed_runner)
            checkpoint()  # (a Ctrl-C that library code swallowed stops the run before the rows)
            store.replace_regime(self.problem.name, regime, table_rows(outcome),
                                 written=(study.study_name, key, self.worker.id))
        self.outcomes.append(outcome)
        if self.on_regime is not None:
            self.on_regime(outcome)
        return True


    def write_deployment(self, studies: Mapping[str, optuna.Study],
                         continued: Callable[[KnobKey], Mapping[str, optuna.Study]]) -> None:
        """Write every regime's rows with one setting of the problem's start-up knobs
        (:mod:`tuner.search.deployment`): chosen from the studies, figured in every regime,
        and set aside for the engine's defaults where it loses to them in any.

        The studies shared their trials among the settings, so the one adopted had only a
        share of them for its configs: before its rows are figured, every regime's study
        is ``continued`` under it until it has ``--trials`` of its own."""
        problem = self.problem
        axis = JointSpace.of(problem).axis
        if self.progress is not None:  # about: a capacity search per combination and regime
            self.progress.after_trials(axis.size * len(studies) * self.settings.seeds * PROBES_PER_SEED)
            self.progress.note("choosing the engine knobs: capacity at the SLO of each setting's best configs")

        def capacity(regime: str, knobs: KnobKey, assignment: Assignment) -> Evaluation:
            return capacity_at_slo(problem, regime, studies[regime], self.settings, knobs, assignment,
                                   capacities=self.capacities, progress=self.progress, seed_runner=self.seed_runner)

        trials = {regime: finished_trials(study) for regime, study in studies.items()}
        deployment = choose_deployment(problem, trials, self.settings.seeds, capacity)
        key = rows_key(self.settings, axis.text(deployment.knobs))
        if all(self.store.written_key(study.study_name) == key for study in studies.values()):
            return
        studies = self._continued(continued, deployment.knobs)
        outcomes = self._outcomes(studies, deployment)
        for regime, outcome in outcomes.items():
            guarded = outcome.defaults is not None and problem.regime(regime).weight > 0
            why = loss_against_defaults(outcome.tuned, outcome.defaults) if guarded else None  # type: ignore[arg-type]
            if why is not None:
                deployment = Deployment(axis.defaults, f"{axis.text(deployment.knobs)} set aside: regime "
                                                       f"{regime!r}: {why}")
                studies = self._continued(continued, deployment.knobs)
                outcomes = self._outcomes(studies, deployment)
                break
        for regime, outcome in outcomes.items():
            slower = latency_change(outcome.tuned, outcome.defaults) if outcome.defaults is not None else None
            if slower is not None and deployment.knobs != axis.defaults:
                outcome = replace(outcome, deployment=f"{outcome.deployment}; in this regime {slower}")
            self.write(regime, studies[regime], wait=True, outcome=outcome, key=key)

    def _continued(self, continued: Callable[[KnobKey], Mapping[str, optuna.Study]],
                   knobs: KnobKey) -> Mapping[str, optuna.Study]:
        if self.progress is not None:
            text = JointSpace.of(self.problem).axis.text(knobs)
            self.progress.note(f"searching the configs under {text}: {self.settings.trials} trials of their own "
                               "per regime")
        return continued(knobs)

    def _outcomes(self, studies: Mapping[str, optuna.Study], deployment: Deployment) -> dict[str, RegimeOutcome]:
        return {regime: replace(regime_outcome(self.problem, regime, study, self.settings, progress=self.progress,
                                               capacities=self.capacities, knobs=deployment.knobs,
                                               seed_runner=self.seed_runner),
                                deployment=deployment.reason)
                for regime, study in studies.items()}


def triton_version() -> str | None:
    """The installed Triton's version, stored with each row (None when Triton is absent)."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def table_rows(outcome: RegimeOutcome, created_at: datetime | None = None) -> list[TableRow]:
    """One row per (operator, bucket) for the regime's tuned assignment, with its
    provenance and the baselines' figures (every row of a regime carries the same;
    a capacity that is only a lower bound is left out: :func:`_measured`)."""
    problem = outcome.problem
    tuned, baseline = outcome.tuned.evaluation, outcome.baseline.evaluation
    delta = paired_delta(tuned, baseline)
    oracle = outcome.oracle.best.evaluation.mean if outcome.oracle and outcome.oracle.best else None
    one_config = outcome.baselines.get(ONE_CONFIG.name)
    capacity, base_capacity = _measured(outcome.tuned.capacity), _measured(outcome.baseline.capacity)
    one_capacity = _measured(one_config.capacity) if one_config else None
    provenance = dict(
        device=problem.service.device.name, triton_version=triton_version(), problem_hash=problem.file_hash,
        study_name=outcome.study_name, trial_number=int(outcome.tuned.trial or 0),
        seeds=outcome.settings.seeds, horizon_s=outcome.horizon_s,
        goodput_rps=tuned.mean, goodput_ci_rps=tuned.ci, baseline_goodput_rps=baseline.mean,
        delta_ci_rps=delta.half_width, one_config_goodput_rps=one_config.evaluation.mean if one_config else None,
        oracle_goodput_rps=oracle, regime_rate_rps=problem.mean_rate(outcome.regime, outcome.settings.seed_list,
                                                                      outcome.horizon_s),
        realized_rates_rps=list(tuned.rates or baseline.rates) or None,
        warmup_s=problem.regime(outcome.regime).warmup_for(outcome.horizon_s),
        overloaded_seeds=tuned.overloaded, baseline_overloaded_seeds=baseline.overloaded,
        objective=outcome.objective, attainment_target=problem.service.slo.attainment,
        capacity_rps=_mean(capacity), capacity_ci_rps=capacity.ci if capacity else None,
        baseline_capacity_rps=_mean(base_capacity),
        capacity_delta_ci_rps=paired_delta(capacity, base_capacity).half_width if capacity and base_capacity else None,
        one_config_capacity_rps=_mean(one_capacity),
        created_at=created_at or datetime.now(timezone.utc), guard=outcome.guard,
        engine_args=engine_args(outcome),
    )
    return outcome.tuned.assignment.to_rows(problem, outcome.regime, provenance, baseline=outcome.baseline.assignment)


def engine_args(outcome: RegimeOutcome) -> dict[str, object] | None:
    """The knob values the regime's figures were simulated with, as JSON (a list for
    capture sizes, null for the engine's own default); None without ``service.knobs``."""
    if not outcome.problem.knobs:
        return None
    values = outcome.space.axis.values(outcome.knobs)
    return {name: list(value) if isinstance(value, tuple) else value for name, value in values.items()}


def _measured(evaluation: Evaluation | None) -> Evaluation | None:
    """A capacity the rows can hold: None when there is none or it is only a lower bound
    (the search reached its ceiling, :mod:`tuner.search.capacity`); the table has no column
    to flag one, and a bound shown as a figure would read as a measured capacity."""
    return None if evaluation is None or evaluation.lower_bound else evaluation


def _mean(evaluation: Evaluation | None) -> float | None:
    return evaluation.mean if evaluation is not None and evaluation.feasible else None
