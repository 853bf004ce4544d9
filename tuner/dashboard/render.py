"""The dashboard's pages as HTML bodies: goodput versus offered load, a regime's timelines
and attribution, a study's history and importances (the first page is :mod:`.index`).

Each body takes the :class:`~tuner.dashboard.board.Dashboard` and the table's rows, and a
``link`` function: the server links pages by path, the one-file report by anchor.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from urllib.parse import quote

from ..store.row import TableRow
from . import cells, figures, studies, verdicts
from .board import Dashboard, regimes_of
from .sweep import ABOVE_CAPACITY, BASELINE_LABEL, table_capacities
from .timeline import Timeline, summary_rows

Link = Callable[..., str]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def server_link(kind: str, problem: str, regime: str | None = None) -> str:
    """The served dashboard's URL path of a page (``/regime/llm_decode/heavy``)."""
    return f"/{kind}/{quote(problem, safe='')}" + ("" if regime is None else f"/{quote(regime, safe='')}")


def anchor_link(kind: str, problem: str, regime: str | None = None) -> str:
    """The same page's anchor inside the one-file report (``#regime-llm_decode-heavy``)."""
    return f"#{kind}-{quote(problem, safe='')}" + ("" if regime is None else f"-{quote(regime, safe='')}")


def _span(values) -> str:
    low, high = min(values), max(values)
    return f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}–{high:.3g}"


def figure_html(fig) -> str:
    """A Plotly figure as an HTML fragment, without Plotly's script (the page brings it once)."""
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False})


class PageNotFound(LookupError):
    """No such problem, regime or study in the table: the server answers 404."""


def runs_by_op(rows: list[TableRow], key: str = "config") -> dict[str, str]:
    """Per operator, its runs of shape buckets sharing a config as HTML; a run whose
    tuned config differs from the per-bucket isolated-fastest one is marked (``*``,
    class ``differs``), its title naming the baseline's config there."""
    lines = {}
    for op, runs in cells.operator_runs(rows, key):
        parts = []
        for run in runs:
            params = ", ".join(f"{k}={v}" for k, v in run.params.items())
            if run.differs:
                title = f"{params}; {BASELINE_LABEL}: {'/'.join(run.baseline)}"
                parts.append(f'<span class=differs title="{_e(title)}">{_e(run.text())}*</span>')
            else:
                parts.append(f'<span title="{_e(params)}">{_e(run.text())}</span>' if params else _e(run.text()))
        lines[op] = " ".join(parts)
    return lines


def assignment_table(rows: list[TableRow]) -> str:
    """The tuned configs beside the baseline's, one row per operator, so the two columns
    line up operator by operator however long a line of runs wraps; differences are
    highlighted only when the regime's figures differ significantly (class ``significant``)."""
    f = cells.regime_figures(rows)
    tuned, base = runs_by_op(rows), runs_by_op(rows, "baseline_config")
    body = "".join(f'<tr data-op="{_e(op)}"><th>{_e(op)}</th><td class="configs">{line}</td>'
                   f'<td class="configs">{base.get(op, "—")}</td></tr>' for op, line in tuned.items())
    significant = " significant" if verdicts.kind(rows) != "none" else ""
    return (f'<table class="assignment{significant}"><caption>Configs by shape bucket (marked*: differs from the '
            f"{_e(BASELINE_LABEL)} config there, highlighted when the regime's figures differ significantly); "
            f"goodput from the table (simulated, req/s, tuning horizon)</caption><thead><tr><th>operator</th>"
            f"<th>tuned: {cells.rate(f['goodput'], f['ci'])}</th>"
            f"<th>{_e(BASELINE_LABEL)}: {cells.rate(f['baseline'])}</th></tr></thead><tbody>{body}</tbody></table>")


def _missing(board: Dashboard, problem: str, what: str) -> str:
    return (f"<p class=note>No problem file {_e(board.problems_dir / (problem + '.yaml'))} here, nor the file "
            f"its studies recorded (or it no longer matches the table): no {what}.</p>")


def _drift(board: Dashboard, problem: str, rows: list[TableRow]) -> list[str]:
    """A warning paragraph when the rows were tuned from another version of the file."""
    warning = board.drift(problem, rows)
    return [] if warning is None else [f"<p class=error>{_e(warning)}</p>"]


def problem_body(board: Dashboard, problem: str, rows: list[TableRow], link: Link = server_link) -> str:
    """A problem's page: goodput versus offered load of the tuned tables and baselines, and its regimes.

    Raises:
        PageNotFound: no row of that problem."""
    rows = [r for r in rows if r.problem == problem]
    if not rows:
        raise PageNotFound(f"no rows for problem {problem!r}")
    regimes = [regime for _, regime in regimes_of(rows)]
    out = [f"<h2>{_e(problem)}: goodput versus offered load</h2>",
           "<p>Regimes: " + ", ".join(f'<a href="{link("regime", problem, r)}">{_e(r)}</a>' for r in regimes) + "</p>",
           *_drift(board, problem, rows)]
    sweep = board.sweep(problem, rows)
    if sweep is None:
        out.append(_missing(board, problem, "simulated plot"))
        return "\n".join(out)
    capacities = table_capacities(sweep, rows)
    out.append(figure_html(figures.sweep_figure(sweep, capacities)))
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
    out.append(f"<p class=above-capacity>{_e(capacity_note(sweep, capacities))}</p>")
    return "\n".join(out)


def capacity_note(sweep, capacities) -> str:
    """Why the sweep's goodputs past a capacity are no steady-state figures, and the
    table's capacities drawn on it (plain text: the page and the study note show it)."""
    if not capacities:
        return f"{ABOVE_CAPACITY} (The table holds no capacity at the SLO for regime {sweep.arrivals_of}.)"
    return (f"{ABOVE_CAPACITY} The table's {capacities[0].what} on regime {sweep.arrivals_of}'s traffic "
            "(dotted lines): " + ", ".join(m.describe() for m in capacities) + ".")


def regime_body(board: Dashboard, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
    """A regime's page: its verdict and mechanism, the timelines of tuned and baseline, and the rows.

    Raises:
        PageNotFound: no row of that regime."""
    rows = [r for r in rows if r.problem == problem and r.regime == regime]
    if not rows:
        raise PageNotFound(f"no rows for {problem}/{regime}")
    short, full = (None if verdicts.kind(rows) == "none" else verdicts.mechanism_text(board, rows)) or (None, "")
    out = [f"<h3>{_e(problem)} / {_e(regime)}: M(t), R(t) and queue depth, tuned vs {_e(BASELINE_LABEL)}</h3>",
           f'<p><a href="{link("problem", problem)}">goodput vs load of {_e(problem)}</a> · '
           f'<a href="{link("study", problem, regime)}">study of {_e(regime)}</a></p>',
           f'<p class="verdict {verdicts.kind(rows)}" title="{_e(full)}">{_e(verdicts.verdict(rows, short))}</p>',
           *_drift(board, problem, rows),
           assignment_table(rows),
           summary_table(rows)]
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
                   f"{figure_html(figures.attribution_figure(attribution, sources, rows))}"
                   f"{attribution_table(attribution, rows)}")
    elif attribution is not None:
        out.append(f"<p class=note>The tuned assignment is the {_e(BASELINE_LABEL)} one here: "
                   "nothing to attribute.</p>")
    return "\n".join(out)


def study_body(board: Dashboard, problem: str, regime: str, rows: list[TableRow], link: Link = server_link) -> str:
    """A regime's study page: its trials' summary and figures.

    Raises:
        PageNotFound: no row of that regime."""
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
               f"the table rows are trial #{rows[0].trial_number}. The study maximised "
               f"{_e(studies.objective_label(rows[0].objective, rows[0].attainment_target))}. "
               f"Searched: {len(info.params)} parameter(s), one per (operator, shape bucket) cell with a choice: "
               f"{_e(studies.searched(info.params))}.</p>")
    if board.optuna_dashboard_url:
        out.append(f'<p><a href="{_e(board.optuna_dashboard_url)}/dashboard/studies/{info.study_id}">'
                   "this study in optuna-dashboard</a></p>")
    if info.complete == 0:
        out.append("<p class=note>No complete trial yet: no history.</p>")
        return "\n".join(out)
    first = rows[0]
    capacity = first.objective == "capacity"
    out.append(figure_html(studies.history_figure(
        study, first.baseline_capacity_rps if capacity else first.baseline_goodput_rps,
        figures.sources_label(sorted({r.source for r in rows})), first.objective, first.attainment_target)))
    importance = studies.importance_figure(study, first.objective)
    out.append(figure_html(importance) if importance is not None else
               f"<p class='note no-importance'>{_e(studies.no_importance(study))}</p>")
    return "\n".join(out)


def summary_table(rows: list[TableRow]) -> str:
    """The regime's figures from its table rows (:func:`tuner.dashboard.cells.regime_summary`):
    traffic, warm-up, objective, goodput and capacity at the SLO against the baseline, and
    the overload mark when a seed was overloaded."""
    body = "".join(f'<tr{" class=overloaded" if what == "overloaded" else ""}>'
                   f"<th>{_e(what)}</th><td>{_e(text)}</td></tr>" for what, text in cells.regime_summary(rows))
    return ('<table class="summary"><caption>From the table (simulated, tuning horizon; mean ± 95% CI over seeds, '
            f"differences paired by seed)</caption><tbody>{body}</tbody></table>")


def timeline_table(timelines: list[Timeline]) -> str:
    """Integrals and peaks side by side: what each assignment costs in memory and SM time."""
    head = "".join(f"<th>{_e(t.label)}</th>" for t in timelines)
    body = "".join(f"<tr><th>{_e(name)}</th>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
                   for name, values in summary_rows(timelines))
    window, warmup = timelines[0].metrics.window_s, timelines[0].metrics.warmup_s
    return (f'<table class="integrals"><caption>Simulated over the {window:g} s arrival window '
            f"(integrals; goodput, realised rate and backlog over its judged part after the {warmup:g} s warm-up) "
            f"and the whole run with its drain (peaks)</caption><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def attribution_table(attribution, rows: list[TableRow]) -> str:
    """Each changed operator's substitution both ways (all its changed buckets at once),
    with paired confidence intervals."""
    pct = round(attribution.comparison.confidence * 100)
    body = "".join(
        f"<tr><td>{_e(e.label)}</td><td>{_e(cells.bucket_spans(rows, e.op, e.buckets))}</td>"
        f"<td>{_e(e.base_config)}</td><td>{_e(e.candidate_config)}</td>"
        f"<td>{e.add}</td><td>{e.remove}</td><td>{e.effect}</td></tr>"
        for e in attribution.ranked[::-1])
    return ('<table class="attribution"><caption>Goodput change (req/s, simulated, mean ± '
            f"{pct}% CI paired over seeds) of each operator's tuned configs in the buckets where they "
            f"differ: added alone to the {_e(BASELINE_LABEL)} assignment, removed alone from the tuned one, "
            "and their average</caption>"
            f"<thead><tr><th>operator</th><th>buckets</th><th>{_e(BASELINE_LABEL)}</th><th>tuned</th>"
            f"<th>added alone</th><th>removed alone</th><th>effect</th></tr></thead><tbody>{body}"
            f"<tr><td colspan=6>interaction (total − Σ added alone)</td><td>{attribution.interaction}</td></tr>"
            f"<tr><td colspan=6><b>total</b></td><td><b>{attribution.total}</b></td></tr></tbody></table>")


STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:90%;margin:.5em 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f0f0f0}caption{text-align:left;font-size:90%;color:#555}.note{color:#a60}
.error{color:#b00;font-weight:bold}nav a,nav span{margin-right:1em}
.differs{font-weight:600}.significant .differs,.differs.significant{background:#fde2c8}td.configs{max-width:48em}
.overloaded{color:#b00}div.realised,div.target,div.ci,div.study,div.source,div.window,p.matrix-note{color:#555;font-size:90%}
div.overloaded{font-size:85%;white-space:normal}
p.matrix-note{margin:.8em 0 0}
div.wide{max-width:100%;overflow-x:auto}
section.problem{margin:1.5em 0 2em}section.problem h2{margin-bottom:.2em}h2 small{font-size:60%;font-weight:normal}
td.goodput,td.baseline,td.ratio,td.capacity,td.capacity-baseline,td.capacity-ratio,td.rate{text-align:right;white-space:nowrap}td.same,div.realised{white-space:nowrap}div.ci{white-space:normal}
td.ratio,td.capacity-ratio{min-width:8.5em}div.study,div.source{white-space:nowrap}
table.matrix td.differs{font-weight:normal}
th small{font-weight:normal;display:block}
table.matrix td{vertical-align:top;max-width:22em}table.matrix td.same{color:#777}
table.matrix details summary{cursor:pointer}ul.buckets{margin:.2em 0;padding-left:1em;font-weight:normal}
ul.buckets li{background:none}span.span{font-family:monospace;color:#555}
ul.verdicts{margin:.3em 0 .6em;padding-left:1.2em}ul.verdicts li,p.verdict{margin:2px 0;padding-left:.4em;border-left:4px solid #ccc}
.verdicts .gain,p.verdict.gain{border-color:#2ca02c}.verdicts .loss,p.verdict.loss{border-color:#d62728}
.verdicts .mixed,p.verdict.mixed{border-color:#ff7f0e}.verdicts .none,p.verdict.none{color:#555}
details.intro{margin:.5em 0 1em;max-width:80em}details.intro summary{cursor:pointer}
table.assignment{table-layout:fixed;width:100%}table.assignment th:first-child{width:9em}
table.assignment td{vertical-align:top;overflow-wrap:anywhere}"""


def page(title: str, body: str, plotly: str = '<script src="/plotly.js"></script>') -> str:
    """A whole HTML page around ``body``: the style, Plotly (served, or inlined by the caller) and the navigation bar."""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{STYLE}</style>{plotly}</head><body>'
            f'<nav><a href="/">config table</a><span>tuner dashboard — simulated results</span></nav>'
            f"{body}</body></html>")
