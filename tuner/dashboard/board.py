"""A tuner database and its problem files, with the simulations its pages show.

Rows are re-read for every page (so a running ``tuner tune`` shows up); simulations are
cached for the life of the :class:`Dashboard`, keyed by what determines them, and run in
worker processes when asked to.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import bundled
from ..errors import StorageError, TunerError
from ..problem.assignment import Assignment
from ..problem.scenario import Scenario
from ..processes import spawn_pool, stop_pool
from ..store.row import TableRow
from .simulations import PageSimulation, metrics_of, remember
from .storage import open_readonly, readonly_study_storage
from .sweep import BASELINE_LABEL, Sweep, point_horizon, rate_bucket, run_sweep
from .timeline import Timeline, record

SWEEP_POINTS = 8
SWEEP_SEEDS = 3
SWEEP_MIN_REQUESTS = 100
SWEEP_MIN_HORIZON_S = 3.0
SWEEP_MAX_HORIZON_S = 20.0
TIMELINE_HORIZON_S = 5.0


def regimes_of(rows: list[TableRow]) -> "OrderedDict[tuple[str, str], list[TableRow]]":
    """The rows grouped by (problem, regime), in the order the rows first name them."""
    grouped: OrderedDict[tuple[str, str], list[TableRow]] = OrderedDict()
    for row in rows:
        grouped.setdefault((row.problem, row.regime), []).append(row)
    return grouped


class Dashboard:
    """What the pages of one database show; never writes to it.

    Simulations are cached for the Dashboard's life and computed once: a page that needs
    a result another thread (the warm-up, another page) is computing waits for it.
    """

    def __init__(self, storage: str, problems_dir: str | Path = bundled.PROBLEMS_DIR, *,
                 sweep_points: int = SWEEP_POINTS, sweep_seeds: int = SWEEP_SEEDS,
                 sweep_min_requests: int = SWEEP_MIN_REQUESTS, sweep_min_horizon_s: float = SWEEP_MIN_HORIZON_S,
                 sweep_max_horizon_s: float = SWEEP_MAX_HORIZON_S,
                 timeline_horizon_s: float = TIMELINE_HORIZON_S, optuna_dashboard_url: str | None = None,
                 jobs: int = 1) -> None:
        self.storage = storage
        self.problems_dir = Path(problems_dir)
        self.sweep_settings = {"points": sweep_points, "seeds": sweep_seeds, "min_requests": sweep_min_requests,
                               "min_horizon_s": sweep_min_horizon_s, "max_horizon_s": sweep_max_horizon_s}
        self.timeline_horizon_s = timeline_horizon_s
        self.optuna_dashboard_url = optuna_dashboard_url
        self.jobs = jobs
        self.closed = False
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}
        self._pending: dict[Any, threading.Event] = {}
        self._executor = None
        self._study_storage = None
        # Refuse at start, as `table show` does, a database whose table cannot be read: a
        # bad URL, or a damaged file (reading every row, not the problems' index alone,
        # which a zeroed table page leaves intact while every page would answer 500).
        self.rows()

    # ---- data -------------------------------------------------------------------------
    def rows(self) -> list[TableRow]:
        with open_readonly(self.storage) as store:
            return store.rows()

    def study_storage(self):
        with self._lock:
            if self.closed:
                raise RuntimeError("the dashboard is closed")
            if self._study_storage is None:
                self._study_storage = readonly_study_storage(self.storage)
            return self._study_storage

    def _claim(self, keys: list[Any]) -> tuple[list[Any], list[threading.Event]]:
        """The keys this thread must compute (now marked pending) and the events of those
        other threads are computing."""
        mine, theirs = [], []
        with self._lock:
            for key in dict.fromkeys(keys):
                if key in self._cache:
                    continue
                if key in self._pending:
                    theirs.append(self._pending[key])
                else:
                    self._pending[key] = threading.Event()
                    mine.append(key)
        return mine, theirs

    def _settle(self, values: dict[Any, Any], claimed: list[Any]) -> None:
        with self._lock:
            self._cache.update(values)
            for key in claimed:
                self._pending.pop(key).set()

    def _compute(self, keys: list[Any], compute: Callable[[list[Any]], list[Any]]) -> list[Any]:
        """Values for ``keys``: cached, awaited from another thread, or computed here."""
        mine, theirs = self._claim(keys)
        values: dict[Any, Any] = {}
        try:
            if mine:
                values = dict(zip(mine, compute(mine)))
        finally:
            self._settle(values, mine)  # on failure too: waiters then compute it themselves
        for event in theirs:
            event.wait()
        with self._lock:
            if all(k in self._cache for k in keys):
                return [self._cache[k] for k in keys]
        return self._compute(keys, compute)  # another thread failed on some: compute (or fail) here

    def _cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        return self._compute([key], lambda _keys: [compute()])[0]

    def cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per ``key`` for the Dashboard's life (for the pages' own
        derived figures, e.g. :func:`tuner.dashboard.verdicts.mechanism_text`)."""
        return self._cached(key, compute)

    def problem(self, name: str):
        """The problem file ``<problems_dir>/<name>.yaml``, else the file its studies
        recorded they were tuned from (a file need not be named after its ``name:``), or
        None when neither is there or it is invalid (looked for again on the next page, so
        adding the file needs no restart)."""
        path = self.problems_dir / f"{name}.yaml"
        if not path.is_file():
            recorded = self.recorded_path(name)
            if recorded is None:
                return None
            path = recorded
        stamp = path.stat().st_mtime_ns

        def load():
            from ..problem import load_problem
            from ..profile.cache import viewing_resources

            try:
                problem = load_problem(path, resources=viewing_resources(self.storage))
            except TunerError:
                return None
            remember(problem, self.storage)  # in-process simulations reuse it
            return problem
        return self._cached(("problem", str(path), stamp), load)

    def recorded_path(self, name: str) -> Path | None:
        """The problem file a study of ``name`` recorded (``problem_path``), when it exists.
        The studies are read once per dashboard (every page asks for its problem, several
        times); whether the file is there is asked each time."""
        recorded = self._cached(("recorded", name), lambda: self._recorded(name))
        return None if recorded is None or not Path(recorded).is_file() else Path(recorded)

    def _recorded(self, name: str) -> str | None:
        import optuna

        try:
            summaries = optuna.get_all_study_summaries(self.study_storage(), include_best_trial=False)
        except Exception:  # noqa: BLE001 - a database without studies (an imported table): no path
            return None
        paths = (s.user_attrs.get("problem_path") for s in summaries if s.study_name.startswith(f"tuner:{name}:"))
        return next((p for p in paths if isinstance(p, str) and Path(p).is_file()), None)

    def assignment(self, problem, rows: list[TableRow]) -> Assignment | None:
        """The assignment one regime's rows hold, or None when the problem file no longer
        matches them (other operators, buckets or configs)."""
        where = f"{self.storage}: {rows[0].problem}/{rows[0].regime}" if rows else self.storage
        try:
            return Assignment.from_rows(problem, rows, where)
        except StorageError:
            return None

    def drift(self, problem_name: str, rows: list[TableRow]) -> str | None:
        """The warning :meth:`Assignment.drift` gives when ``rows`` were tuned from another
        version of the problem file than the one shown (None when they match, or without
        a file): the plots simulate the file as it is now, the stored figures do not."""
        problem = self.problem(problem_name)
        if problem is None:
            return None
        return Assignment.drift(problem, rows, f"{self.storage}: {problem_name}")

    def baseline(self, problem) -> Assignment:
        """THE baseline: the per-bucket isolated-fastest assignment
        (:data:`tuner.search.baselines.PER_BUCKET`)."""
        from ..search.baselines import PER_BUCKET
        from ..search.space import JointSpace

        return self._cached(("baseline", problem.path, problem.file_hash),
                            lambda: PER_BUCKET.assignment(JointSpace.of(problem)))

    def sweep(self, problem_name: str, rows: list[TableRow]) -> Sweep | None:
        problem = self.problem(problem_name)
        if problem is None:
            return None
        labelled: OrderedDict[Assignment, tuple[list[str], bool]] = OrderedDict()
        for (_, regime), regime_rows in regimes_of([r for r in rows if r.problem == problem_name]).items():
            assignment = self.assignment(problem, regime_rows)
            if assignment is not None:
                labelled.setdefault(assignment, ([], False))[0].append(f"tuned for {regime}")
        baseline = self.baseline(problem)
        labelled[baseline] = ([*labelled.get(baseline, ([], True))[0], BASELINE_LABEL], True)
        candidates = [(" / ".join(labels), assignment, is_base) for assignment, (labels, is_base) in labelled.items()]
        return run_sweep(problem, self.storage, candidates, **self.sweep_settings, evaluate=self._simulations)

    def _simulations(self, simulations: list[PageSimulation]) -> list[Any]:
        """Metrics of each simulation, computed once; in the worker processes when ``jobs`` > 1."""
        def run(simulations: list[PageSimulation]) -> list[Any]:
            runner = self._pool().map if self.jobs > 1 else map
            return list(runner(metrics_of, simulations))
        return self._compute(simulations, run)

    def _pool(self):
        with self._lock:
            if self.closed:
                raise RuntimeError("the dashboard is closed")
            if self._executor is None:
                self._executor = spawn_pool(self.jobs)
            return self._executor

    def close(self) -> None:
        """Stop the worker processes and release the database connections."""
        with self._lock:
            self.closed = True
            executor, self._executor = self._executor, None
            storage, self._study_storage = self._study_storage, None
        if executor is not None:
            stop_pool(executor)
        if storage is not None:
            storage.engine.dispose()

    def _tuned(self, problem_name: str, regime: str, rows: list[TableRow]):
        """``(problem, tuned assignment)`` of a regime, or None when there is nothing to simulate."""
        problem = self.problem(problem_name)
        if problem is None or regime not in problem.regimes:
            return None
        tuned = self.assignment(problem, rows)
        return None if tuned is None else (problem, tuned)

    def timelines(self, problem_name: str, regime: str, rows: list[TableRow]) -> list[Timeline] | None:
        found = self._tuned(problem_name, regime, rows)
        if found is None:
            return None
        problem, tuned = found
        horizon = min(self.timeline_horizon_s, problem.regime(regime).window_s())
        result = []
        for label, assignment in (("tuned", tuned), (BASELINE_LABEL, self.baseline(problem))):
            timeline = self._cached(("timeline", problem.path, problem.file_hash, regime, assignment, horizon),
                                    lambda assignment=assignment: record(problem, assignment, regime, horizon, ""))
            result.append(dataclasses.replace(timeline, label=label))  # one simulation when tuned == baseline
        return result

    def attribution(self, problem_name: str, regime: str, rows: list[TableRow]):
        """Goodput of the per-bucket isolated-fastest assignment, the tuned one, and each
        operator's tuned configs substituted alone (:func:`tuner.attribution.attribute`), or None."""
        from ..attribution import attribute

        found = self._tuned(problem_name, regime, rows)
        if found is None:
            return None
        problem, tuned = found
        baseline = self.baseline(problem)
        chosen, settings = problem.regime(regime), self.sweep_settings
        rates = rate_bucket(chosen)
        horizon = point_horizon(chosen, (rates.low + rates.high) / 2, settings["min_requests"],
                                settings["min_horizon_s"], settings["max_horizon_s"])
        seeds = tuple(range(settings["seeds"]))

        def batch(runs):
            return self._simulations([PageSimulation.of(problem, self.storage, regime, assignment, seed, horizon)
                                      for assignment, seed in runs])
        return self._cached(("attribution", problem.path, problem.file_hash, regime, baseline, tuned, seeds, horizon),
                            lambda: attribute(Scenario.of(problem, regime, seeds, horizon), baseline, tuned, batch=batch))

    def warm(self, progress: Callable[[str], None] | None = None) -> None:
        """Run every page's simulations now, so that later page views are instant."""
        rows = self.rows()
        for (problem, regime), regime_rows in regimes_of(rows).items():
            if progress:
                progress(f"{problem}/{regime}")
            self.timelines(problem, regime, regime_rows)
        for problem in dict.fromkeys(r.problem for r in rows):
            if progress:
                progress(f"{problem} load sweep")
            self.sweep(problem, rows)
        for (problem, regime), regime_rows in regimes_of(rows).items():
            if progress:
                progress(f"{problem}/{regime} attribution")
            self.attribution(problem, regime, regime_rows)
