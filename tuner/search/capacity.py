"""Capacity at the SLO: the highest arrival rate at which a share ``attainment`` of the
requests still meets the SLO.

Goodput at one arrival rate is a steady-state figure only below saturation. In overload
the queue grows through the window, so the number depends on how long one watches (a
60 s and a 20 s window gave 4.9× and 1.76× for the same pair of assignments). Serving
papers and tools compare by capacity instead — DistServe's per-GPU goodput at 90%
attainment, Vidur's capacity search under TTFT/TBT bounds — and it is what a person
sizing a fleet needs: how much traffic one GPU takes before the SLO breaks.

The regime's *traffic shape* (its arrival process, sizes, window, warm-up and memory
budget) is kept and its rate becomes the free variable. Per seed, a bracketing search:
from a starting rate, double (or halve) until one rate attains the target and another
does not, then bisect geometrically until the bracket is within ``rel_tol``; the seed's
capacity is the bracket's geometric midpoint. Every probe at rate λ and seed s replays
the same requests for every assignment (common random numbers), so two assignments'
per-seed capacities pair up, and for a Poisson, gamma or trace-replay process a higher
rate is the same sample compressed in time (:mod:`tuner.traffic.arrivals`). The
confidence interval is over seeds.

A probe above the capacity stops as soon as enough judged requests have missed the SLO
that its attainment must end below the target (``simulate(stop_below=...)``): the answer
is the same, without simulating the rest of the window and the drain of its backlog.

The search path is a function of the pass/fail answers only, so if one setting attains
at least as much as another at every rate of a seed (a looser SLO bound, say), its
capacity is at least as high: at the first probe where their answers differ, one bracket
moves above that rate and the other below.

The search never rises above the rate at which a window holds :data:`MAX_PROBE_ARRIVALS`
arrivals (rate × horizon): a service that still meets its SLO there (one GEMM, say) has
a capacity the search can only bound from below, and it says so (``SeedCapacity.limit``)
instead of simulating ever longer windows: a one-GEMM service on an H100 doubled its rate
to 4e5 req/s (4e6 arrivals per 10 s window) for ~21 minutes, then hit the loader's
:data:`~tuner.problem.bounds.MAX_ARRIVALS`. Below that rate the probes, and so every
capacity of the bundled problems, are what they were without the ceiling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..problem.assignment import Assignment
from ..problem.bounds import MAX_ARRIVALS
from ..problem.model import Problem
from ..sim import SimResult, simulate

#: Relative width of the final bracket: the capacity is known to ±1%.
REL_TOL = 0.02
#: Doublings or halvings before the search gives up bracketing (2**24 ≈ 1.7e7 times the start).
MAX_EXPAND = 24
#: Arrivals one probe's window may hold (rate × horizon): the search rises no higher.
#: 1.5× the largest window any bundled problem's search probes (seed_example heavy: the
#: probe bracketing its 792 req/s capacity, 1440 req/s × 60 s = 86k arrivals; a test
#: checks every row of ``results.db.example``). A passing probe costs 20-90 µs per arrival
#: (measured on a 2-core Xeon @ 2.80 GHz, one GEMM, pure-Python core), so rising to the
#: ceiling (about 4e5 arrivals in all) costs seconds to a minute per seed, where windows
#: of up to :data:`~tuner.problem.bounds.MAX_ARRIVALS` (5e6) would take about 21 minutes.
MAX_PROBE_ARRIVALS = min(2**17, MAX_ARRIVALS)
#: A search's simulations per seed, about (for progress estimates): a bracket by doubling,
#: then a bisection to :data:`REL_TOL`.
PROBES_PER_SEED = 10


@dataclass(frozen=True)
class SeedCapacity:
    """One seed's capacity and what the search saw.

    ``capacity_rps`` is 0 when even ``start / 2**MAX_EXPAND`` misses the target, and
    ``bounded`` is False when the target still held at the highest rate the search
    tries (``start · 2**MAX_EXPAND``, or the ceiling it was given): ``capacity_rps`` is
    then only a lower bound and ``limit`` says why the search stopped there.
    ``at_capacity`` is the run at the highest rate that attained the target (None when
    none did): its latency and the cells it used stand for the seed.
    """

    capacity_rps: float
    probes: int
    bounded: bool = True
    at_capacity: SimResult | None = None
    limit: str | None = None


def seed_capacity(run: Callable[[float], SimResult], target: float, start_rps: float,
                  rel_tol: float = REL_TOL, ceiling_rps: float = math.inf,
                  ceiling_reason: str = "") -> SeedCapacity:
    """Bracket then bisect the rate at which ``run(rate)``'s SLO attainment crosses ``target``,
    never probing above ``ceiling_rps`` (the start is lowered to it; the last doubling
    stops at it, so the bound found is the ceiling itself when the target holds there).

    A window with no judged request (a short horizon at a low rate: nothing arrived after
    the warm-up) says nothing against the target, so it counts as attained: the search
    then rises to rates whose windows hold requests, instead of halving to 0.
    """
    if not (math.isfinite(start_rps) and start_rps > 0):
        raise ValueError(f"the starting rate must be a finite number > 0 but got {start_rps!r}")
    if not ceiling_rps > 0:
        raise ValueError(f"the ceiling must be a rate > 0 but got {ceiling_rps!r}")
    probes = 0
    best: SimResult | None = None

    def attains(rate: float) -> bool:
        nonlocal probes, best
        probes += 1
        result = run(rate)
        metrics = result.metrics
        if metrics.judged == 0 or metrics.slo_attainment >= target:
            best = result
            return True
        return False

    low = high = None
    rate = min(start_rps, ceiling_rps)
    for _ in range(MAX_EXPAND + 1):
        if attains(rate):
            low = rate
            if high is not None:
                break
            if rate >= ceiling_rps:
                return SeedCapacity(low, probes, bounded=False, at_capacity=best, limit=ceiling_reason or None)
            rate = min(rate * 2.0, ceiling_rps)
        else:
            high = rate
            if low is not None:
                break
            rate /= 2.0
    if low is None:
        return SeedCapacity(0.0, probes)
    if high is None:
        return SeedCapacity(low, probes, bounded=False, at_capacity=best,
                            limit=f"the SLO still held at {low:.3g} req/s, {MAX_EXPAND} doublings above the "
                                  "regime's rate, where the search starts")
    while high / low > 1.0 + rel_tol:
        middle = math.sqrt(low * high)
        if attains(middle):
            low = middle
        else:
            high = middle
    return SeedCapacity(math.sqrt(low * high), probes, at_capacity=best)


def start_rate(problem: Problem, regime: str) -> float:
    """Where a regime's capacity search starts: the highest declared rate among the regimes
    with the same traffic shape, so regimes that differ only in load search the same path
    and share their capacities, and the search starts near saturation rather than at the
    lightest load (a trace replayed at its own rate declares none: its mean rate stands in)."""
    shape = problem.regime(regime).shape_key
    rates = [other.arrivals.nominal_rate for other in problem.regimes.values() if other.shape_key == shape]
    return float(max(rates))


def capacity_at(problem: Problem, assignment: Assignment, regime: str, seed: int,
                horizon_s: float | None = None, target: float | None = None,
                rel_tol: float = REL_TOL,
                on_run: Callable[[frozenset[tuple[str, int]]], object] | None = None,
                on_probe: Callable[[float, float], object] | None = None) -> SeedCapacity:
    """The capacity of ``assignment`` on ``regime``'s traffic shape for one seed
    (``on_run`` is handed the cells each probe's launches used, ``on_probe`` each probe's
    rate and SLO attainment: a progress line for a search that takes minutes)."""
    goal = problem.service.slo.attainment if target is None else target

    def run(rate: float) -> SimResult:
        result = simulate(problem, assignment, regime, seed=seed, horizon_s=horizon_s, rate_rps=rate,
                          stop_below=goal)
        if on_run is not None:
            on_run(result.visited)
        if on_probe is not None:
            on_probe(rate, result.metrics.slo_attainment)
        return result

    horizon = problem.regime(regime).window_s(horizon_s)
    ceiling, reason = ceiling_rate(horizon)
    return seed_capacity(run, goal, start_rate(problem, regime), rel_tol, ceiling, reason)


def ceiling_rate(horizon_s: float) -> tuple[float, str]:
    """The highest rate a capacity search probes with windows of ``horizon_s``, and why,
    in the terms the user controls (the horizon: ``--horizon`` or the regime's)."""
    ceiling = MAX_PROBE_ARRIVALS / horizon_s
    return ceiling, (f"the SLO still held at {ceiling:.3g} req/s, where a {horizon_s:g} s window holds "
                     f"{MAX_PROBE_ARRIVALS:,} arrivals, the most a capacity probe simulates; "
                     f"a shorter horizon (--horizon) lets the search go higher")
