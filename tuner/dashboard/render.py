"""Render the dashboard pages from a read-only :class:`~tuner.store.Store`."""

from __future__ import annotations

import dataclasses
import html
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import TunerError
from ..store.table import TableRow

SWEEP_POINTS = 6
SWEEP_HORIZON_S = 3.0
TIMELINE_HORIZON_S = 5.0
MAX_POINTS = 3000  # per timeline trace, after thinning


def readonly_url(url: str) -> str:
    """A SQLite URL rewritten to open its file read-only; other URLs unchanged."""
    from ..store.store import parse_url

    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return url
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return url
    path = Path(database)
    if not path.is_file():
        raise TunerError(f"{url}: no such database file {path}")
    with path.open("rb") as file:
        if file.read(16) != b"SQLite format 3\x00":
            raise TunerError(f"{url}: {path} is not a SQLite database")
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"


def open_readonly(url: str):
    """A :class:`Store` on ``url`` that never writes (SQLite files are opened ``mode=ro``)."""
    from ..store import Store

    return Store(readonly_url(url), create=False)


def default_storage() -> str:
    return "sqlite:///results.db" if Path("results.db").is_file() else "sqlite:///results.db.example"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


class Dashboard:
    """Pages of one database. Rows are re-read per page; simulations are cached."""

    def __init__(self, storage: str, problems_dir: str | Path = "search_spaces",
                 sweep_horizon_s: float = SWEEP_HORIZON_S, timeline_horizon_s: float = TIMELINE_HORIZON_S) -> None:
        self.storage = storage
        self.problems_dir = Path(problems_dir)
        self.sweep_horizon_s = sweep_horizon_s
        self.timeline_horizon_s = timeline_horizon_s
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}
        with open_readonly(storage) as store:  # fail early on a bad URL
            store.problems()

    # ---- data -------------------------------------------------------------------------
    def rows(self) -> list[TableRow]:
        with open_readonly(self.storage) as store:
            return store.rows()

    def regimes(self, rows: list[TableRow] | None = None) -> "OrderedDict[tuple[str, str], list[TableRow]]":
        grouped: OrderedDict[tuple[str, str], list[TableRow]] = OrderedDict()
        for row in rows if rows is not None else self.rows():
            grouped.setdefault((row.problem, row.regime), []).append(row)
        return grouped

    def _problem(self, name: str):
        key = ("problem", name)
        with self._lock:
            if key not in self._cache:
                path = self.problems_dir / f"{name}.yaml"
                problem = None
                if path.is_file():
                    from ..problem import load_problem

                    try:
                        problem = load_problem(path)
                    except TunerError:
                        problem = None
                self._cache[key] = problem
            return self._cache[key]

    def _assignments(self, problem, rows: list[TableRow]) -> dict[str, Any] | None:
        result = {}
        for row in rows:
            if row.op not in {op.name for op in problem.service.operators}:
                return None
            config = problem.family_of(row.op).find(name=row.config)
            if config is None:
                return None
            result[row.op] = config
        return result

    def _baseline(self, problem):
        from ..search.space import JointSpace, isolated_fastest

        space = JointSpace.of(problem)
        return space.assignment(isolated_fastest(space))

    def _simulate(self, key: Any, compute):
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = compute()
        with self._lock:
            self._cache[key] = value
        return value

    # ---- figures ----------------------------------------------------------------------
    def sweep_figure(self, problem_name: str, rows: list[TableRow]):
        """Goodput versus offered load for each distinct tuned assignment and the baseline,
        or None when the problem file is not found."""
        import plotly.graph_objects as go

        from ..sim import simulate

        problem = self._problem(problem_name)
        if problem is None:
            return None
        by_regime = self.regimes(rows)
        candidates: OrderedDict[tuple, tuple[list[str], dict]] = OrderedDict()
        for (_, regime), regime_rows in by_regime.items():
            assignment = self._assignments(problem, regime_rows)
            if assignment is None:
                continue
            point = tuple(sorted((op, c.name) for op, c in assignment.items()))
            candidates.setdefault(point, ([], assignment))[0].append(f"tuned for {regime}")
        baseline = self._baseline(problem)
        point = tuple(sorted((op, c.name) for op, c in baseline.items()))
        candidates.setdefault(point, ([], baseline))[0].append("isolated-fastest")

        scalable = {n: r for n, r in problem.regimes.items() if r.arrivals.rate_range is not None}
        fig = go.Figure()
        if scalable:
            heaviest = max(scalable.values(), key=lambda r: r.arrivals.rate_range[1])
            top = heaviest.arrivals.rate_range[1]
            rates = [top * (0.25 + 1.0 * i / (SWEEP_POINTS - 1)) for i in range(SWEEP_POINTS)]
            title = f"{problem_name}: goodput vs offered load (arrivals of regime {heaviest.name!r}, rate varied)"
            for point, (labels, assignment) in candidates.items():
                ys = []
                for rate in rates:
                    regime = dataclasses.replace(heaviest, name="__sweep",
                                                 arrivals=dataclasses.replace(heaviest.arrivals, rate_range=(rate, rate)))
                    swept = dataclasses.replace(problem, regimes={**problem.regimes, "__sweep": regime})
                    key = ("sweep", problem_name, point, round(rate, 9), self.sweep_horizon_s)
                    metrics = self._simulate(key, lambda: simulate(swept, assignment, "__sweep", 0,
                                                                   self.sweep_horizon_s).metrics)
                    ys.append(metrics.goodput_rps)
                fig.add_trace(go.Scatter(x=rates, y=ys, mode="lines+markers", name=" / ".join(labels)))
            fig.add_trace(go.Scatter(x=rates, y=rates, mode="lines", name="offered load",
                                     line={"dash": "dot", "color": "grey"}))
        else:  # trace-driven regimes: one point per regime, at its own measured load
            title = f"{problem_name}: goodput at each regime's own offered load"
            for point, (labels, assignment) in candidates.items():
                xs, ys, names = [], [], []
                for name in problem.regimes:
                    key = ("own", problem_name, point, name, self.sweep_horizon_s)
                    metrics = self._simulate(key, lambda: simulate(problem, assignment, name, 0,
                                                                   self.sweep_horizon_s).metrics)
                    xs.append(metrics.arrivals / metrics.window_s if metrics.window_s else 0.0)
                    ys.append(metrics.goodput_rps)
                    names.append(name)
                order = sorted(range(len(xs)), key=xs.__getitem__)
                fig.add_trace(go.Scatter(x=[xs[i] for i in order], y=[ys[i] for i in order], text=[names[i] for i in order],
                                         mode="lines+markers", name=" / ".join(labels)))
        fig.update_layout(title=title + f" — simulated, {self.sweep_horizon_s:g} s horizon, seed 0",
                          xaxis_title="offered load (req/s)", yaxis_title="goodput (req/s)",
                          height=480, margin={"t": 60})
        return fig

    def timeline_figure(self, problem_name: str, regime: str, rows: list[TableRow]):
        """M(t) and R(t) of the tuned assignment and the isolated-fastest one, or None."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        from ..sim import simulate

        problem = self._problem(problem_name)
        if problem is None or regime not in problem.regimes:
            return None
        tuned = self._assignments(problem, rows)
        if tuned is None:
            return None
        horizon = min(self.timeline_horizon_s, problem.regimes[regime].horizon_s)
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                            subplot_titles=("M(t): device memory in use", "R(t): SM share in use"))
        for label, assignment, color in (("tuned", tuned, "#1f77b4"), ("isolated-fastest", self._baseline(problem), "#d62728")):
            point = tuple(sorted((op, c.name) for op, c in assignment.items()))
            key = ("timeline", problem_name, regime, point, horizon)
            samples = self._simulate(key, lambda: _thin(simulate(problem, assignment, regime, 0, horizon,
                                                                 record=True).recording.samples))
            t = [s[0] for s in samples]
            fig.add_trace(go.Scatter(x=t, y=[s[1] / 2**30 for s in samples], name=f"{label} M(t)", line_shape="hv",
                                     line={"color": color}), row=1, col=1)
            fig.add_trace(go.Scatter(x=t, y=[s[2] for s in samples], name=f"{label} R(t)", line_shape="hv",
                                     line={"color": color, "dash": "dot"}), row=2, col=1)
        fig.update_yaxes(title_text="memory (GiB)", row=1, col=1)
        fig.update_yaxes(title_text="SM fraction (0–1)", row=2, col=1)
        fig.update_xaxes(title_text="time (s)", row=2, col=1)
        fig.update_layout(title=f"{problem_name} / {regime}: simulated, {horizon:g} s, seed 0", height=640)
        return fig

    # ---- HTML -------------------------------------------------------------------------
    def index_body(self, rows: list[TableRow], link=None) -> str:
        link = link or _server_link
        out = ["<h1>Config table <small>(goodput simulated, req/s)</small></h1>",
               f"<p>Storage: <code>{_e(self.storage)}</code> (read-only). "
               "Goodput is the simulated service goodput of the regime's tuned joint assignment "
               "(mean ± 95% CI over seeds); isolated-fastest is the per-operator fastest-alone "
               "assignment under the same traffic.</p>"]
        if not rows:
            out.append("<p>The table is empty (run <code>tuner tune</code>).</p>")
        out.append('<table class="regimes"><thead><tr><th>problem</th><th>regime</th><th>op</th><th>config</th>'
                   "<th>tuned goodput (simulated)</th><th>isolated-fastest</th><th>ratio</th><th>profile source</th>"
                   "</tr></thead><tbody>")
        for row in rows:
            goodput = f"{row.goodput_rps:.2f}" + ("" if row.goodput_ci_rps is None else f" ± {row.goodput_ci_rps:.2f}")
            ratio = f"{row.goodput_rps / row.baseline_goodput_rps:.2f}×" if row.baseline_goodput_rps else "—"
            out.append(
                f'<tr data-problem="{_e(row.problem)}" data-regime="{_e(row.regime)}">'
                f'<td><a href="{link("problem", row.problem)}">{_e(row.problem)}</a></td>'
                f'<td class="regime"><a href="{link("regime", row.problem, row.regime)}">{_e(row.regime)}</a></td>'
                f"<td>{_e(row.op)}</td><td title=\"{_e(row.params)}\">{_e(row.config)}</td>"
                f"<td>{goodput}</td><td>{row.baseline_goodput_rps:.2f}</td><td>{ratio}</td><td>{_e(row.source)}</td></tr>")
        out.append("</tbody></table>")
        return "\n".join(out)

    def problem_body(self, problem: str, rows: list[TableRow], link=None) -> str:
        link = link or _server_link
        import plotly.io as pio

        rows = [r for r in rows if r.problem == problem]
        if not rows:
            raise LookupError(f"no rows for problem {problem!r}")
        regimes = list(self.regimes(rows))
        out = [f"<h2>{_e(problem)}: goodput versus offered load</h2>",
               "<p>Regimes: " + ", ".join(f'<a href="{link("regime", problem, r)}">{_e(r)}</a>' for _, r in regimes) + "</p>"]
        fig = self.sweep_figure(problem, rows)
        if fig is None:
            out.append(f"<p class=note>No problem file {_e(self.problems_dir / (problem + '.yaml'))} here "
                       "(or it no longer matches the table); nothing to simulate.</p>")
        else:
            out.append(pio.to_html(fig, include_plotlyjs=False, full_html=False))
        return "\n".join(out)

    def regime_body(self, problem: str, regime: str, rows: list[TableRow], link=None) -> str:
        link = link or _server_link
        import plotly.io as pio

        rows = [r for r in rows if r.problem == problem and r.regime == regime]
        if not rows:
            raise LookupError(f"no rows for {problem}/{regime}")
        out = [f"<h3>{_e(problem)} / {_e(regime)}: M(t) and R(t), tuned vs isolated-fastest</h3>",
               f'<p><a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a></p>',
               "<p>Tuned: " + ", ".join(f"{_e(r.op)}={_e(r.config)}" for r in rows) + "</p>"]
        fig = self.timeline_figure(problem, regime, rows)
        if fig is None:
            out.append(f"<p class=note>No matching problem file {_e(self.problems_dir / (problem + '.yaml'))}; "
                       "no timeline.</p>")
        else:
            out.append(pio.to_html(fig, include_plotlyjs=False, full_html=False))
        return "\n".join(out)


def _server_link(kind: str, problem: str, regime: str | None = None) -> str:
    if kind == "problem":
        return f"/problem/{quote(problem, safe='')}"
    return f"/regime/{quote(problem, safe='')}/{quote(regime or '', safe='')}"


def _anchor_link(kind: str, problem: str, regime: str | None = None) -> str:
    return f"#{kind}-{quote(problem, safe='')}" + ("" if regime is None else f"-{quote(regime, safe='')}")


def _thin(samples: list[tuple]) -> list[tuple]:
    if len(samples) <= MAX_POINTS:
        return list(samples)
    step = len(samples) / MAX_POINTS
    picked = [samples[int(i * step)] for i in range(MAX_POINTS)]
    picked.append(samples[-1])
    return picked


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:90%}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f0f0f0}.note{color:#a60}.error{color:#b00;font-weight:bold}nav a{margin-right:1em}"""


def page(title: str, body: str, plotly: str = '<script src="/plotly.js"></script>') -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{STYLE}</style>{plotly}</head><body>'
            f'<nav><a href="/">config table</a><span>tuner dashboard — simulated results</span></nav>'
            f"{body}</body></html>")


def write_report(storage: str, out: str | Path, problems_dir: str | Path = "search_spaces",
                 problems: list[str] | None = None, **horizons: float) -> Path:
    """Write every page into one self-contained HTML file (plotly.js inline)."""
    from plotly.offline import get_plotlyjs

    board = Dashboard(storage, problems_dir, **horizons)
    rows = board.rows()
    parts = [board.index_body(rows, _anchor_link)]
    names = list(dict.fromkeys(r.problem for r in rows))
    for name in names:
        if problems is not None and name not in problems:
            continue
        parts.append(f'<section id="{_anchor_link("problem", name)[1:]}">{board.problem_body(name, rows, _anchor_link)}')
        for problem, regime in board.regimes([r for r in rows if r.problem == name]):
            parts.append(f'<div id="{_anchor_link("regime", problem, regime)[1:]}">'
                         f"{board.regime_body(problem, regime, rows, _anchor_link)}</div>")
        parts.append("</section>")
    text = page(f"tuner report: {storage}", "\n".join(parts),
                plotly=f'<script type="text/javascript">{get_plotlyjs()}</script>').replace('<a href="/">', '<a href="#">')
    path = Path(out)
    path.write_text(text, encoding="utf-8")
    return path
