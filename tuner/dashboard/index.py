"""The dashboard's first page: per problem, one line of figures per regime and the configs
as a regime × operator matrix of what they change against THE baseline.

The table holds one row per (regime, operator, shape bucket), each repeating its regime's
figures; the page shows each figure once, where it belongs (the regime), and each config
as the few parameters that set it apart from the per-bucket isolated-fastest one, so that
a regime tuned like the baseline reads as a line of ``= baseline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from ..problem.changes import SAME
from ..search.baselines import ONE_CONFIG
from ..sim.metrics import OVERLOADED
from ..store.row import TableRow
from . import cells, verdicts
from .board import regimes_of
from .matrix import Cell, Matrix, config_matrix
from .render import Link, _e, server_link
from .sweep import BASELINE_LABEL


def index_body(board: Any, rows: list[TableRow], link: Link = server_link) -> str:
    """The first page of ``board`` (a :class:`~tuner.dashboard.board.Dashboard`: its
    storage, optuna-dashboard URL and problem files) from the table's rows: the problems
    with the largest significant effect first (:func:`verdicts.problem_order`), each
    opening with a verdict per regime in words."""
    out = ["<h1>Config table <small>(simulated goodput and capacity, req/s)</small></h1>",
           f"<details class=intro><summary>Storage: <code>{_e(board.storage)}</code> (read-only). Per problem, "
           "each regime's verdict, then its figures and configs against the "
           f"<b>{_e(BASELINE_LABEL)}</b> assignment; problems with the largest significant effect first "
           "(how to read this page)</summary>"
           "<p>Per problem, one line per regime: the "
           "simulated service goodput of its tuned joint assignment and its capacity at the SLO (the highest "
           "arrival rate at which the target share of requests meets the SLO), each beside the "
           f"<b>{_e(BASELINE_LABEL)}</b> assignment's (per operator and shape bucket, the config fastest alone "
           "at the bucket's shape: what <code>triton.autotune</code> keyed on the shape keeps) under the same "
           "traffic and seeds; mean ± 95% CI over seeds, the ratio's interval from the paired per-seed "
           "differences. A difference is significant when that paired interval excludes 0; the verdicts name "
           "only those, with what can produce them, and the problems are ordered by the largest (a goodput "
           "from an overloaded window does not rank: it depends on the window). Below, the configs: per regime "
           "and operator, the parameters where the tuned config "
           f"differs from the baseline's (<code>SPLIT_K 1→4</code>; <code>{_e(SAME)}</code>: the same config), "
           "highlighted where the regime's figures differ significantly, an operator with shape buckets "
           "expanding to its runs of buckets. A problem links to goodput "
           "versus offered load, a regime to its M(t)/R(t)/queue timelines and full configs (and "
           f"<i>{_e(ONE_CONFIG.label)}</i>), a trial to its study.</p></details>"]
    if board.optuna_dashboard_url:
        out.append(f'<p>Raw Optuna studies: <a href="{_e(board.optuna_dashboard_url)}/dashboard">optuna-dashboard</a> '
                   "(read-only).</p>")
    problems = verdicts.problem_order(rows)
    if not problems:
        out.append("<p>The table is empty (run <code>tuner tune</code>).</p>")
    else:
        out.append("<nav class=problems>Problems, largest significant effect first: " + " ".join(
            f'<a href="#table-{_e(p)}">{_e(p)}</a>' for p in problems) + "</nav>")
    for problem in problems:
        problem_rows = [r for r in rows if r.problem == problem]
        significant = {regime for (_, regime), regime_rows in regimes_of(problem_rows).items()
                       if verdicts.kind(regime_rows) != "none"}
        out.append(f'<section class=problem id="table-{_e(problem)}" data-problem="{_e(problem)}">'
                   f'<h2><a href="{link("problem", problem)}">{_e(problem)}</a> '
                   f"<small>goodput vs offered load</small></h2>"
                   f"{verdict_list(board, problem_rows, link)}"
                   f"<div class=wide>{figures_table(problem_rows, link)}</div>"
                   f"{matrix_table(config_matrix(problem_rows, _file_params(board)), problem, link, significant)}"
                   "</section>")
    if any(cells.is_overloaded(r) for r in rows):
        out.append(f"<p class=overloaded>{_e(OVERLOADED)}: in a regime so marked the backlog grew through the "
                   "window in some seed (tuned or baseline), so its goodput falls as the window lengthens and is no "
                   "steady-state figure; compare the capacities, which do not depend on the window.</p>")
    return "\n".join(out)


def verdict_list(board: Any, rows: list[TableRow], link: Link = server_link) -> str:
    """One problem's regimes, one verdict each (:func:`verdicts.verdict`), the mechanism
    worked out from the problem file only where a difference is significant (in full in
    the tooltip)."""
    items = []
    for (problem, regime), regime_rows in regimes_of(rows).items():
        kind = verdicts.kind(regime_rows)
        short, full = (None if kind == "none" else verdicts.mechanism_text(board, regime_rows)) or (None, "")
        items.append(f'<li class="{kind}" data-regime="{_e(regime)}" title="{_e(full)}">'
                     f'<a href="{link("regime", problem, regime)}">{_e(regime)}</a>: '
                     f"{_e(verdicts.verdict(regime_rows, short))}</li>")
    return f"<ul class=verdicts>{''.join(items)}</ul>"


def _file_params(board: Any):
    """Parameters of a config no row runs, from the problem file (None without one)."""
    def resolve(problem: str, op: str, name: str) -> Mapping[str, Any] | None:
        loaded = board.problem(problem)
        if loaded is None:
            return None
        try:
            config = loaded.family_of(op).find(name=name)
        except KeyError:  # the file no longer has the operator
            return None
        return None if config is None else config.param_dict
    return resolve


def _ratio_td(css: str, tuned: float | None, base: float | None, ci: float | None) -> str:
    """The ratio (:func:`cells.ratio`) over its paired interval, the paired difference in
    req/s in the tooltip; where there is no ratio (a baseline of 0) the difference shows."""
    ratio, difference = cells.ratio(tuned, base), cells.difference(tuned, base, ci)
    below = cells.change_interval(tuned, base, ci)
    if not below and ratio == "—" and difference != "—":
        below = f"{difference} req/s"
    return (f'<td class="{css}" title="{_e(f"tuned − baseline {difference} req/s, paired by seed")}">{ratio}'
            + (f"<div class=ci>{_e(below)}</div>" if below else "") + "</td>")


def figures_table(rows: list[TableRow], link: Link = server_link) -> str:
    """One problem's regimes, one line each, every figure once. Eight columns, so that
    the table fits a 1000 px window: the window, profiles and study trial ride under the
    regime's rate and name, the overload mark under the goodput it qualifies."""
    regimes = regimes_of(rows)
    firsts = [regime_rows[0] for regime_rows in regimes.values()]
    targets = sorted({r.attainment_target for r in firsts if r.attainment_target is not None})
    capacity = cells.capacity_label(targets[0] if len(targets) == 1 else None)
    pair = (f"<th>tuned ± 95% CI</th><th>{_e(BASELINE_LABEL)}</th>"
            '<th title="below: the paired per-seed difference\'s 95% CI relative to the baseline">'
            "tuned / baseline <small>(95% CI of the change)</small></th>")
    out = ['<table class="regimes"><thead><tr><th rowspan=2>regime <small>study trial, profiles</small></th>'
           '<th rowspan=2 title="the regime\'s mean arrival rate; below, the rate each seed\'s judged window '
           'realised (the same requests for every assignment), and the seeds × window, whose start is served but '
           'not judged">offered load (req/s) <small>declared, realised per seed; seeds × window (warm-up)</small></th>'
           '<th colspan=3 title="below a goodput, the seeds whose backlog grew through the window: there goodput '
           'depends on the horizon">goodput (simulated, req/s)</th>'
           f'<th colspan=3 class=capacity title="the highest arrival rate at which that share of requests meets '
           f'the SLO, on the regime\'s traffic shape">{_e(capacity)} (simulated, req/s)</th></tr>'
           f"<tr>{pair}{pair}</tr></thead><tbody>"]
    for (problem, regime), regime_rows in regimes.items():
        f = cells.regime_figures(regime_rows)
        first = regime_rows[0]
        overloaded = cells.overload_text(first)
        target = ("" if len(targets) <= 1 or first.attainment_target is None
                  else f"<div class=target>at {first.attainment_target:.0%} attainment</div>")
        flag = (f'<div class="overloaded" title="{_e(overloaded)}">overloaded: {_e(cells.overload_counts(first))}'
                "</div>" if overloaded else "")
        out.append(
            f'<tr data-problem="{_e(problem)}" data-regime="{_e(regime)}"'
            f'{" class=overloaded-regime" if overloaded else ""}>'
            f'<td class="regime"><a href="{link("regime", problem, regime)}">{_e(regime)}</a>'
            f'<div class=study><a href="{link("study", problem, regime)}" title="{_e(first.study_name or "")}">'
            f"#{first.trial_number}</a> maximised {_e(first.objective)}</div>"
            f'<div class=source>{_e(", ".join(sorted({r.source for r in regime_rows})))}</div></td>'
            f'<td class="rate">{cells.declared_rate(first)}'
            f"<div class=realised>realised {_e(cells.realised_rates(first))}</div>"
            f"<div class=window>{_e(cells.window_text(first))}</div></td>"
            f'<td class="goodput">{cells.rate(f["goodput"], f["ci"])}{flag}</td>'
            f'<td class="baseline">{cells.rate(f["baseline"])}</td>'
            f'{_ratio_td("ratio", f["goodput"], f["baseline"], f["delta_ci"])}'
            f'<td class="capacity">{cells.rate(f["capacity"], f["capacity_ci"])}{target}</td>'
            f'<td class="capacity-baseline">{cells.rate(f["baseline_capacity"])}</td>'
            f'{_ratio_td("capacity-ratio", f["capacity"], f["baseline_capacity"], f["capacity_delta_ci"])}</tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _cell_td(cell: Cell | None, significant: bool = False) -> str:
    """A matrix cell; a differing one is highlighted (class ``significant``) only when its
    regime's goodput or capacity differs significantly from the baseline's."""
    if cell is None:
        return '<td class="missing">—</td>'
    if not cell.differing:  # nothing to expand: every bucket runs the baseline's config
        names = "/".join(dict.fromkeys(s.config for s in cell.spans))
        return f'<td class="same" data-op="{_e(cell.op)}" title="{_e(names)}">{SAME}</td>'
    css = "differs significant" if significant else "differs"
    if cell.buckets == 1:
        (span,) = cell.spans
        return f'<td class="{css}" data-op="{_e(cell.op)}" title="{_e(span.title())}">{_e(span.text())}</td>'
    items = "".join(f'<li{" class=differs" if s.differs else ""} title="{_e(s.title())}">'
                    f"<span class=span>{_e(s.label)}</span> {_e(s.text())}</li>" for s in cell.spans)
    return (f'<td class="{css}" data-op="{_e(cell.op)}"><details><summary>{_e(cell.summary())}</summary>'
            f"<ul class=buckets>{items}</ul></details></td>")


def matrix_table(matrix: Matrix, problem: str, link: Link = server_link, significant: Set[str] = frozenset()) -> str:
    """The configs, regime × operator: each cell what its tuned config changes against the
    baseline's (tooltips name both); an operator with shape buckets expands to its spans.
    Differences are highlighted in the ``significant`` regimes only: elsewhere they change
    no figure beyond its interval."""
    head = "".join(f'<th data-op="{_e(op)}">{_e(op)}'
                   + (f" <small>({buckets} buckets)</small>" if buckets > 1 else "") + "</th>"
                   for op, buckets in matrix.operators)
    body = "".join(
        f'<tr data-regime="{_e(regime)}"><th class="regime"><a href="{link("regime", problem, regime)}">'
        f"{_e(regime)}</a></th>"
        + "".join(_cell_td(ops.get(op), regime in significant) for op, _ in matrix.operators) + "</tr>"
        for regime, ops in matrix.regimes)
    return (f'<p class=matrix-note>Tuned configs against the {_e(BASELINE_LABEL)} ones: the parameters '
            "that differ, baseline→tuned (tooltips name both configs); highlighted where the regime's figures "
            "differ significantly</p>"
            f'<div class=wide><table class="matrix" data-problem="{_e(problem)}">'
            f"<thead><tr><th>regime \\ operator</th>{head}</tr></thead><tbody>{body}</tbody></table></div>")
