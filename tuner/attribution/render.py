"""Output: the attribution waterfall (rich), JSON documents, the gate's Markdown report."""

from __future__ import annotations

from collections.abc import Sequence

from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..sim.metrics import OVERLOADED
from ..stats import Delta
from .attribute import Attribution, Effect
from .gate import GateResult, RegimeVerdict

GIB = 2**30


def _ci(delta: Delta) -> str:
    h = delta.half_width
    return "—" if h is None else f"±{h:.2f}"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _name(e: Effect) -> str:
    """``op``, ``op@LABEL`` (one bucket by bucket), or ``op [LABEL …]`` (an operator's
    changed buckets together, when it has several)."""
    if e.label != e.op or not e.bucket_labels[0]:
        return e.label
    return f"{e.op} [{' '.join(e.bucket_labels)}]"


def _specs(problem: Problem, assignment: Assignment) -> dict[str, str]:
    return dict(spec.split("=", 1) for spec in assignment.specs(problem))


def _effect_to_dict(e: Effect) -> dict[str, object]:
    return {"op": e.op, "label": e.label, "buckets": list(e.bucket_labels), "base_config": e.base_config,
            "candidate_config": e.candidate_config, "add": e.add.to_dict(), "remove": e.remove.to_dict(),
            "effect": e.effect.to_dict(), "ci_excludes_zero": e.effect.excludes_zero}


def attribution_to_dict(problem: Problem, a: Attribution) -> dict[str, object]:
    """An attribution as ``tuner attribute --json`` prints it (assignments in their text form)."""
    c = a.comparison
    cell = a.blamed_cell
    return {
        "regime": a.regime, "seeds": list(c.seeds), "horizon_s": c.horizon_s, "confidence": c.confidence,
        "base": _specs(problem, c.base), "candidate": _specs(problem, c.candidate),
        "metric": c.metric,
        f"base_{c.metric}_rps": c.base_runs.mean, f"candidate_{c.metric}_rps": c.candidate_runs.mean,
        "total": a.total.to_dict(),
        "by_bucket": a.by_bucket,
        "effects": [_effect_to_dict(e) for e in a.effects],
        "operators": [_effect_to_dict(e) for e in a.operators],
        "interaction": a.interaction.to_dict(),
        "blamed": a.blamed,
        "blamed_bucket": None if cell is None else cell.bucket_labels[0],
    }


def _bar(delta: float, scale: float) -> str:
    if delta == 0:
        return ""
    blocks = "▇" * max(1, round(12 * abs(delta) / scale))
    return f"[red]{blocks}[/red]" if delta < 0 else f"[green]{blocks}[/green]"


def _is_blamed(a: Attribution, e: Effect) -> bool:
    """Whether the blame falls on this unit: the responsible bucket when there is one,
    else every unit of the blamed operator."""
    cell = a.blamed_cell
    if cell is not None:
        return (e.op, e.buckets) == (cell.op, cell.buckets)
    return e.op == a.blamed


def waterfall(attributions: Sequence[Attribution]) -> None:
    """One table per regime: base → each substitution alone → interaction → candidate;
    by bucket, then each operator with several changed buckets substituted at once."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 160)
    for a in attributions:
        c = a.comparison
        pct = round(c.confidence * 100)
        table = Table(title=f"regime {a.regime}: {c.metric} waterfall over seeds {list(c.seeds)} "
                            f"(req/s, mean ± {pct}% CI; all figures simulated)", title_justify="left")
        for column in ("step", f"Δ {c.metric}", f"{pct}% CI", "running", "remove-last Δ", "note", "bar"):
            table.add_column(column, justify="left" if column in ("step", "bar", "note") else "right")
        base = c.base_runs.mean
        scale = max([abs(e.add.mean) for e in a.effects] + [abs(a.interaction.mean), abs(a.total.mean), 1e-12])
        table.add_row("base", "", "", f"{base:.2f}", "", "", "")
        running = base
        for e in a.effects:
            running += e.add.mean
            mark = "← blamed" if _is_blamed(a, e) else ("CI ∌ 0" if e.add.excludes_zero else "")
            table.add_row(f"{_name(e)}: {e.base_config} → {e.candidate_config}", f"{e.add.mean:+.2f}", _ci(e.add),
                          f"{running:.2f}", f"{e.remove.mean:+.2f} {_ci(e.remove)}", mark, _bar(e.add.mean, scale))
        inter = a.interaction
        running += inter.mean
        table.add_row("interaction", f"{inter.mean:+.2f}", _ci(inter), f"{running:.2f}", "", "", _bar(inter.mean, scale))
        table.add_row("candidate", f"{a.total.mean:+.2f}", _ci(a.total), f"{c.candidate_runs.mean:.2f}",
                      "", "", _bar(a.total.mean, scale))
        console.print(table)
        if not a.effects:
            console.print("  base and candidate assign the same configs: nothing to attribute")
        several = [o for o in a.operators if len(o.buckets) > 1]
        if a.by_bucket and several:
            summary = Table(title=f"regime {a.regime}: per operator, its changed buckets substituted together "
                                  f"(req/s, mean ± {pct}% CI)", title_justify="left")
            for column in ("operator", "buckets", "Δ alone", "remove-last Δ", "effect", "Σ buckets alone", "note"):
                summary.add_column(column, justify="left" if column in ("operator", "buckets", "note") else "right")
            for o in several:
                cells = sum(e.add.mean for e in a.effects if e.op == o.op)
                summary.add_row(o.op, " ".join(o.bucket_labels), f"{o.add.mean:+.2f} {_ci(o.add)}",
                                f"{o.remove.mean:+.2f} {_ci(o.remove)}", f"{o.effect.mean:+.2f} {_ci(o.effect)}",
                                f"{cells:+.2f}", "← blamed" if o.op == a.blamed else "")
            console.print(summary)


def blame_text(a: Attribution) -> str:
    """The blame of an attribution that has one: ``stage (lean → fast, effect -718.37
    ±18.86/s)``; ``mm@M3..8 (…)`` when the operator changed in one of its several
    buckets; ``mm (…), bucket mm@M3..8 (…)`` when one of its changed buckets is responsible."""
    op, cell = a.blamed_operator, a.blamed_cell
    if op is None:
        raise ValueError("nothing is blamed")
    if cell is not None and cell.buckets == op.buckets:
        op = cell
    text = (f"{op.cell_label or op.op} ({op.base_config} → {op.candidate_config}, "
            f"effect {op.effect.mean:+.2f} {_ci(op.effect)}/s)")
    if cell is not None and cell is not op:
        text += (f", bucket {cell.cell_label} ({cell.base_config} → {cell.candidate_config}, "
                 f"effect {cell.effect.mean:+.2f} {_ci(cell.effect)}/s)")
    return text


def verdict_line(v: RegimeVerdict) -> str:
    """One regime's verdict as the gate prints it: PASS or FAIL, the figures, the change and its bound."""
    pct = round(v.confidence * 100)
    rel = v.relative_change
    rel_low = v.relative_lower_bound
    change = "n/a" if rel is None else f"{rel:+.1%}"
    # a relative loss cannot exceed 100%: a bound below it only says how noisy the seeds are
    bound = f"{v.lower_bound:+.2f}/s" if rel_low is None else f"{max(rel_low, -1.0):+.1%}"
    text = (f"regime {v.regime}: {'PASS' if v.passed else 'FAIL'}: {v.comparison.metric} {v.base_value:.2f}/s → "
            f"{v.comparison.candidate_runs.mean:.2f}/s ({change}; one-sided {pct}% lower bound {bound}, "
            f"tolerance -{v.tolerance:.1%})")
    base, cand = v.comparison.base_runs, v.comparison.candidate_runs
    if base.overloaded or cand.overloaded:
        n = len(v.comparison.seeds)
        text += f"; {OVERLOADED} (base {base.overloaded} of {n} seeds, cand {cand.overloaded} of {n}: try --metric capacity)"
    if not v.passed and v.attribution is not None:
        if v.attribution.blamed is None:
            text += "; no single operator change explains it (interaction)"
        else:
            text += f"; blamed operator: {blame_text(v.attribution)}"
    return text


def _iso(problem: Problem, op: str, bucket: int, config_name: str) -> float | None:
    """Seconds the config takes alone at the bucket's representative shape, as the
    per-bucket isolated-fastest baseline times it (None when it cannot run that shape).

    Not :func:`tuner.search.space.seconds_alone` with
    :meth:`tuner.problem.model.Operator.bucket_variables`: that recomputes the shape from the
    batch variables, so every bucket would be timed at the largest batch's shape.
    """
    from ..search.space import cell_cost

    config = problem.family_of(op).find(name=config_name)
    return None if config is None else cell_cost(problem, op, bucket, config).latency_s


def _fmt(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _cell_rows(problem: Problem, v: RegimeVerdict) -> list[str]:
    """Per changed cell its isolated latency beside its service effect; then each operator
    with several changed buckets, substituted together."""
    a = v.attribution
    assert a is not None
    c = a.comparison
    rows = []

    def blame(hit: bool) -> str:
        return " **(blamed)**" if hit and not v.passed else ""

    for e in a.effects:
        if len(e.buckets) == 1:
            bucket = e.buckets[0]
            before = _iso(problem, e.op, bucket, c.base.config(e.op, bucket).name)
            after = _iso(problem, e.op, bucket, c.candidate.config(e.op, bucket).name)
            iso = f"{_fmt(before and before * 1e3, '.3f')} → {_fmt(after and after * 1e3, '.3f')}"
            rel = "—" if not before or after is None else f"{(after - before) / before:+.1%}"
        else:
            iso, rel = "—", "—"
        rows.append(f"| {v.regime} | `{_name(e)}`{blame(_is_blamed(a, e))} | {e.base_config} → {e.candidate_config} "
                    f"| {iso} | {rel} | {e.add.mean:+.2f} {_ci(e.add)} | {e.remove.mean:+.2f} {_ci(e.remove)} |")
    if a.by_bucket:
        for o in a.operators:
            if len(o.buckets) > 1:
                hit = o.op == a.blamed and a.blamed_cell is None
                rows.append(f"| {v.regime} | `{o.op}` (its {len(o.buckets)} changed buckets together){blame(hit)} "
                            f"| {o.base_config} → {o.candidate_config} | | | {o.add.mean:+.2f} {_ci(o.add)} "
                            f"| {o.remove.mean:+.2f} {_ci(o.remove)} |")
    if a.effects:
        rows.append(f"| {v.regime} | *interaction* | | | | {a.interaction.mean:+.2f} {_ci(a.interaction)} | |")
    return rows


def markdown_report(problem: Problem, result: GateResult, base_text: str, cand_text: str) -> str:
    """A PR comment: the decision, per-regime service figures, per changed (operator,
    bucket) cell its isolated latency beside its service effect."""
    first = result.verdicts[0]
    c0 = first.comparison
    metric = c0.metric
    pct = round(first.confidence * 100)
    lines = [
        f"## tuner gate: {'✅ PASS' if result.passed else '❌ FAIL'}",
        "",
        (f"Problem `{problem.name}`, base `{base_text}`, candidate `{cand_text}`; seeds {list(c0.seeds)}, "
        f"horizon {f'{c0.horizon_s:g} s' if c0.horizon_s is not None else 'per regime'}; tolerance "
        f"{first.tolerance:.1%} at {pct}% confidence (paired over seeds). All figures simulated."),
        "",
    ]
    lines += [f"- {verdict_line(v)}" for v in result.verdicts]
    lines += ["", "### Service per regime", "",
              (f"| regime | {metric} base (req/s) | {metric} cand (req/s) | Δ (mean ± CI) | p99 base (ms) "
              "| p99 cand (ms) | peak mem base (GiB) | peak mem cand (GiB) | verdict |"),
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for v in result.verdicts:
        c = v.comparison
        p99b, p99c = _mean(c.base_runs.latency_p99), _mean(c.candidate_runs.latency_p99)
        lines.append(
            f"| {v.regime} | {c.base_runs.mean:.2f} | {c.candidate_runs.mean:.2f} "
            f"| {c.total.mean:+.2f} {_ci(c.total)} | {_fmt(p99b and p99b * 1e3, '.1f')} "
            f"| {_fmt(p99c and p99c * 1e3, '.1f')} | {max(c.base_runs.memory_peak) / GIB:.2f} "
            f"| {max(c.candidate_runs.memory_peak) / GIB:.2f} | {'PASS' if v.passed else '**FAIL**'} |")
    lines += ["", "### Per changed kernel cell: isolated latency vs service effect", "",
              ("A cell is an operator (`op`) or one shape bucket of it (`op@LABEL`). Isolated latency: the config "
               f"alone at the bucket's representative shape. Service effect: {metric} change when that substitution "
               "alone is made on the base, and when it is removed alone from the candidate (mean ± CI over paired "
               "seeds)."), "",
              (f"| regime | cell | base → cand | isolated (ms) | isolated Δ | {metric} Δ alone (req/s) "
              f"| {metric} Δ removed last (req/s) |"),
              "|---|---|---|---:|---:|---:|---:|"]
    for v in result.verdicts:
        if v.attribution is not None:
            lines += _cell_rows(problem, v)
    return "\n".join(lines) + "\n"
