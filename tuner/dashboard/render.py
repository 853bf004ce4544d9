"""The dashboard's pages, rendered from a read-only database and the problem files.

Rows are re-read for every page (so a running ``tuner tune`` shows up); simulations are
cached for the life of the :class:`Dashboard`, keyed by what determines them.
"""

from __future__ import annotations

import dataclasses
import html
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import TunerError
from ..store.table import TableRow
from . import figures, studies
from .storage import compile_resources, open_readonly, readonly_study_storage
from .points import Point, simulate_point
from .sweep import Sweep, bucket, config_names, point_horizon, run_sweep
from .timeline import Timeline, record, summary_rows

SWEEP_POINTS = 8
SWEEP_SEEDS = 3
SWEEP_MIN_REQUESTS = 100
SWEEP_MIN_HORIZON_S = 3.0
SWEEP_MAX_HORIZON_S = 20.0
TIMELINE_HORIZON_S = 5.0

Link = Callable[..., str]


def _ignore_interrupts() -> None:
    """Worker processes leave Ctrl-C to the parent, which shuts them down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def server_link(kind: str, problem: str, regime: str | None = None) -> str:
    return f"/{kind}/{quote(problem, safe='')}" + ("" if regime is None else f"/{quote(regime, safe='')}")


def anchor_link(kind: str, problem: str, regime: str | None = None) -> str:
    return f"#{kind}-{quote(problem, safe='')}" + ("" if regime is None else f"-{quote(regime, safe='')}")


def _span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}–{high:.3g}"


def figure_html(fig) -> str:
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False})


def regimes_of(rows: list[TableRow]) -> "OrderedDict[tuple[str, str], list[TableRow]]":
    grouped: OrderedDict[tuple[str, str], list[TableRow]] = OrderedDict()
    for row in rows:
        grouped.setdefault((row.problem, row.regime), []).append(row)
    return grouped


class PageNotFound(LookupError):
    """No such problem, regime or study in the table: the server answers 404."""


class Dashboard:
    """Pages of one database; never writes to it.

    Simulations are cached for the Dashboard's life and computed once: a page that needs
    a result another thread (the warm-up, another page) is computing waits for it.
    """

    def __init__(self, storage: str, problems_dir: str | Path = "search_spaces", *,
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
        with open_readonly(storage) as store:  # fail early on a bad URL
            store.problems()

    # ---- data -------------------------------------------------------------------------
    def rows(self) -> list[TableRow]:
        with open_readonly(self.storage) as store:
            return store.rows()

    def study_storage(self):
        with self._lock:
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

    def problem(self, name: str):
        """The problem file ``<problems_dir>/<name>.yaml``, or None when absent or invalid
        (looked for again on the next page, so adding the file needs no restart)."""
        path = self.problems_dir / f"{name}.yaml"
        if not path.is_file():
            return None
        stamp = path.stat().st_mtime_ns

        def load():
            from ..problem import load_problem

            try:
                return load_problem(path, resources=compile_resources(self.storage))
            except TunerError:
                return None
        return self._cached(("problem", str(path), stamp), load)

    def assignment(self, problem, rows: list[TableRow]) -> dict[str, Any] | None:
        """The configs a regime's rows name, or None when the problem file no longer has them."""
        result = {}
        for row in rows:
            if row.op not in {op.name for op in problem.service.operators}:
                return None
            config = problem.family_of(row.op).find(name=row.config)
            if config is None:
                return None
            result[row.op] = config
        return result

    def baseline(self, problem) -> dict[str, Any]:
        from ..search.space import JointSpace, isolated_fastest

        space = JointSpace.of(problem)
        return space.assignment(isolated_fastest(space))

    def sweep(self, problem_name: str, rows: list[TableRow]) -> Sweep | None:
        problem = self.problem(problem_name)
        if problem is None:
            return None
        labelled: OrderedDict[tuple, tuple[list[str], dict, bool]] = OrderedDict()
        for (_, regime), regime_rows in regimes_of([r for r in rows if r.problem == problem_name]).items():
            assignment = self.assignment(problem, regime_rows)
            if assignment is not None:
                labelled.setdefault(config_names(assignment), ([], assignment, False))[0].append(f"tuned for {regime}")
        baseline = self.baseline(problem)
        key = config_names(baseline)
        labels = labelled.get(key, ([], baseline, True))[0]
        labelled[key] = ([*labels, "isolated-fastest"], baseline, True)
        candidates = [(" / ".join(labels), assignment, is_base) for labels, assignment, is_base in labelled.values()]
        return run_sweep(problem, self.storage, candidates, **self.sweep_settings, evaluate=self._simulations)

    def _simulations(self, points: list[Point]) -> list[Any]:
        """Metrics of each point, computed once; in the worker processes when ``jobs`` > 1."""
        def run(points: list[Point]) -> list[Any]:
            runner = self._pool().map if self.jobs > 1 else map
            return list(runner(simulate_point, points))
        return self._compute(points, run)

    def _pool(self):
        with self._lock:
            if self.closed:
                raise RuntimeError("the dashboard is closed")
            if self._executor is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._executor = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=_ignore_interrupts)
            return self._executor

    def close(self) -> None:
        """Stop the worker processes and release the database connections."""
        with self._lock:
            self.closed = True
            executor, self._executor = self._executor, None
            storage, self._study_storage = self._study_storage, None
        if executor is not None:
            executor.shutdown(cancel_futures=True)
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
        horizon = min(self.timeline_horizon_s, problem.regimes[regime].horizon_s)
        result = []
        for label, assignment in (("tuned", tuned), ("isolated-fastest", self.baseline(problem))):
            timeline = self._cached(("timeline", problem.path, regime, config_names(assignment), horizon),
                                    lambda assignment=assignment: record(problem, assignment, regime, horizon, ""))
            result.append(dataclasses.replace(timeline, label=label))  # one simulation when tuned == baseline
        return result

    def attribution(self, problem_name: str, regime: str, rows: list[TableRow]):
        """Goodput of the isolated-fastest assignment, the tuned one, and each operator's
        tuned config substituted alone (:func:`tuner.attribution.attribute`), or None."""
        from ..attribution import attribute

        found = self._tuned(problem_name, regime, rows)
        if found is None:
            return None
        problem, tuned = found
        baseline = self.baseline(problem)
        chosen, settings = problem.regimes[regime], self.sweep_settings
        rates = bucket(chosen)
        horizon = point_horizon(chosen, (rates.low + rates.high) / 2, settings["min_requests"],
                                settings["min_horizon_s"], settings["max_horizon_s"])
        seeds = tuple(range(settings["seeds"]))

        def batch(runs):
            return self._simulations([Point(problem.path, self.storage, regime, config_names(assignment), None,
                                            seed, horizon) for assignment, seed in runs])
        return self._cached(("attribution", problem.path, regime, config_names(baseline), config_names(tuned),
                             seeds, horizon),
                            lambda: attribute(problem, baseline, tuned, regime, seeds, horizon, batch=batch))

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

    # ---- HTML -------------------------------------------------------------------------
    def index_body(self, rows: list[TableRow], link: Link = server_link) -> str:
        out = ["<h1>Config table <small>(goodput simulated, req/s)</small></h1>",
               f"<p>Storage: <code>{_e(self.storage)}</code> (read-only). "
               "Goodput is the simulated service goodput of the regime's tuned joint assignment "
               "(mean ± 95% CI over seeds); isolated-fastest is the per-operator fastest-alone "
               "assignment under the same traffic. Follow a problem for goodput versus offered load, "
               "a regime for its M(t)/R(t)/queue timelines, a study for its optimization history.</p>"]
        if self.optuna_dashboard_url:
            out.append(f'<p>Raw Optuna studies: <a href="{_e(self.optuna_dashboard_url)}/dashboard">optuna-dashboard</a> '
                       "(read-only).</p>")
        if not rows:
            out.append("<p>The table is empty (run <code>tuner tune</code>).</p>")
        out.append('<table class="regimes"><thead><tr><th>problem</th><th>regime</th><th>op</th><th>config</th>'
                   "<th>tuned goodput (simulated)</th><th>isolated-fastest</th><th>ratio</th><th>profile source</th>"
                   "<th>study</th></tr></thead><tbody>")
        for row in rows:
            goodput = f"{row.goodput_rps:.2f}" + ("" if row.goodput_ci_rps is None else f" ± {row.goodput_ci_rps:.2f}")
            ratio = f"{row.goodput_rps / row.baseline_goodput_rps:.2f}×" if row.baseline_goodput_rps else "—"
            out.append(
                f'<tr data-problem="{_e(row.problem)}" data-regime="{_e(row.regime)}">'
                f'<td><a href="{link("problem", row.problem)}">{_e(row.problem)}</a></td>'
                f'<td class="regime"><a href="{link("regime", row.problem, row.regime)}">{_e(row.regime)}</a></td>'
                f"<td>{_e(row.op)}</td><td title=\"{_e(row.params)}\">{_e(row.config)}</td>"
                f"<td>{goodput}</td><td>{row.baseline_goodput_rps:.2f}</td><td>{ratio}</td><td>{_e(row.source)}</td>"
                f'<td class="study"><a href="{link("study", row.problem, row.regime)}">'
                f"{_e(row.study_name or '')} #{row.trial_number}</a></td></tr>")
        out.append("</tbody></table>")
        return "\n".join(out)

    def _missing(self, problem: str, what: str) -> str:
        return (f"<p class=note>No problem file {_e(self.problems_dir / (problem + '.yaml'))} here "
                f"(or it no longer matches the table): no {what}.</p>")

    def problem_body(self, problem: str, rows: list[TableRow], link: Link = server_link) -> str:
        rows = [r for r in rows if r.problem == problem]
        if not rows:
            raise PageNotFound(f"no rows for problem {problem!r}")
        regimes = [regime for _, regime in regimes_of(rows)]
        out = [f"<h2>{_e(problem)}: goodput versus offered load</h2>",
               "<p>Regimes: " + ", ".join(f'<a href="{link("regime", problem, r)}">{_e(r)}</a>' for r in regimes) + "</p>"]
        sweep = self.sweep(problem, rows)
        if sweep is None:
            out.append(self._missing(problem, "simulated plot"))
            return "\n".join(out)
        out.append(figure_html(figures.sweep_figure(sweep)))
        crossings = sweep.crossovers()
        if crossings:
            out.append("<ul class=crossovers>" + "".join(
                f"<li>{_e(c.describe())}</li>" for c in crossings) + "</ul>")
        else:
            out.append("<p class=crossovers>No crossover in the swept range: the curves keep their order.</p>")
        out.append(f"<p class=note>Each point: {sweep.seeds} seeds, arrivals of regime {_e(sweep.arrivals_of)!s} at the "
                   f"given rate, horizon {_span(sweep.horizons_s)} s (enough for "
                   f"{self.sweep_settings['min_requests']} arrivals within "
                   f"{self.sweep_settings['min_horizon_s']:g}–{self.sweep_settings['max_horizon_s']:g} s and the "
                   "regime's own horizon). Curves within 1% of each other count as level.</p>")
        return "\n".join(out)

    def regime_body(self, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
        rows = [r for r in rows if r.problem == problem and r.regime == regime]
        if not rows:
            raise PageNotFound(f"no rows for {problem}/{regime}")
        out = [f"<h3>{_e(problem)} / {_e(regime)}: M(t), R(t) and queue depth, tuned vs isolated-fastest</h3>",
               f'<p><a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a> · '
               f'<a href="{link("study", problem, regime)}">study of {_e(regime)}</a></p>',
               "<p>Tuned: " + ", ".join(f"{_e(r.op)}={_e(r.config)}" for r in rows) + "</p>"]
        timelines = self.timelines(problem, regime, rows)
        if timelines is None:
            out.append(self._missing(problem, "timeline"))
            return "\n".join(out)
        sources = sorted({r.source for r in rows})
        horizon = timelines[0].metrics.window_s
        out.append(figure_html(figures.timeline_figure(f"{problem} / {regime}: seed 0, first {horizon:g} s",
                                                       timelines, sources)))
        out.append(timeline_table(timelines))
        attribution = self.attribution(problem, regime, rows)
        if attribution is not None and attribution.effects:
            out.append(f"<h4>Why these configs: goodput, operator by operator</h4>"
                       f"{figure_html(figures.attribution_figure(attribution, sources))}"
                       f"{attribution_table(attribution)}")
        elif attribution is not None:
            out.append("<p class=note>The tuned assignment is the isolated-fastest one here: nothing to attribute.</p>")
        return "\n".join(out)

    def study_body(self, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
        rows = [r for r in rows if r.problem == problem and r.regime == regime]
        if not rows:
            raise PageNotFound(f"no rows for {problem}/{regime}")
        name = rows[0].study_name
        out = [f"<h3>Study {_e(name)}</h3>",
               f'<p><a href="{link("regime", problem, regime)}">timelines of {_e(regime)}</a> · '
               f'<a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a></p>']
        copy = studies.snapshot(self.study_storage(), name) if name else None
        if copy is None:
            out.append(f"<p class=note>The study {_e(name)} is not in this database (the table was imported, "
                       "or the study deleted or being rewritten): no history.</p>")
            return "\n".join(out)
        study, study_id = copy
        info = studies.summary(study, study_id)
        out.append(f"<p class=study-summary>{info.trials} trials: {info.complete} complete "
                   f"({info.infeasible} infeasible: over the memory budget or illegal), {info.pruned} pruned; "
                   f"the table row is trial #{rows[0].trial_number}. Operators searched: "
                   f"{_e(', '.join(info.params))}.</p>")
        if self.optuna_dashboard_url:
            out.append(f'<p><a href="{_e(self.optuna_dashboard_url)}/dashboard/studies/{info.study_id}">'
                       "this study in optuna-dashboard</a></p>")
        if info.complete == 0:
            out.append("<p class=note>No complete trial yet: no history.</p>")
            return "\n".join(out)
        out.append(figure_html(studies.history_figure(study, rows[0].baseline_goodput_rps,
                                                      figures.sources_label(sorted({r.source for r in rows})))))
        importance = studies.importance_figure(study)
        out.append(figure_html(importance) if importance is not None else
                   f"<p class=note>No importances: {info.complete} complete trials over "
                   f"{len(info.params)} operator(s) (needs ≥ {studies.MIN_TRIALS_FOR_IMPORTANCE} and ≥ 2).</p>")
        return "\n".join(out)


def timeline_table(timelines: list[Timeline]) -> str:
    """Integrals and peaks side by side: what each assignment costs in memory and SM time."""
    head = "".join(f"<th>{_e(t.label)}</th>" for t in timelines)
    body = "".join(f"<tr><th>{_e(name)}</th>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
                   for name, values in summary_rows(timelines))
    window = timelines[0].metrics.window_s
    return (f'<table class="integrals"><caption>Simulated over the {window:g} s arrival window '
            f"(integrals) and the whole run with its drain (peaks)</caption><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def attribution_table(attribution) -> str:
    """Each changed operator's substitution both ways, with paired confidence intervals."""
    def cell(delta) -> str:
        ci = "" if delta.half_width is None else f" ± {delta.half_width:.3g}"
        return f"{delta.mean:+.3g}{ci}"

    pct = round(attribution.comparison.confidence * 100)
    body = "".join(
        f"<tr><td>{_e(e.op)}</td><td>{_e(e.base_config)}</td><td>{_e(e.candidate_config)}</td>"
        f"<td>{cell(e.add)}</td><td>{cell(e.remove)}</td><td>{cell(e.effect)}</td></tr>"
        for e in attribution.ranked[::-1])
    return ('<table class="attribution"><caption>Goodput change (req/s, simulated, mean ± '
            f"{pct}% CI paired over seeds) of each operator's tuned config: added alone to the "
            "isolated-fastest assignment, removed alone from the tuned one, and their average</caption>"
            "<thead><tr><th>operator</th><th>isolated-fastest</th><th>tuned</th><th>added alone</th>"
            f"<th>removed alone</th><th>effect</th></tr></thead><tbody>{body}"
            f"<tr><td colspan=5>interaction (total − Σ added alone)</td><td>{cell(attribution.interaction)}</td></tr>"
            f"<tr><td colspan=5><b>total</b></td><td><b>{cell(attribution.total)}</b></td></tr></tbody></table>")


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:90%;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f0f0f0}caption{text-align:left;font-size:90%;color:#555}.note{color:#a60}
.error{color:#b00;font-weight:bold}nav a,nav span{margin-right:1em}"""


def page(title: str, body: str, plotly: str = '<script src="/plotly.js"></script>') -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{STYLE}</style>{plotly}</head><body>'
            f'<nav><a href="/">config table</a><span>tuner dashboard — simulated results</span></nav>'
            f"{body}</body></html>")
