"""The dashboard's pages as HTML bodies: the regime table, goodput versus offered load, a
regime's timelines and attribution, a study's history and importances.

Each body takes the :class:`~tuner.dashboard.board.Dashboard` and the table's rows, and a
``link`` function: the server links pages by path, the one-file report by anchor.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from urllib.parse import quote

from ..store.table import TableRow
from . import figures, studies
from .board import Dashboard, regimes_of
from .timeline import Timeline, summary_rows

Link = Callable[..., str]


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


class PageNotFound(LookupError):
    """No such problem, regime or study in the table: the server answers 404."""


def index_body(board: Dashboard, rows: list[TableRow], link: Link = server_link) -> str:
    out = ["<h1>Config table <small>(goodput simulated, req/s)</small></h1>",
           f"<p>Storage: <code>{_e(board.storage)}</code> (read-only). "
           "Goodput is the simulated service goodput of the regime's tuned joint assignment "
           "(mean ± 95% CI over seeds); isolated-fastest is the per-operator fastest-alone "
           "assignment under the same traffic. Follow a problem for goodput versus offered load, "
           "a regime for its M(t)/R(t)/queue timelines, a study for its optimization history.</p>"]
    if board.optuna_dashboard_url:
        out.append(f'<p>Raw Optuna studies: <a href="{_e(board.optuna_dashboard_url)}/dashboard">optuna-dashboard</a> '
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


def _missing(board: Dashboard, problem: str, what: str) -> str:
    return (f"<p class=note>No problem file {_e(board.problems_dir / (problem + '.yaml'))} here "
            f"(or it no longer matches the table): no {what}.</p>")


def problem_body(board: Dashboard, problem: str, rows: list[TableRow], link: Link = server_link) -> str:
    rows = [r for r in rows if r.problem == problem]
    if not rows:
        raise PageNotFound(f"no rows for problem {problem!r}")
    regimes = [regime for _, regime in regimes_of(rows)]
    out = [f"<h2>{_e(problem)}: goodput versus offered load</h2>",
           "<p>Regimes: " + ", ".join(f'<a href="{link("regime", problem, r)}">{_e(r)}</a>' for r in regimes) + "</p>"]
    sweep = board.sweep(problem, rows)
    if sweep is None:
        out.append(_missing(board, problem, "simulated plot"))
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
               f"{board.sweep_settings['min_requests']} arrivals within "
               f"{board.sweep_settings['min_horizon_s']:g}–{board.sweep_settings['max_horizon_s']:g} s and the "
               "regime's own horizon). Curves within 1% of each other count as level.</p>")
    return "\n".join(out)


def regime_body(board: Dashboard, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
    rows = [r for r in rows if r.problem == problem and r.regime == regime]
    if not rows:
        raise PageNotFound(f"no rows for {problem}/{regime}")
    out = [f"<h3>{_e(problem)} / {_e(regime)}: M(t), R(t) and queue depth, tuned vs isolated-fastest</h3>",
           f'<p><a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a> · '
           f'<a href="{link("study", problem, regime)}">study of {_e(regime)}</a></p>',
           "<p>Tuned: " + ", ".join(f"{_e(r.op)}={_e(r.config)}" for r in rows) + "</p>"]
    timelines = board.timelines(problem, regime, rows)
    if timelines is None:
        out.append(_missing(board, problem, "timeline"))
        return "\n".join(out)
    sources = sorted({r.source for r in rows})
    horizon = timelines[0].metrics.window_s
    out.append(figure_html(figures.timeline_figure(f"{problem} / {regime}: seed 0, first {horizon:g} s",
                                                   timelines, sources)))
    out.append(timeline_table(timelines))
    attribution = board.attribution(problem, regime, rows)
    if attribution is not None and attribution.effects:
        out.append(f"<h4>Why these configs: goodput, operator by operator</h4>"
                   f"{figure_html(figures.attribution_figure(attribution, sources))}"
                   f"{attribution_table(attribution)}")
    elif attribution is not None:
        out.append("<p class=note>The tuned assignment is the isolated-fastest one here: nothing to attribute.</p>")
    return "\n".join(out)


def study_body(board: Dashboard, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
    rows = [r for r in rows if r.problem == problem and r.regime == regime]
    if not rows:
        raise PageNotFound(f"no rows for {problem}/{regime}")
    name = rows[0].study_name
    out = [f"<h3>Study {_e(name)}</h3>",
           f'<p><a href="{link("regime", problem, regime)}">timelines of {_e(regime)}</a> · '
           f'<a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a></p>']
    copy = studies.snapshot(board.study_storage(), name) if name else None
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
    if board.optuna_dashboard_url:
        out.append(f'<p><a href="{_e(board.optuna_dashboard_url)}/dashboard/studies/{info.study_id}">'
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
    pct = round(attribution.comparison.confidence * 100)
    body = "".join(
        f"<tr><td>{_e(e.op)}</td><td>{_e(e.base_config)}</td><td>{_e(e.candidate_config)}</td>"
        f"<td>{e.add}</td><td>{e.remove}</td><td>{e.effect}</td></tr>"
        for e in attribution.ranked[::-1])
    return ('<table class="attribution"><caption>Goodput change (req/s, simulated, mean ± '
            f"{pct}% CI paired over seeds) of each operator's tuned config: added alone to the "
            "isolated-fastest assignment, removed alone from the tuned one, and their average</caption>"
            "<thead><tr><th>operator</th><th>isolated-fastest</th><th>tuned</th><th>added alone</th>"
            f"<th>removed alone</th><th>effect</th></tr></thead><tbody>{body}"
            f"<tr><td colspan=5>interaction (total − Σ added alone)</td><td>{attribution.interaction}</td></tr>"
            f"<tr><td colspan=5><b>total</b></td><td><b>{attribution.total}</b></td></tr></tbody></table>")


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:90%;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f0f0f0}caption{text-align:left;font-size:90%;color:#555}.note{color:#a60}
.error{color:#b00;font-weight:bold}nav a,nav span{margin-right:1em}"""


def page(title: str, body: str, plotly: str = '<script src="/plotly.js"></script>') -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{STYLE}</style>{plotly}</head><body>'
            f'<nav><a href="/">config table</a><span>tuner dashboard — simulated results</span></nav>'
            f"{body}</body></html>")
