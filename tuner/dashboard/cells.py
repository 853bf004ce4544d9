"""One regime's table rows, compactly: per operator the runs of consecutive shape buckets
that share a config, each marked when it differs from THE baseline (the per-bucket
isolated-fastest config the row stores in ``baseline_config``).

Built from the rows alone (``bucket_bounds`` named with
:func:`tuner.store.row.bucket_label`), so the table shows even when the problem file is
absent; the labels read like :func:`tuner.problem.assignment.runs`' (``M..64:a M128..8192:b``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..search.baselines import ONE_CONFIG, PER_BUCKET
from ..sim.metrics import overload_note
from ..stats import ratio_text
from ..store.row import TableRow, span_label
from ..stats import figure


@dataclass(frozen=True)
class Run:
    """Consecutive buckets of one operator with one tuned config, all differing from the
    baseline or all equal to it.

    Attributes:
        label: the buckets' span (``M..128``, ``B..1/L17..64``, ``first–last`` when the
            buckets do not form one range); "" for an operator's only bucket.
        config, params: the tuned config of these buckets.
        baseline: the per-bucket isolated-fastest configs of these buckets, in bucket
            order, repeats merged.
        differs: whether the tuned config differs from the baseline's in these buckets.
        buckets: how many buckets the run covers.
    """

    label: str
    config: str
    params: dict[str, Any]
    baseline: tuple[str, ...]
    differs: bool
    buckets: int

    def text(self, which: str = "config") -> str:
        """``label:name`` (just ``name`` for an operator's only bucket); ``which="baseline"``
        names the baseline's configs instead."""
        name = self.config if which == "config" else "/".join(self.baseline)
        return f"{self.label}:{name}" if self.label else name


def operator_runs(rows: Sequence[TableRow], key: str = "config") -> list[tuple[str, list[Run]]]:
    """Per operator of one regime's rows (in table order), its runs of buckets.

    ``key="config"`` groups by the tuned config (a run never mixes buckets that differ
    from the baseline with buckets that do not); ``key="baseline_config"`` shows the
    baseline's own runs; ``key="pair"`` groups by both, so that each run has one baseline
    config to compare its tuned one with (the first page's parameter changes).
    """
    by_op: dict[str, list[TableRow]] = {}
    for row in sorted(rows, key=lambda r: (r.op_index, r.op, r.bucket)):
        by_op.setdefault(row.op, []).append(row)
    if key not in ("config", "baseline_config", "pair"):
        raise ValueError(f"runs by {key!r}: expected 'config', 'baseline_config' or 'pair'")

    def group(row: TableRow) -> tuple[object, ...]:
        if key == "config":
            return row.config, row.config != row.baseline_config
        if key == "pair":
            return row.config, row.baseline_config
        return (row.baseline_config,)

    out = []
    for op, op_rows in by_op.items():
        runs: list[list[TableRow]] = []
        for row in op_rows:
            last = runs[-1][-1] if runs else None
            if last is not None and group(last) == group(row) and last.bucket + 1 == row.bucket:
                runs[-1].append(row)
            else:
                runs.append([row])
        out.append((op, [_run(run, key, single=len(op_rows) == 1) for run in runs]))
    return out


def _run(rows: list[TableRow], key: str, single: bool) -> Run:
    first = rows[0]
    label = "" if single else span_label([r.bucket_bounds for r in rows])
    tuned = key != "baseline_config"
    return Run(label, first.config if tuned else first.baseline_config, dict(first.params) if tuned else {},
               tuple(dict.fromkeys(r.baseline_config for r in rows)),
               tuned and first.config != first.baseline_config, len(rows))


def regime_figures(rows: Sequence[TableRow]) -> dict[str, Any]:
    """The regime-level figures every row of a regime repeats (from its first row)."""
    first = rows[0]
    return {"goodput": first.goodput_rps, "ci": first.goodput_ci_rps, "baseline": first.baseline_goodput_rps,
            "delta_ci": first.delta_ci_rps, "one_config": first.one_config_goodput_rps,
            "capacity": first.capacity_rps, "capacity_ci": first.capacity_ci_rps,
            "baseline_capacity": first.baseline_capacity_rps, "capacity_delta_ci": first.capacity_delta_ci_rps,
            "one_config_capacity": first.one_config_capacity_rps}


def rate(value: float | None, ci: float | None = None) -> str:
    """``749 ± 39`` (req/s, the digits the interval supports: :func:`figure`); —
    when unknown."""
    return "—" if value is None else figure(value, ci)


def ratio(tuned: float | None, base: float | None) -> str:
    """``10.310×`` (:func:`tuner.stats.ratio_text`, as ``tuner table`` prints it); — when
    either side is unknown or the base is not positive."""
    if tuned is None or base is None or not base > 0:
        return "—"
    return ratio_text(tuned, base)


def change_interval(tuned: float | None, base: float | None, ci: float | None) -> str:
    """The paired difference's 95% CI relative to the baseline, ``+833.3% to +1030.0%``:
    how far the ratio's change from 1× can be trusted. A bound below −100% is shown as
    −100%: a relative loss cannot exceed it, so such a bound only says how noisy the seeds
    are (as ``tuner gate`` prints its lower bound). ``+0.0% in every seed`` when the seeds
    agree exactly; "" without an interval (one seed) or a positive baseline."""
    if tuned is None or base is None or ci is None or not base > 0:
        return ""
    if ci == 0:
        return f"{max((tuned - base) / base, -1.0):+.1%} in every seed"
    low, high = ((tuned - base + sign * ci) / base for sign in (-1, 1))
    return " to ".join(f"{max(bound, -1.0):+.1%}" for bound in (low, high))


def difference(tuned: float | None, base: float | None, ci: float | None) -> str:
    """The paired difference tuned − baseline, ``+676 ± 71`` (:func:`figure`); —
    when either side is unknown."""
    if tuned is None or base is None or not (math.isfinite(tuned) and math.isfinite(base)):
        return "—"
    return figure(tuned - base, ci, signed=True)


def declared_rate(row: TableRow) -> str:
    """The regime's declared mean arrival rate (req/s), ``720``; — when unknown."""
    return "—" if row.regime_rate_rps is None else f"{row.regime_rate_rps:.3g}"


def realised_rates(row: TableRow) -> str:
    """The arrival rate each seed's judged window realised (req/s), ``702, 732, 726``;
    — when the row does not say."""
    return ", ".join(f"{r:.3g}" for r in row.realized_rates_rps) if row.realized_rates_rps else "—"


def window_text(row: TableRow) -> str:
    """``3 × 2 s (warm-up 0.5 s)``: the seeds, each window, and its start served but not judged."""
    return f"{row.seeds} × {row.horizon_s:g} s (warm-up {row.warmup_s:g} s)"


def capacity_label(target: float | None) -> str:
    """``capacity at 90% SLO attainment``: the highest arrival rate at which that share
    of requests meets the SLO."""
    return "capacity at the SLO" if target is None else f"capacity at {target:.0%} SLO attainment"


def is_overloaded(row: TableRow) -> bool:
    """Whether the backlog grew through the window in some seed, tuned or baseline."""
    return bool(row.overloaded_seeds or row.baseline_overloaded_seeds)


def overload_counts(row: TableRow) -> str:
    """``tuned 0 of 3, baseline 3 of 3``: in how many seeds each backlog grew."""
    n = len(row.realized_rates_rps or ()) or row.seeds
    return f"tuned {row.overloaded_seeds} of {n}, baseline {row.baseline_overloaded_seeds} of {n}"


def overload_text(row: TableRow) -> str:
    """The overload mark with its counts (what ``tuner tune`` prints:
    :func:`tuner.search.summary.overload_text`), or "" when no seed was overloaded."""
    return overload_note(row.overloaded_seeds, row.baseline_overloaded_seeds,
                         len(row.realized_rates_rps or ()) or row.seeds)


def regime_summary(rows: Sequence[TableRow]) -> list[tuple[str, str]]:
    """One regime's figures from its rows as ``(what, text)`` lines, plain text (the regime
    page shows them as a table, the study note as Markdown): the offered load declared and
    realised per seed, the windows and their warm-up, what the study maximised, goodput
    and capacity at the SLO of the tuned assignment against THE baseline (ratio, paired
    difference) and one config per operator, and the overload mark when a seed was
    overloaded. A capacity the rows do not hold shows as —."""
    first = rows[0]
    f = regime_figures(rows)
    lines = [
        ("offered load (req/s)", f"{declared_rate(first)} declared; realised {realised_rates(first)} per seed "
                                 "(the same requests for every assignment)"),
        ("seeds × window", f"{first.seeds} × {first.horizon_s:g} s; the first {first.warmup_s:g} s of each "
                           "window served but not judged (warm-up)"),
        ("study maximised", first.objective),
    ]
    for what, tuned, ci, base, delta_ci, one in (
            ("goodput (req/s)", f["goodput"], f["ci"], f["baseline"], f["delta_ci"], f["one_config"]),
            (f"{capacity_label(first.attainment_target)} (req/s)", f["capacity"], f["capacity_ci"],
             f["baseline_capacity"], f["capacity_delta_ci"], f["one_config_capacity"])):
        lines.append((what, f"tuned {rate(tuned, ci)}; {PER_BUCKET.label} {rate(base)}: tuned / baseline "
                            f"{ratio(tuned, base)}, tuned − baseline {difference(tuned, base, delta_ci)} "
                            f"(paired by seed); {ONE_CONFIG.label} {rate(one)}"))
    if is_overloaded(first):
        lines.append(("overloaded", overload_text(first)))
    return lines


def bucket_spans(rows: Sequence[TableRow], op: str, buckets: Sequence[int]) -> str:
    """Some buckets of one operator as ranges (``M129..256 M2049..8192``); ``all`` when
    they are all of the operator's buckets in the rows."""
    bounds = {r.bucket: r.bucket_bounds for r in rows if r.op == op}
    chosen = sorted(set(buckets))
    if not chosen or set(chosen) == set(bounds):
        return "all"
    groups: list[list[int]] = []
    for bucket in chosen:
        if groups and groups[-1][-1] + 1 == bucket:
            groups[-1].append(bucket)
        else:
            groups.append([bucket])
    return " ".join(span_label([bounds.get(b) for b in group]) or "all" for group in groups)


def unit_text(effect: Any, rows: Sequence[TableRow]) -> str:
    """An attribution unit (:class:`tuner.attribution.Effect`) as ``op: base → tuned``,
    naming the changed buckets when they are not all of the operator's and the configs do
    not already name them (``o@M129..256: persistent → grid``)."""
    change = f"{effect.base_config} → {effect.candidate_config}"
    spans = bucket_spans(rows, effect.op, effect.buckets)
    if effect.label != effect.op or spans == "all" or ":" in effect.base_config + effect.candidate_config:
        return f"{effect.label}: {change}"
    return f"{effect.op}@{spans}: {change}"
