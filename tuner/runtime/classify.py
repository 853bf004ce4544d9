"""Regime classification with hysteresis: which table regime a measured load calls for.

A :class:`RateClassifier` places regimes on the rate axis by their mean arrival rates and
puts a boundary at the geometric mean of each adjacent pair. To move up across a
boundary the rate must exceed it by ``margin`` (relative); to move down it must fall
below it by ``margin``. Within that band the current regime stays, so a rate that
hovers at a boundary does not flap. The dispatcher adds a second guard: a new regime
must be called for at ``confirm`` consecutive ticks.

Custom classifiers (burstiness, queue depth, free memory) are any callable
``(snapshot, current_regime) -> regime_name``; they get the same confirmation guard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise

from .monitor import LoadSnapshot

__all__ = ["RateClassifier"]


class RateClassifier:
    """Classify by arrival rate against each regime's mean rate.

    Args:
        rates: ``regime -> mean arrival rate`` (req/s, > 0); at least one regime.
        margin: relative half-width of the no-change band around each boundary, in [0, 1).
        min_arrivals: below this many observed arrivals the current regime stays.
    """

    def __init__(self, rates: Mapping[str, float], *, margin: float = 0.15, min_arrivals: int = 8) -> None:
        if not rates:
            raise ValueError("rates must name at least one regime.")
        bad = {k: v for k, v in rates.items() if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v))}
        if bad:
            raise ValueError(f"regime rates must be finite numbers > 0 but got {bad!r}.")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1) but got {margin!r}.")
        ordered = sorted(rates.items(), key=lambda kv: kv[1])
        self.regimes = tuple(name for name, _ in ordered)
        self.boundaries = tuple(math.sqrt(a[1] * b[1]) for a, b in pairwise(ordered))
        self._index = {name: i for i, name in enumerate(self.regimes)}
        self._margin = margin
        self._min_arrivals = min_arrivals

    def __call__(self, load: LoadSnapshot, current: str) -> str:
        if load.arrivals < self._min_arrivals:
            return current
        rate = load.rate_rps
        up = sum(rate > b * (1.0 + self._margin) for b in self.boundaries)
        down = sum(rate > b * (1.0 - self._margin) for b in self.boundaries)
        at = self._index.get(current)
        if at is None:  # not a regime we can place: go where the rate says
            return self.regimes[(up + down) // 2]
        if at < up:
            return self.regimes[up]
        if at > down:
            return self.regimes[down]
        return current
