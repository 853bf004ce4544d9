"""Goodput versus offered load for the README's picture: the dashboard's load sweep of a
problem, recorded, and drawn as an SVG from the record.

Why a recorded sweep and a hand-written SVG: the picture must be regenerated from stored
results like every other figure (``benchmarks/figures.py`` writes it from
``benchmarks/results/load_curves.json``), and neither matplotlib nor a Plotly image
exporter (kaleido) is among the project's dependencies. The numbers are the dashboard's
own: :meth:`tuner.dashboard.Dashboard.sweep` simulates every distinct tuned assignment of
the table and THE baseline (per-bucket isolated-fastest) at the same rates and seeds, and
:func:`tuner.dashboard.sweep.table_capacities` gives the table's capacities at the SLO.

Usage::

    python benchmarks/load_curves.py                      # seed_example and llm_tp_overlap
    python benchmarks/load_curves.py seed_example --record
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from html import escape
from pathlib import Path

from recorded import add_options, record

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ("seed_example", "llm_tp_overlap")
STORAGE = f"sqlite:///{ROOT / 'results.db.example'}"


def measure(storage: str, problems: tuple[str, ...]) -> dict:
    """Each problem's sweep (rates, each curve's mean goodput and 95% half-width per rate,
    the regimes' rates) and the table's capacities at the SLO on the swept traffic."""
    from tuner.dashboard import Dashboard
    from tuner.dashboard.sweep import table_capacities

    board = Dashboard(storage)
    out = []
    try:
        for name in problems:
            rows = [r for r in board.rows() if r.problem == name]
            sweep = board.sweep(name, rows)
            if sweep is None:
                raise SystemExit(f"{name}: no problem file for it")
            out.append({
                "problem": name, "arrivals_of": sweep.arrivals_of, "seeds": sweep.seeds, "sources": list(sweep.sources),
                "rates": list(sweep.rates), "horizons_s": list(sweep.horizons_s),
                "rate_buckets": [{"regime": b.regime, "low": b.low, "high": b.high} for b in sweep.rate_buckets],
                "curves": [{"label": c.label, "is_baseline": c.is_baseline, "means": list(c.means),
                            "half_widths": list(c.half_widths)} for c in sweep.curves],
                "capacities": [{"label": m.label, "rate": m.rate, "is_baseline": m.is_baseline, "what": m.what}
                               for m in table_capacities(sweep, rows)],
                "crossovers": [c.describe() for c in sweep.crossovers()],
            })
    finally:
        board.close()
    return {"storage": storage, "settings": board.sweep_settings, "problems": out}


# -- the SVG --------------------------------------------------------------------------------

WIDTH, HEIGHT = 720, 430
LEFT, RIGHT, TOP, PLOT_BOTTOM = 64, 20, 64, 320  # the plot area's edges, px
TUNED_COLORS = ("#1f77b4", "#2ca02c", "#9467bd")
BASELINE_COLOR = "#d62728"


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (steps of 1, 2 or 5 × 10^k)."""
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(high / step - 1e-9)) + 1)]


def _text(x: float, y: float, text: str, *, anchor: str = "start", color: str = "#333", size: int = 12,
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{color}" font-size="{size}" '
            f'font-weight="{weight}">{escape(text)}</text>')


def _line(x1: float, y1: float, x2: float, y2: float, color: str, *, width: float = 1, dash: str = "") -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
            f'stroke-width="{width}"{dashes}/>')


def _spread(positions: list[float], gap: float) -> list[int]:
    """A row (0, 1, …) for each label at ``positions`` so that labels closer than ``gap``
    px sit on different rows."""
    rows: list[int] = []
    last: dict[int, float] = {}
    for x in positions:
        row = next(r for r in range(len(positions) + 1) if x - last.get(r, -math.inf) >= gap)
        last[row] = x
        rows.append(row)
    return rows


def _colors(curves: list[dict]) -> dict[str, str]:
    """Each curve's colour, and each of its labels' (``tuned for heavy``, the baseline's
    name), by curve label: THE baseline red, the tuned curves in turn."""
    colors: dict[str, str] = {}
    tuned = 0
    for curve in curves:
        color = BASELINE_COLOR if curve["is_baseline"] else TUNED_COLORS[tuned % len(TUNED_COLORS)]
        tuned += not curve["is_baseline"]
        colors.update(dict.fromkeys([curve["label"], *curve["label"].split(" / ")], color))
    return colors


def svg(report: dict, problem: str) -> str:
    """One problem's goodput-versus-load curves: mean goodput with 95% error bars per
    curve (THE baseline dashed red), goodput = offered load dotted grey, each regime's rate
    marked on the axis, the table's capacities at the SLO as dotted lines in their curve's
    colour, and a caption that says the figures are simulated."""
    data = next(p for p in report["problems"] if p["problem"] == problem)
    rates = data["rates"]
    x_high = max(rates)
    y_high = max(max(c["means"][i] + (c["half_widths"][i] or 0) for i in range(len(rates))) for c in data["curves"])
    x_ticks, y_ticks = nice_ticks(x_high), nice_ticks(max(y_high, 1e-9))
    x_max, y_max = x_ticks[-1], y_ticks[-1]

    def px(x: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * x / x_max

    def py(y: float) -> float:
        return PLOT_BOTTOM - (PLOT_BOTTOM - TOP) * y / y_max

    ci = f"mean ± 95% CI over {data['seeds']} seeds" if data["seeds"] > 1 else "one seed"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             _text(LEFT, 20, f"{problem}: goodput vs offered load", size=15, weight="bold"),
             _text(LEFT, 38, f"simulated (profiles {'/'.join(data['sources'])}), {ci}; arrivals of regime "
                             f"{data['arrivals_of']!r} at each rate", size=11, color="#555")]
    for t in y_ticks:
        parts += [_line(LEFT, py(t), WIDTH - RIGHT, py(t), "#e5e5e5"),
                  _text(LEFT - 6, py(t) + 4, f"{t:g}", anchor="end", size=11)]
    for t in x_ticks:
        parts.append(_text(px(t), PLOT_BOTTOM + 16, f"{t:g}", anchor="middle", size=11))
    parts += [_line(LEFT, PLOT_BOTTOM, WIDTH - RIGHT, PLOT_BOTTOM, "#333"), _line(LEFT, TOP, LEFT, PLOT_BOTTOM, "#333"),
              _text((LEFT + WIDTH - RIGHT) / 2, PLOT_BOTTOM + 34, "offered load (req/s)", anchor="middle"),
              f'<text transform="translate(16 {(TOP + PLOT_BOTTOM) / 2:.1f}) rotate(-90)" text-anchor="middle" '
              f'fill="#333" font-size="12">goodput (req/s)</text>']
    # goodput = offered load, clipped to the plot
    end = min(x_max, y_max)
    parts.append(_line(px(0), py(0), px(end), py(end), "#999", dash="2 3"))
    # the regimes' rates (a band for a rate range), labels staggered where they would overlap
    buckets = sorted(data["rate_buckets"], key=lambda b: b["low"])
    for b, row in zip(buckets, _spread([px(b["low"]) for b in buckets], 60)):
        if b["high"] > b["low"]:
            parts.append(f'<rect x="{px(b["low"]):.1f}" y="{TOP}" width="{px(b["high"]) - px(b["low"]):.1f}" '
                         f'height="{PLOT_BOTTOM - TOP}" fill="#888" opacity="0.08"/>')
        else:
            parts.append(_line(px(b["low"]), TOP, px(b["low"]), PLOT_BOTTOM, "#ddd", width=4))
        parts.append(_text(px(b["low"]) + 4, TOP + 12 + 13 * row, b["regime"], size=11, color="#666"))
    colors = _colors(data["curves"])
    for curve in sorted(data["curves"], key=lambda c: c["is_baseline"]):  # THE baseline drawn last, on top
        color = colors[curve["label"]]
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(rates, curve["means"]))
        dash = ' stroke-dasharray="6 4"' if curve["is_baseline"] else ""
        parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y, w in zip(rates, curve["means"], curve["half_widths"]):
            if w:
                parts.append(_line(px(x), py(y - w), px(x), py(y + w), color))
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
    marks = sorted(data["capacities"], key=lambda m: m["rate"])
    for mark, row in zip(marks, _spread([px(m["rate"]) for m in marks], 150)):
        color = BASELINE_COLOR if mark["is_baseline"] else colors.get(mark["label"], TUNED_COLORS[0])
        who = "baseline" if mark["is_baseline"] else "tuned"
        parts += [_line(px(mark["rate"]), TOP, px(mark["rate"]), PLOT_BOTTOM, color, width=1.5, dash="1 3"),
                  _text(px(mark["rate"]) - 4, PLOT_BOTTOM - 8 - 14 * row, f"{who} capacity {mark['rate']:.3g}",
                        anchor="end", size=11, color=color)]
    legend_y = PLOT_BOTTOM + 56
    for i, curve in enumerate(data["curves"]):
        color = colors[curve["label"]]
        y = legend_y + 18 * i
        dash = "6 4" if curve["is_baseline"] else ""
        parts += [_line(LEFT, y - 4, LEFT + 28, y - 4, color, width=2, dash=dash), _text(LEFT + 36, y, curve["label"])]
    what = data["capacities"][0]["what"] if data["capacities"] else "capacity at the SLO"
    parts.append(_text(LEFT, legend_y + 18 * len(data["curves"]),
                       f"dotted verticals: the table's {what} (req/s); grey dots: goodput = offered load",
                       size=11, color="#555"))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="*", default=list(PROBLEMS), help=f"default: {' '.join(PROBLEMS)}")
    parser.add_argument("--storage", default=STORAGE)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_options(parser)
    args = parser.parse_args(argv)
    report = measure(args.storage, tuple(args.problems))
    if args.record:
        record("load_curves", report, args.note)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for p in report["problems"]:
            print(f"{p['problem']}: rates {', '.join(f'{r:.3g}' for r in p['rates'])} req/s")
            for c in p["curves"]:
                print(f"  {c['label']}: {', '.join(f'{m:.3g}' for m in c['means'])}")
            for line in p["crossovers"]:
                print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
