"""Goodput versus offered load: where THE baseline (the per-bucket isolated-fastest
assignment, :data:`tuner.search.baselines.PER_BUCKET`) stops being the best.

Each candidate assignment (every distinct tuned row set, and the baseline) is simulated
at the same rates and seeds (common random numbers), using the arrival process and
request sizes of the problem's heaviest regime with its rate replaced. The rates span
every regime's rate bucket, so the plot can shade the load ranges the table is indexed by.
(A *rate* bucket is a regime's offered-load range; not to be confused with the shape
buckets an operator's configs are chosen by.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..problem.assignment import Assignment
from ..problem.model import Problem, Regime
from ..search.baselines import PER_BUCKET
from ..stats import ci_half_width
from ..stats import Delta, paired
from ..sim.metrics import Metrics
from ..store.row import TableRow
from .cells import capacity_label
from .simulations import PageSimulation, remember, serially

BASELINE_LABEL = PER_BUCKET.label  # "per-bucket isolated-fastest": THE baseline, drawn on every page
TIE = 0.01  # curves within 1% of each other at a rate are level there


@dataclass(frozen=True)
class RateBucket:
    """The offered-load range of one regime (low == high for a fixed rate)."""

    regime: str
    low: float
    high: float


@dataclass(frozen=True)
class Curve:
    """Goodput of one assignment at each rate, one value per seed."""

    label: str
    goodputs: tuple[tuple[float, ...], ...]
    is_baseline: bool = False

    @property
    def means(self) -> tuple[float, ...]:
        return tuple(math.fsum(g) / len(g) for g in self.goodputs)

    @property
    def half_widths(self) -> tuple[float | None, ...]:
        return tuple(ci_half_width(g) for g in self.goodputs)


@dataclass(frozen=True)
class Crossover:
    """Between two neighbouring sweep rates, a tuned curve and the baseline change order.

    ``estimate`` interpolates where the difference is zero when the two swap strictly;
    it is None when one pulls ahead from a tie (where exactly is not resolved by the grid).
    """

    label: str
    low: float
    high: float
    tuned_wins_above: bool
    estimate: float | None
    lead: Delta  # tuned minus baseline at ``high``, per seed (paired: the same seeds)
    significant_from: float | None = None  # first rate, before the order changes again, whose CI excludes 0

    @property
    def lead_at_high(self) -> float:
        return self.lead.mean

    @property
    def lead_half_width(self) -> float | None:
        return self.lead.half_width

    def describe(self) -> str:
        verb = "pulls ahead of" if self.tuned_wins_above else "falls behind"
        where = (f"at ≈ {self.estimate:.3g} req/s" if self.estimate is not None
                 else f"between {self.low:.3g} and {self.high:.3g} req/s")
        significant = ("" if self.lead_half_width is None else
                       f"; the difference is significant (95% CI excludes 0) from {self.significant_from:.3g} req/s"
                       if self.significant_from is not None else "; the difference is not significant at any swept rate")
        return (f"{self.label} {verb} the {BASELINE_LABEL} assignment {where} offered "
                f"(at {self.high:.3g} req/s: {self.lead} req/s, paired over seeds{significant})")


@dataclass(frozen=True)
class Sweep:
    problem: str
    arrivals_of: str
    rates: tuple[float, ...]
    horizons_s: tuple[float, ...]
    seeds: int
    curves: tuple[Curve, ...]
    rate_buckets: tuple[RateBucket, ...]
    sources: tuple[str, ...]

    @property
    def baseline(self) -> Curve:
        return next(c for c in self.curves if c.is_baseline)

    def crossovers(self) -> list[Crossover]:
        base = self.baseline
        found = []
        for curve in self.curves:
            if curve.is_baseline:
                continue
            changes = order_changes(self.rates, curve.means, base.means)
            for k, (low, high, wins, estimate) in enumerate(changes):
                first = self.rates.index(high)
                last = self.rates.index(changes[k + 1][0]) if k + 1 < len(changes) else len(self.rates) - 1
                leads = [paired(curve.goodputs[i], base.goodputs[i], 0.95) for i in range(first, last + 1)]
                significant = next((self.rates[first + j] for j, lead in enumerate(leads) if lead.excludes_zero
                                    and (lead.mean > 0) == wins), None)
                found.append(Crossover(curve.label, low, high, wins, estimate, leads[0], significant))
        return found


#: What the sweep's goodputs (and the crossovers' paired significance) cannot say alone.
ABOVE_CAPACITY = ("Above an assignment's capacity its backlog grows through the window: its goodput there depends "
                  "on the window's length (a longer horizon gives less) and is no steady-state figure, so a "
                  "significant difference at such a rate holds for this window only. The table's capacities at the "
                  "SLO compare the assignments independently of the window.")


@dataclass(frozen=True)
class CapacityMark:
    """A capacity at the SLO from the table, drawn on the sweep: ``label`` names the curve
    (``tuned for heavy`` or THE baseline), ``what`` the measure
    (``capacity at 90% SLO attainment``)."""

    label: str
    rate: float
    is_baseline: bool
    what: str

    def describe(self) -> str:
        return f"{self.label} {self.rate:.3g} req/s"


def table_capacities(sweep: Sweep, rows: Sequence[TableRow]) -> list[CapacityMark]:
    """The table's capacities at the SLO of the regime whose arrivals the sweep replays
    (the same traffic shape): its tuned assignment's and THE baseline's; those the rows do
    not carry are left out."""
    first = next((r for r in rows if r.problem == sweep.problem and r.regime == sweep.arrivals_of), None)
    if first is None:
        return []
    what = capacity_label(first.attainment_target)
    marks = []
    if first.capacity_rps is not None:
        marks.append(CapacityMark(f"tuned for {first.regime}", first.capacity_rps, False, what))
    if first.baseline_capacity_rps is not None:
        marks.append(CapacityMark(BASELINE_LABEL, first.baseline_capacity_rps, True, what))
    return marks


def rate_bucket(regime: Regime) -> RateBucket:
    """The rates a regime's seeds may draw (a fixed rate: that rate, low and high alike)."""
    if regime.arrivals.rate_range is not None:
        low, high = regime.arrivals.rate_range
    else:
        low = high = regime.arrivals.nominal_rate
    return RateBucket(regime.name, float(low), float(high))


def sweep_rates(buckets: Sequence[RateBucket], points: int) -> list[float]:
    """``points`` evenly spaced rates from half the lightest bucket to 1.25× the heaviest."""
    low = 0.5 * min(b.low for b in buckets)
    high = 1.25 * max(b.high for b in buckets)
    return [low + (high - low) * i / (points - 1) for i in range(points)]


def order_changes(rates: Sequence[float], a: Sequence[float], b: Sequence[float],
                  tie: float = TIE) -> list[tuple[float, float, bool, float | None]]:
    """Where curve ``a`` and curve ``b`` change order, as ``(low, high, a_wins_above, estimate)``.

    Points within ``tie`` (relative to the larger value) of each other are ties: a curve
    that leaves a tie is a change located between the tie's last rate and the first rate
    with an order; a strict swap also gets the linearly interpolated rate of equality.
    """
    signs = [0 if abs(x - y) <= tie * max(abs(x), abs(y)) else (1 if x > y else -1) for x, y in zip(a, b)]
    changes = []
    order = signs[0] if signs else 0  # the order last seen (0: level so far)
    for i in range(1, len(rates)):
        if signs[i] == 0 or signs[i] == order:
            continue
        if signs[i - 1] == 0:  # leaves a tie: located between the two rates only
            estimate = None
        else:  # signs[i - 1] is the old order, signs[i] the opposite one: d0 and d1 differ in sign
            d0, d1 = a[i - 1] - b[i - 1], a[i] - b[i]
            estimate = rates[i - 1] + (rates[i] - rates[i - 1]) * d0 / (d0 - d1)
        changes.append((rates[i - 1], rates[i], signs[i] > 0, estimate))
        order = signs[i]
    return changes


def point_horizon(regime: Regime, rate: float, min_requests: int, min_horizon_s: float, max_horizon_s: float) -> float:
    """Long enough for ``min_requests`` arrivals within ``[min_horizon_s, max_horizon_s]``,
    never longer than the regime's own horizon."""
    return min(regime.horizon_s, max_horizon_s, max(min_horizon_s, min_requests / rate))


def run_sweep(problem: Problem, storage: str, candidates: Sequence[tuple[str, Assignment, bool]], *, points: int,
              seeds: int, min_requests: int, min_horizon_s: float, max_horizon_s: float,
              evaluate: Callable[[list[PageSimulation]], list[Metrics]] | None = None) -> Sweep:
    """Simulate every candidate at every rate and seed (common random numbers).

    ``storage`` names the database whose compile cache resolves kernel resources when a
    worker process loads the problem again. ``candidates`` are ``(label, assignment,
    is_baseline)``. ``evaluate`` runs a batch of simulations (the dashboard caches them and may
    spread them over processes); by default they run here, one after another.
    """
    remember(problem, storage)
    buckets = [rate_bucket(r) for r in problem.regimes.values()]
    heaviest = max(problem.regimes.values(), key=lambda r: rate_bucket(r).high)
    rates = sweep_rates(buckets, points)
    horizons = [point_horizon(heaviest, rate, min_requests, min_horizon_s, max_horizon_s) for rate in rates]
    grid = [[[PageSimulation.of(problem, storage, heaviest.name, assignment, seed, horizon, rate_rps=rate)
              for seed in range(seeds)]
             for rate, horizon in zip(rates, horizons)] for _, assignment, _ in candidates]
    flat = [p for curve in grid for per_rate in curve for p in per_rate]
    values = {p: m.goodput_rps for p, m in zip(flat, (evaluate or serially)(flat))}
    curves = tuple(Curve(label, tuple(tuple(values[p] for p in per_rate) for per_rate in curve), is_baseline)
                   for (label, _, is_baseline), curve in zip(candidates, grid))
    sources = sorted({str(c.profile.source) for _, a, _ in candidates for _, c in a.cells()})
    return Sweep(problem.name, heaviest.name, tuple(rates), tuple(horizons), seeds, curves,
                 tuple(buckets), tuple(sources))
