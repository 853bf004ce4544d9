"""The dashboard as one self-contained HTML file, and (only when asked) its figures and a
Markdown summary saved into each Optuna study, where optuna-dashboard shows them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..outputs import write_output
from ..search.baselines import ONE_CONFIG
from . import cells, figures, render
from .board import Dashboard, regimes_of
from .index import index_body
from .render import anchor_link, page
from .sweep import BASELINE_LABEL, table_capacities
from .timeline import summary_rows

STUDY_TIMELINE_POINTS = 200  # study system attributes hold ~2 kB each: keep saved figures small


def sections(board: Dashboard, problems: list[str] | None = None) -> list[tuple[str, Callable[[], str]]]:
    """``(what, draw)`` for every part of the report, so a caller can show progress."""
    rows = board.rows()
    parts: list[tuple[str, Callable[[], str]]] = [("config table", lambda: index_body(board, rows, anchor_link))]
    for name in dict.fromkeys(r.problem for r in rows):
        if problems is not None and name not in problems:
            continue
        parts.append((f"{name}: goodput vs load", lambda name=name: (
            f'<section id="{anchor_link("problem", name)[1:]}">{render.problem_body(board, name, rows, anchor_link)}</section>')))
        for problem, regime in regimes_of([r for r in rows if r.problem == name]):
            for kind, body in (("regime", render.regime_body), ("study", render.study_body)):
                parts.append((f"{problem}/{regime}: {kind}", lambda kind=kind, body=body, problem=problem, regime=regime: (
                    f'<section id="{anchor_link(kind, problem, regime)[1:]}">'
                    f"{body(board, problem, regime, rows, anchor_link)}</section>")))
    return parts


def write_report(board: Dashboard, out: str | Path, problems: list[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> Path:
    """Write every page into one HTML file with plotly.js inline (opens offline)."""
    from plotly.offline import get_plotlyjs

    html = []
    for what, draw in sections(board, problems):
        if progress:
            progress(what)
        html.append(draw())
    text = page(f"tuner report: {board.storage}", "\n".join(html),
                plotly=f'<script type="text/javascript">{get_plotlyjs()}</script>').replace('<a href="/">', '<a href="#">')
    path = Path(out)
    write_output(path, text)
    return path


def save_into_studies(board: Dashboard, problems: list[str] | None = None,
                      progress: Callable[[str], None] | None = None) -> list[str]:
    """Save each regime's goodput-vs-load, timeline and attribution figures and a Markdown
    note into its study (writes to the database: only on the user's explicit request).
    Returns the study names written.

    Raises:
        StorageError: the database is read-only (checked first, and on SQLite's refusal).
    """
    from ..store.store import check_writable, is_read_only, parse_url, read_only_error, resolve_url, shown

    url = parse_url(resolve_url(board.storage))
    check_writable(url, INTO_STUDIES_WRITES)
    try:
        return _save(board, problems, progress)
    except Exception as exc:  # SQLite's refusal arrives wrapped in Optuna's "invalid data in the commit"
        if is_read_only(exc):
            raise read_only_error(shown(url), "SQLite: attempt to write a readonly database",
                                  INTO_STUDIES_WRITES) from None
        raise


#: What a read-only database error says ``--into-studies`` writes there.
INTO_STUDIES_WRITES = "report --into-studies saves its figures and notes into the studies there"


def _save(board: Dashboard, problems: list[str] | None, progress: Callable[[str], None] | None) -> list[str]:
    import optuna
    from optuna_dashboard import save_note, save_plotly_graph_object

    rows = board.rows()
    written = []
    storage = optuna.storages.RDBStorage(board.storage, skip_compatibility_check=True)
    for (problem, regime), regime_rows in regimes_of(rows).items():
        name = regime_rows[0].study_name
        if not name or (problems is not None and problem not in problems):
            continue
        try:
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:
            continue
        if progress:
            progress(f"{problem}/{regime}")
        sources = sorted({r.source for r in regime_rows})
        sweep = board.sweep(problem, rows)
        capacities = [] if sweep is None else table_capacities(sweep, rows)
        if sweep is not None:
            save_plotly_graph_object(study, figures.sweep_figure(sweep, capacities),
                                     graph_object_id="tuner-goodput-vs-load")
        timelines = board.timelines(problem, regime, regime_rows)
        if timelines is not None:
            small = [t.coarser(STUDY_TIMELINE_POINTS) for t in timelines]
            save_plotly_graph_object(study, figures.timeline_figure(f"{problem} / {regime}", small, sources),
                                     graph_object_id="tuner-timelines")
        attribution = board.attribution(problem, regime, regime_rows)
        if attribution is not None and attribution.effects:
            save_plotly_graph_object(study, figures.attribution_figure(attribution, sources, regime_rows),
                                     graph_object_id="tuner-attribution")
        save_note(study, study_note(regime_rows, sweep, timelines, capacities))
        written.append(name)
    return written


def study_note(rows, sweep, timelines, capacities=()) -> str:
    """The Markdown note optuna-dashboard shows on the study page; ``capacities`` are the
    table's capacities drawn on the sweep (:func:`tuner.dashboard.sweep.table_capacities`)."""
    first = rows[0]
    tuned_runs = dict(cells.operator_runs(rows))
    base_runs = dict(cells.operator_runs(rows, "baseline_config"))
    sources = {op: "/".join(sorted({r.source for r in rows if r.op == op})) for op in tuned_runs}
    one_config = "—" if first.one_config_goodput_rps is None else f"{first.one_config_goodput_rps:.3g}"
    lines = [f"## tuner: {first.problem} / {first.regime}", "",
             f"| operator | tuned configs by shape bucket (\\* differs from the baseline) | {BASELINE_LABEL} | "
             "profile source |", "|---|---|---|---|",
             *(f"| {op} | " + " ".join(r.text() + ("\\*" if r.differs else "") for r in runs) + " | "
               + " ".join(r.text() for r in base_runs[op]) + f" | {sources[op]} |" for op, runs in tuned_runs.items()),
             "",
             f"Simulated goodput of the tuned assignment: **{first.goodput_rps:.3g} req/s**"
             + ("" if first.goodput_ci_rps is None else f" ± {first.goodput_ci_rps:.2g} (95% CI)")
             + f"; {BASELINE_LABEL}: {first.baseline_goodput_rps:.3g} req/s, tuned / baseline "
             f"{cells.ratio(first.goodput_rps, first.baseline_goodput_rps)}, tuned − baseline "
             f"{cells.difference(first.goodput_rps, first.baseline_goodput_rps, first.delta_ci_rps)} req/s "
             f"(paired by seed); {ONE_CONFIG.label}: {one_config} req/s "
             f"(trial #{first.trial_number}, {first.seeds} seeds × {first.horizon_s:g} s).", "",
             *(f"- {'**' + text + '**' if what == 'overloaded' else what + ': ' + text}"
               for what, text in cells.regime_summary(rows) if not what.startswith("goodput"))]
    if sweep is not None:
        crossings = sweep.crossovers()
        lines += ["", f"Crossovers with the {BASELINE_LABEL} assignment: " + (
            "; ".join(c.describe() for c in crossings) if crossings else "none in the swept range")
            + ". " + render.capacity_note(sweep, capacities)]
    if timelines is not None:
        lines += ["", f"| first {timelines[0].metrics.window_s:g} s, seed 0 | " + " | ".join(t.label for t in timelines) + " |",
                  "|---|" + "---|" * len(timelines),
                  *(f"| {name} | " + " | ".join(values) + " |" for name, values in summary_rows(timelines))]
    lines += ["", "All figures are simulated by tuner's service model, not measured."]
    return "\n".join(lines)
