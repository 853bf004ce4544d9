"""Plotly figures of a sweep and of a regime's timelines. Every title says the numbers
are simulated and which profile sources (measured, modeled, declared) are behind them."""

from __future__ import annotations

from collections.abc import Sequence

from ..store.row import TableRow
from . import cells
from .sweep import BASELINE_LABEL, CapacityMark, Sweep
from .timeline import Timeline

TUNED_COLOR, BASELINE_COLOR = "#1f77b4", "#d62728"
PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
BUCKET_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
#: a title's second line (closed by ``</span>``): plotly does not wrap titles, so a long
#: one runs off a 1000 px window
SUBTITLE = '<br><span style="font-size:11px">'



def sources_label(sources: Sequence[str]) -> str:
    """Where a figure's kernel times come from, for its caption (``profiles modeled/measured``)."""
    return "profiles " + "/".join(sources) if sources else "no profiles"


def sweep_figure(sweep: Sweep, capacities: Sequence[CapacityMark] = ()):
    """Goodput versus offered load of every curve, the regimes' rate buckets shaded, the
    crossovers with THE baseline located, and ``capacities`` (the table's capacities at
    the SLO, :func:`tuner.dashboard.sweep.table_capacities`) as dotted vertical lines in
    their curve's colour."""
    import plotly.graph_objects as go

    fig = go.Figure()
    shared: dict[tuple[float, float], list[str]] = {}  # regimes of one rate share one band and label
    for b in sweep.rate_buckets:
        shared.setdefault((b.low, b.high), []).append(b.regime)
    for i, ((low, high), regimes) in enumerate(shared.items()):
        color = BUCKET_COLORS[i % len(BUCKET_COLORS)]
        if high > low:
            fig.add_vrect(x0=low, x1=high, fillcolor=color, opacity=0.10, line_width=0, layer="below")
        else:
            fig.add_vline(x=low, line={"color": color, "width": 6}, opacity=0.25)
        fig.add_annotation(x=low, xref="x", y=1 - 0.05 * (i % 3), yref="paper", text=", ".join(regimes),
                           showarrow=False, xanchor="right", yanchor="top", font={"size": 11})  # staggered
    tuned = 0
    colors = {}
    for curve in sweep.curves:
        color = BASELINE_COLOR if curve.is_baseline else PALETTE[tuned % len(PALETTE)]
        tuned += not curve.is_baseline
        colors.update(dict.fromkeys(curve.label.split(" / "), color))
        widths = curve.half_widths
        fig.add_trace(go.Scatter(
            x=list(sweep.rates), y=list(curve.means), mode="lines+markers", name=curve.label,
            line={"color": color, "dash": "dash" if curve.is_baseline else "solid"},
            error_y=None if any(w is None for w in widths) else {"type": "data", "array": list(widths), "visible": True},
            hovertemplate="%{x:.3g} req/s offered → %{y:.3g} req/s goodput<extra>" + curve.label + "</extra>"))
    fig.add_trace(go.Scatter(x=list(sweep.rates), y=list(sweep.rates), mode="lines", name="goodput = offered load",
                             line={"dash": "dot", "color": "grey"}, hoverinfo="skip"))
    drawn = set()
    for crossing in sweep.crossovers():
        where = (crossing.low, crossing.high, crossing.estimate)
        if where in drawn:  # several tuned curves often part from the baseline at the same rates
            continue
        drawn.add(where)
        if crossing.estimate is not None:
            fig.add_vline(x=crossing.estimate, line={"dash": "dashdot", "color": "black", "width": 1},
                          annotation_text=f"crossover ≈ {crossing.estimate:.3g} req/s", annotation_position="bottom right")
        else:
            fig.add_vrect(x0=crossing.low, x1=crossing.high, fillcolor="black", opacity=0.06, line_width=0,
                          annotation_text="curves part", annotation_position="bottom left")
    top = max([*sweep.rates, *(m + (w or 0.0) for c in sweep.curves for m, w in zip(c.means, c.half_widths))])
    for mark in capacities:  # in the legend, not as annotations: beside the regimes' labels those overlap
        color = BASELINE_COLOR if mark.is_baseline else colors.get(mark.label, TUNED_COLOR)
        fig.add_trace(go.Scatter(x=[mark.rate, mark.rate], y=[0, top], mode="lines",
                                 name=f"{mark.what}: {mark.describe()}",
                                 line={"dash": "dot", "color": color, "width": 2},
                                 hovertemplate=f"{mark.what}: {mark.describe()}<extra></extra>"))
    ci = f"mean ± 95% CI over {sweep.seeds} seeds" if sweep.seeds > 1 else "one seed"
    fig.update_layout(
        title=(f"{sweep.problem}: goodput vs offered load — simulated ({sources_label(sweep.sources)}), {ci}"
               f"{SUBTITLE}arrivals of regime {sweep.arrivals_of!r} at each rate; shaded: each regime's rate bucket"
               + ("; dotted: the table's capacities at the SLO" if capacities else "") + "</span>"),
        title_font_size=13, xaxis_title="offered load (req/s)", yaxis_title="goodput (req/s)",
        height=560, margin={"t": 90}, legend={"orientation": "h", "y": -0.2})
    return fig


def timeline_figure(title: str, timelines: Sequence[Timeline], sources: Sequence[str]):
    """M(t), R(t) and the queue depth of each timeline, stacked on one time axis (a Plotly figure)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("M(t): device memory in use", "R(t): share of the SMs in use",
                                        "queue depth: requests waiting"))
    for timeline, color in zip(timelines, (TUNED_COLOR, BASELINE_COLOR)):
        t = list(timeline.bin_starts)
        for row, values, unit in ((1, [m / 2**30 for m in timeline.memory_bytes], "M(t)"),
                                  (2, list(timeline.sm_fraction), "R(t)"),
                                  (3, list(timeline.queue), "queue")):
            fig.add_trace(go.Scatter(x=t, y=values, name=f"{timeline.label} {unit}", line_shape="hv",
                                     legendgroup=timeline.label, line={"color": color, "width": 1.5}), row=row, col=1)
    fig.update_yaxes(title_text="memory (GiB)", row=1, col=1)
    fig.update_yaxes(title_text="SM fraction (0–1)", row=2, col=1)
    fig.update_yaxes(title_text="requests", row=3, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    bin_ms = timelines[0].bin_s * 1e3 if timelines else 0.0
    fig.update_layout(title=f"{title} — simulated ({sources_label(sources)}); each point averages a {bin_ms:.3g} ms bin",
                      title_font_size=13, height=760)
    return fig


def attribution_figure(attribution, sources: Sequence[str], rows: Sequence[TableRow] = ()):
    """THE baseline's goodput (per-bucket isolated-fastest), then each operator's tuned
    configs substituted alone, then what no single substitution explains, ending at the
    tuned goodput (a Plotly waterfall). ``rows`` (the regime's table rows) name the changed
    buckets."""
    import plotly.graph_objects as go

    c = attribution.comparison
    steps = [(BASELINE_LABEL, "absolute", c.base_runs.mean, "")]
    for e in attribution.effects:
        steps.append((cells.unit_text(e, rows), "relative", e.add.mean,
                      f"alone on the baseline {e.add}; "
                      f"removed from the tuned {e.remove} req/s"))
    steps.append(("interaction", "relative", attribution.interaction.mean,
                  "what no single substitution explains"))
    steps.append(("tuned", "total", 0.0, f"total {attribution.total} req/s"))
    fig = go.Figure(go.Waterfall(
        x=[s[0] for s in steps], measure=[s[1] for s in steps], y=[s[2] for s in steps],
        text=[s[3] for s in steps], hovertemplate="%{x}<br>%{y:.3g} req/s<br>%{text}<extra></extra>",
        textposition="none", increasing={"marker": {"color": "#2ca02c"}}, decreasing={"marker": {"color": "#d62728"}},
        totals={"marker": {"color": TUNED_COLOR}}))
    fig.update_layout(
        title=(f"Why {attribution.regime}'s configs: each operator's tuned configs substituted alone into the "
               f"{BASELINE_LABEL} assignment{SUBTITLE}simulated ({sources_label(sources)}), seeds {list(c.seeds)}, "
               f"{c.horizon_s:g} s</span>"), title_font_size=13,
        yaxis_title="goodput (req/s)", xaxis_title="step", height=440, showlegend=False)
    return fig
