"""Paired differences over seeds: mean, Student-t interval, one-sided lower bound."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _t(quantile: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(quantile, dof))


@dataclass(frozen=True)
class Delta:
    """A per-seed difference (candidate side minus base side), paired by seed.

    ``half_width`` is the two-sided ``confidence`` interval's half-width (None for one
    seed); it is exactly 0 when every seed gives the same difference.
    """

    values: tuple[float, ...]
    confidence: float

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values) if self.values else 0.0

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def half_width(self) -> float | None:
        n = len(self.values)
        if n < 2:
            return None
        sd = self.stdev
        return 0.0 if sd == 0.0 else _t(0.5 + self.confidence / 2, n - 1) * sd / math.sqrt(n)

    @property
    def low(self) -> float | None:
        h = self.half_width
        return None if h is None else self.mean - h

    @property
    def high(self) -> float | None:
        h = self.half_width
        return None if h is None else self.mean + h

    def lower_bound(self, confidence: float | None = None) -> float | None:
        """One-sided lower confidence bound of the mean (None for one seed)."""
        n = len(self.values)
        if n < 2:
            return None
        sd = self.stdev
        level = self.confidence if confidence is None else confidence
        return self.mean if sd == 0.0 else self.mean - _t(level, n - 1) * sd / math.sqrt(n)

    @property
    def excludes_zero(self) -> bool:
        low, high = self.low, self.high
        if low is None or high is None:
            return False
        return low > 0.0 or high < 0.0

    def __str__(self) -> str:
        """``+0.846 ± 2.2``: the mean with its sign, and the half-width when there is one."""
        return delta_text(self.mean, self.half_width)

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "confidence": self.confidence,
                "per_seed": list(self.values)}


def delta_text(mean: float, half_width: float | None) -> str:
    """A paired difference as every report writes it: ``+0.846 ± 2.2`` (no ``±`` without
    an interval)."""
    return f"{mean:+.3g}" + ("" if half_width is None else f" ± {half_width:.2g}")


def ratio_text(a: float, b: float) -> str:
    """``a / b`` as ``1.003×``; ``—`` when ``b`` is not positive."""
    return "—" if b <= 0 else f"{a / b:.3f}×"


def paired(after: Sequence[float], before: Sequence[float], confidence: float) -> Delta:
    """``after[i] - before[i]`` for each seed ``i``."""
    if len(after) != len(before):
        raise ValueError("paired samples need the same seeds")
    return Delta(tuple(a - b for a, b in zip(after, before)), confidence)


def paired_delta(after: object, before: object, confidence: float = 0.95) -> Delta:
    """The per-seed difference of two evaluations of one metric (anything with per-seed
    ``values``); empty (mean 0, no interval) when either is infeasible."""
    a, b = getattr(after, "values"), getattr(before, "values")
    if not a or not b:
        return Delta((), confidence)
    return paired(a, b, confidence)
