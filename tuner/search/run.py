"""Tune a problem: every chosen regime's study, then its rows of the config table.

The order of writes is what makes an interruption safe: the store's schema is checked
before Optuna touches the database (a database of another schema version is refused
with nothing written); each trial is committed by Optuna as it finishes; a regime's
table rows are replaced in one transaction only after its study, baselines and oracle
are done. Regimes run in the problem file's order, so later regimes warm-start from
the earlier ones' best assignments.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import optuna
from optuna.trial import FrozenTrial
from sqlalchemy.exc import SQLAlchemyError

from ..problem.model import Problem
from ..errors import StorageError
from ..store import Store, TableRow
from ..store.store import parse_url, resolve_url, shown
from ..errors import SearchError
from ..stats import paired_delta
from .baselines import ONE_CONFIG
from .evaluate import Evaluation
from .study import Progress, RegimeOutcome, TuneSettings, study_name, tune_regime


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage on ``url``, its failures as one-line :class:`StorageError`."""
    try:
        return optuna.storages.RDBStorage(resolve_url(url))
    except (SQLAlchemyError, optuna.exceptions.OptunaError, RuntimeError, ValueError, ImportError) as exc:
        text = str(exc).strip().splitlines()
        raise StorageError(f"{shown(parse_url(url))}: Optuna cannot use this storage: "
                         f"{text[0] if text else type(exc).__name__}") from None


def tune_problem(
    problem: Problem,
    url: str,
    settings: TuneSettings | None = None,
    regimes: Sequence[str] | None = None,
    *,
    fresh: bool = False,
    progress: Progress | None = None,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
    on_regime: Callable[[RegimeOutcome], None] | None = None,
) -> list[RegimeOutcome]:
    """Tune ``regimes`` (default: all, in file order) and write their table rows to ``url``.

    Args:
        fresh: delete the chosen regimes' studies first (their table rows stay until
            replaced).
        on_regime: called with each regime's outcome once its rows are written.

    Raises:
        SearchError: an unknown regime, or a study run with other settings.
        StorageError: the URL cannot be used; SchemaMismatchError: another schema version.
    """
    settings = settings or TuneSettings()
    chosen = list(regimes) if regimes else list(problem.regimes)
    for name in chosen:
        if name not in problem.regimes:
            raise SearchError(f"{problem.path}: no regime {name!r} (regimes: {', '.join(problem.regimes)})")
    store = Store(url, create=True)
    try:
        storage = open_storage(url)
        if fresh:
            existing = {s.study_name for s in storage.get_all_studies()}
            for name in chosen:
                if study_name(problem.name, name) in existing:
                    optuna.delete_study(study_name=study_name(problem.name, name), storage=storage)
        outcomes = []
        capacities: dict = {}
        for name in chosen:
            outcome = tune_regime(problem, name, storage, settings, callbacks=callbacks, progress=progress,
                                  capacities=capacities)
            store.replace_regime(problem.name, name, table_rows(outcome))
            outcomes.append(outcome)
            if on_regime is not None:
                on_regime(outcome)
        return outcomes
    finally:
        store.close()


def triton_version() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def table_rows(outcome: RegimeOutcome, created_at: datetime | None = None) -> list[TableRow]:
    """One row per (operator, bucket) for the regime's tuned assignment, with its
    provenance and the baselines' figures (every row of a regime carries the same)."""
    problem = outcome.problem
    tuned, baseline = outcome.tuned.evaluation, outcome.baseline.evaluation
    delta = paired_delta(tuned, baseline)
    oracle = outcome.oracle.best.evaluation.mean if outcome.oracle and outcome.oracle.best else None
    one_config = outcome.baselines.get(ONE_CONFIG.name)
    capacity, base_capacity = outcome.tuned.capacity, outcome.baseline.capacity
    one_capacity = one_config.capacity if one_config else None
    provenance = dict(
        device=problem.service.device.name, triton_version=triton_version(), problem_hash=problem.file_hash,
        study_name=outcome.study_name, trial_number=int(outcome.tuned.trial or 0),
        seeds=outcome.settings.seeds, horizon_s=outcome.horizon_s,
        goodput_rps=tuned.mean, goodput_ci_rps=tuned.ci, baseline_goodput_rps=baseline.mean,
        delta_ci_rps=delta.half_width, one_config_goodput_rps=one_config.evaluation.mean if one_config else None,
        oracle_goodput_rps=oracle, regime_rate_rps=regime_rate(problem, outcome.regime, outcome.settings.seed_list,
                                                               outcome.horizon_s),
        realized_rates_rps=list(tuned.rates or baseline.rates) or None,
        warmup_s=problem.regimes[outcome.regime].warmup_for(outcome.horizon_s),
        overloaded_seeds=tuned.overloaded, baseline_overloaded_seeds=baseline.overloaded,
        objective=outcome.objective, attainment_target=problem.service.slo.attainment,
        capacity_rps=_mean(capacity), capacity_ci_rps=capacity.ci if capacity else None,
        baseline_capacity_rps=_mean(base_capacity),
        capacity_delta_ci_rps=paired_delta(capacity, base_capacity).half_width if capacity and base_capacity else None,
        one_config_capacity_rps=_mean(one_capacity),
        created_at=created_at or datetime.now(timezone.utc),
    )
    return outcome.tuned.assignment.to_rows(problem, outcome.regime, provenance, baseline=outcome.baseline.assignment)


def _mean(evaluation: Evaluation | None) -> float | None:
    return evaluation.mean if evaluation is not None and evaluation.feasible else None


def regime_rate(problem: Problem, regime: str, seeds: Sequence[int], horizon_s: float) -> float | None:
    """The regime's mean arrival rate: the file's (a rate bucket's midpoint, or a fixed
    rate), else the mean rate its seeded workloads realise (requests / window)."""
    chosen = problem.regimes[regime]
    if chosen.arrivals.declared_rate is not None:
        return chosen.arrivals.declared_rate
    rates = [len(chosen.workload(seed, problem.service.jitter, horizon_s)) / horizon_s for seed in seeds]
    return sum(rates) / len(rates) if rates else None
