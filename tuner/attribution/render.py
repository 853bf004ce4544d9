"""Output: the attribution waterfall (rich), JSON documents, the gate's Markdown report."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import IllegalConfigError
from ..problem.model import Problem
from .attribute import Attribution
from .gate import GateResult, RegimeVerdict
from .stats import Delta

GIB = 2**30


def _ci(delta: Delta) -> str:
    h = delta.half_width
    return "—" if h is None else f"±{h:.2f}"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def attribution_to_dict(a: Attribution) -> dict[str, object]:
    c = a.comparison
    return {
        "regime": a.regime, "seeds": list(c.seeds), "horizon_s": c.horizon_s, "confidence": c.confidence,
        "base": dict(c.base), "candidate": dict(c.candidate),
        "base_goodput_rps": c.base_runs.mean_goodput, "candidate_goodput_rps": c.candidate_runs.mean_goodput,
        "total": a.total.to_dict(),
        "effects": [{"op": e.op, "base_config": e.base_config, "candidate_config": e.candidate_config,
                     "add": e.add.to_dict(), "remove": e.remove.to_dict(), "effect": e.effect.to_dict(),
                     "ci_excludes_zero": e.effect.excludes_zero} for e in a.effects],
        "interaction": a.interaction.to_dict(),
        "blamed": a.blamed,
    }


def _bar(delta: float, scale: float) -> str:
    if delta == 0:
        return ""
    blocks = "▇" * max(1, round(12 * abs(delta) / scale))
    return f"[red]{blocks}[/red]" if delta < 0 else f"[green]{blocks}[/green]"


def waterfall(attributions: Sequence[Attribution]) -> None:
    """One table per regime: base → each substitution alone → interaction → candidate."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 160)
    for a in attributions:
        c = a.comparison
        pct = round(c.confidence * 100)
        table = Table(title=f"regime {a.regime}: goodput waterfall over seeds {list(c.seeds)} "
                            f"(req/s, mean ± {pct}% CI; all figures simulated)", title_justify="left")
        for column in ("step", "Δ goodput", f"{pct}% CI", "running", "remove-last Δ", "", "bar"):
            table.add_column(column, justify="left" if column in ("step", "bar", "") else "right")
        base = c.base_runs.mean_goodput
        scale = max([abs(e.add.mean) for e in a.effects] + [abs(a.interaction.mean), abs(a.total.mean), 1e-12])
        table.add_row("base", "", "", f"{base:.2f}", "", "", "")
        running = base
        for e in a.effects:
            running += e.add.mean
            mark = "← blamed" if e.op == a.blamed else ("CI ∌ 0" if e.add.excludes_zero else "")
            table.add_row(f"{e.op}: {e.base_config} → {e.candidate_config}", f"{e.add.mean:+.2f}", _ci(e.add),
                          f"{running:.2f}", f"{e.remove.mean:+.2f} {_ci(e.remove)}", mark, _bar(e.add.mean, scale))
        inter = a.interaction
        running += inter.mean
        table.add_row("interaction", f"{inter.mean:+.2f}", _ci(inter), f"{running:.2f}", "", "", _bar(inter.mean, scale))
        table.add_row("candidate", f"{a.total.mean:+.2f}", _ci(a.total), f"{c.candidate_runs.mean_goodput:.2f}",
                      "", "", _bar(a.total.mean, scale))
        console.print(table)
        if not a.effects:
            console.print("  base and candidate assign the same configs: nothing to attribute")


def verdict_line(v: RegimeVerdict) -> str:
    pct = round(v.confidence * 100)
    rel = v.relative_change
    rel_low = v.relative_lower_bound
    change = "n/a" if rel is None else f"{rel:+.1%}"
    bound = f"{v.lower_bound:+.2f}/s" if rel_low is None else f"{rel_low:+.1%}"
    text = (f"regime {v.regime}: {'PASS' if v.passed else 'FAIL'}: goodput {v.base_goodput:.2f}/s → "
            f"{v.comparison.candidate_runs.mean_goodput:.2f}/s ({change}; one-sided {pct}% lower bound {bound}, "
            f"tolerance -{v.tolerance:.1%})")
    if not v.passed and v.attribution is not None:
        blamed = v.attribution.blamed
        if blamed is None:
            text += "; no single operator change explains it (interaction)"
        else:
            e = next(e for e in v.attribution.effects if e.op == blamed)
            text += (f"; blamed operator: {blamed} ({e.base_config} → {e.candidate_config}, "
                     f"effect {e.effect.mean:+.2f} {_ci(e.effect)}/s)")
    return text


def _iso(problem: Problem, op: str, config_name: str) -> float | None:
    from ..search.space import isolated_latency

    config = problem.family_of(op).find(name=config_name)
    try:
        return isolated_latency(problem, op, config) if config is not None else None
    except IllegalConfigError:
        return None


def _fmt(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def markdown_report(problem: Problem, result: GateResult, base_text: str, cand_text: str) -> str:
    """A PR comment: the decision, per-regime service figures, per-kernel isolated vs service effect."""
    first = result.verdicts[0]
    c0 = first.comparison
    pct = round(first.confidence * 100)
    lines = [
        f"## tuner gate: {'✅ pass' if result.passed else '❌ fail'}",
        "",
        (f"Problem `{problem.name}`, base `{base_text}`, candidate `{cand_text}`; seeds {list(c0.seeds)}, "
        f"horizon {f'{c0.horizon_s:g} s' if c0.horizon_s is not None else 'per regime'}; tolerance "
        f"{first.tolerance:.1%} at {pct}% confidence (paired over seeds). All figures simulated."),
        "",
    ]
    lines += [f"- {verdict_line(v)}" for v in result.verdicts]
    lines += ["", "### Service per regime", "",
              ("| regime | goodput base (req/s) | goodput cand (req/s) | Δ (mean ± CI) | p99 base (ms) | p99 cand (ms) "
              "| peak mem base (GiB) | peak mem cand (GiB) | verdict |"),
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for v in result.verdicts:
        c = v.comparison
        p99b, p99c = _mean(c.base_runs.latency_p99), _mean(c.candidate_runs.latency_p99)
        lines.append(
            f"| {v.regime} | {c.base_runs.mean_goodput:.2f} | {c.candidate_runs.mean_goodput:.2f} "
            f"| {c.total.mean:+.2f} {_ci(c.total)} | {_fmt(p99b and p99b * 1e3, '.1f')} "
            f"| {_fmt(p99c and p99c * 1e3, '.1f')} | {max(c.base_runs.memory_peak) / GIB:.2f} "
            f"| {max(c.candidate_runs.memory_peak) / GIB:.2f} | {'pass' if v.passed else '**fail**'} |")
    lines += ["", "### Per substituted kernel: isolated latency vs service effect", "",
              ("Isolated latency: the config alone at the representative batch. Service effect: goodput change "
              "when that substitution alone is made on the base (mean ± CI over paired seeds)."), "",
              ("| regime | operator | base → cand | isolated (ms) | isolated Δ | goodput Δ alone (req/s) "
              "| goodput Δ removed last (req/s) |"),
              "|---|---|---|---:|---:|---:|---:|"]
    for v in result.verdicts:
        if v.attribution is None:
            continue
        for e in v.attribution.effects:
            before, after = _iso(problem, e.op, e.base_config), _iso(problem, e.op, e.candidate_config)
            iso = f"{_fmt(before and before * 1e3, '.3f')} → {_fmt(after and after * 1e3, '.3f')}"
            rel = "—" if not before or after is None else f"{(after - before) / before:+.1%}"
            blame = " **(blamed)**" if e.op == v.attribution.blamed and not v.passed else ""
            lines.append(f"| {v.regime} | `{e.op}`{blame} | {e.base_config} → {e.candidate_config} | {iso} | {rel} "
                         f"| {e.add.mean:+.2f} {_ci(e.add)} | {e.remove.mean:+.2f} {_ci(e.remove)} |")
        inter = v.attribution.interaction
        if v.attribution.effects:
            lines.append(f"| {v.regime} | *interaction* | | | | {inter.mean:+.2f} {_ci(inter)} | |")
    return "\n".join(lines) + "\n"
