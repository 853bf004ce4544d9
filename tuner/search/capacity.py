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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..sim import SimResult, simulate

#: Relative width of the final bracket: the capacity is known to ±1%.
REL_TOL = 0.02
#: Doublings or halvings before the search gives up bracketing (2**24 ≈ 1.7e7 times the start).
MAX_EXPAND = 24


@dataclass(frozen=True)
class SeedCapacity:
    """One seed's capacity and what the search saw.

    ``capacity_rps`` is 0 when even ``start / 2**MAX_EXPAND`` misses the target, and
    ``bounded`` is False when the target still held at ``start · 2**MAX_EXPAND``.
    ``at_capacity`` is the run at the highest rate that attained the target (None when
    none did): its latency and the cells it used stand for the seed.
    """

    capacity_rps: float
    probes: int
    bounded: bool = True
    at_capacity: SimResult | None = None


def seed_capacity(run: Callable[[float], SimResult], target: float, start_rps: float,
                  rel_tol: float = REL_TOL) -> SeedCapacity:
    """Bracket then bisect the rate at which ``run(rate)``'s SLO attainment crosses ``target``."""
    if not (math.isfinite(start_rps) and start_rps > 0):
        raise ValueError(f"the starting rate must be a finite number > 0 but got {start_rps!r}")
    probes = 0
    best: SimResult | None = None

    def attains(rate: float) -> bool:
        nonlocal probes, best
        probes += 1
        result = run(rate)
        if result.metrics.slo_attainment >= target:
            best = result
            return True
        return False

    low = high = None
    rate = start_rps
    for _ in range(MAX_EXPAND + 1):
        if attains(rate):
            low = rate
            if high is not None:
                break
            rate *= 2.0
        else:
            high = rate
            if low is not None:
                break
            rate /= 2.0
    if low is None:
        return SeedCapacity(0.0, probes)
    if high is None:
        return SeedCapacity(low, probes, bounded=False, at_capacity=best)
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
    shape = problem.regimes[regime].shape_key
    rates = [other.arrivals.declared_rate or other.arrivals.build(None).mean_rate  # type: ignore[operator]
             for other in problem.regimes.values() if other.shape_key == shape]
    return float(max(rates))


def capacity_at(problem: Problem, assignment: Assignment, regime: str, seed: int,
                horizon_s: float | None = None, target: float | None = None,
                rel_tol: float = REL_TOL,
                on_run: Callable[[frozenset[tuple[str, int]]], object] | None = None) -> SeedCapacity:
    """The capacity of ``assignment`` on ``regime``'s traffic shape for one seed
    (``on_run`` is handed the cells each probe's launches used)."""
    goal = problem.service.slo.attainment if target is None else target

    def run(rate: float) -> SimResult:
        result = simulate(problem, assignment, regime, seed=seed, horizon_s=horizon_s, rate_rps=rate,
                          stop_below=goal)
        if on_run is not None:
            on_run(result.visited)
        return result

    return seed_capacity(run, goal, start_rate(problem, regime), rel_tol)
