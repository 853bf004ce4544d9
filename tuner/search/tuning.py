"""Tune a problem: every chosen regime's study, then its rows of the config table.

:func:`tune_problem` is the one entry (``tuner tune``, ``tuner worker``, library callers):
it checks the request, opens the seed pool (:mod:`tuner.search.parallel`), starts the
``--jobs`` helpers (:mod:`tuner.search.helpers`) and runs this process's share
(:func:`tuner.search.run.run_regimes`). ``fresh`` runs the same in a scratch database
and swaps the result in at the end (:mod:`tuner.search.staging`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace

import optuna
from optuna.trial import FrozenTrial

from ..errors import SearchError
from ..interrupts import checkpoint, ignored
from ..problem.model import Problem
from ..store import Store
from . import parallel
from .helpers import Helpers
from .leases import Worker
from .run import TuneJob, open_storage, run_regimes
from .settings import TuneSettings
from .staging import Staging
from .outcome import RegimeOutcome
from .study import StudyProgress


def tune_problem(
    problem: Problem,
    url: str,
    settings: TuneSettings | None = None,
    regimes: Sequence[str] | None = None,
    *,
    fresh: bool = False,
    progress: StudyProgress | None = None,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
    on_regime: Callable[[RegimeOutcome], None] | None = None,
    jobs: int = 1,
    sim_jobs: int = 1,
    worker: Worker | None = None,
    orphaned: Callable[[], bool] = lambda: False,
    warn: Callable[[str], None] = lambda message: None,
) -> list[RegimeOutcome]:
    """Tune ``regimes`` (default: all, in file order) and write their table rows to ``url``.

    Args:
        fresh: start the chosen regimes' studies over: they are tuned in a scratch
            database and replace the old studies and rows in one transaction at the end
            (:mod:`tuner.search.staging`); a fresh run that fails writes nothing.
        on_regime: called with each regime's outcome once its rows are written.
        jobs: worker processes on this machine, this one included (``jobs - 1`` helpers
            run trials; this one also writes the rows).
        sim_jobs: processes simulating each evaluation's seeds side by side (1: in this
            process; :mod:`tuner.search.parallel`). Unlike ``jobs`` it changes nothing
            but the time taken.
        worker: who this process is among the workers (default: the first of its run).
        orphaned: tells a helper its parent died (it then stops).
        warn: told of a helper that stopped early (its trial is retried by the others).

    Returns:
        The outcomes of the regimes whose rows this process wrote; a regime whose rows
        were already written from the same study and settings (by another worker, or
        an earlier run) is skipped and absent.

    Raises:
        SearchError: an unknown regime, a study run with other settings, or some regimes
            of a problem whose engine knobs are chosen across all of them.
        StorageError: the URL cannot be used; SchemaMismatchError: another schema version.
    """
    settings = settings or TuneSettings()
    worker = worker or Worker.here()
    chosen = tuple(dict.fromkeys(regimes)) if regimes else tuple(problem.regimes)
    for name in chosen:
        problem.regime(name)
    if problem.knobs and set(chosen) != set(problem.regimes):
        left = ", ".join(name for name in problem.regimes if name not in chosen)
        raise SearchError(f"{problem.path}: service.knobs are start-up settings, one value for every regime, "
                          f"chosen across them all: tune every regime together (drop --regimes; {left} left out)")
    if jobs < 1:
        raise SearchError(f"--jobs must be at least 1 but got {jobs}")
    with contextlib.ExitStack() as succeeded, parallel.seed_pool(problem, url, sim_jobs) as seeds_run:
        job = TuneJob(problem, url, settings, chosen, worker, progress, tuple(callbacks), on_regime, orphaned, warn,
                      seeds_run)
        if not fresh:
            return run_regimes(job, _helpers(job, jobs))
        with Store(url, create=True) as store, Staging.of(problem, list(chosen), open_storage(url)) as staging:
            staged = replace(job, url=staging.url, on_regime=None)  # told once the rows are published
            outcomes = run_regimes(staged, _helpers(staged, jobs))
            # The swap is the run's success: from here a Ctrl-C is ignored until the clean-up
            # is done, or it would report "as they were" about a database already replaced.
            checkpoint()  # (a Ctrl-C that library code swallowed stops the run before the swap)
            succeeded.enter_context(ignored())
            staging.publish(store)
    if on_regime is not None:
        for outcome in outcomes:
            on_regime(outcome)
    return outcomes


def _helpers(job: TuneJob, jobs: int) -> Callable[[], Helpers] | None:
    """How :func:`run_regimes` starts ``jobs - 1`` helpers on ``job`` (None for one job),
    each simulating seeds in as many processes as this one."""
    if jobs <= 1:
        return None
    return lambda: Helpers.start(jobs - 1, job, sim_jobs=job.seed_runner.processes)
