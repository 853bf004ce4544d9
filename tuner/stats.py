"""Paired differences over seeds (mean, Student-t interval, one-sided lower bound), and
how many digits a figure gets wherever it is written.

One rule for every value and interval, in the CLI, the README's tables and the
dashboard: the interval sets the precision — its half-width to two significant digits,
the mean to the same decimal place — never more than three significant digits of the
mean, never in exponent notation: ``+414 ± 100``, ``668 ± 180``, ``+722 ± 2.3``,
``+0.04 ± 0.17``. (Python's ``.3g``/``.2g`` pair printed ``+414 ± 1e+02``, and fixed two
decimals ``668.34 ± 183.92``: digits the interval says nothing about.) A figure without an
interval gets three significant digits at most (``72.7``, ``488``, ``1``, ``12345``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _t(quantile: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(quantile, dof))


def ci_half_width(values: Sequence[float], confidence: float = 0.95) -> float | None:
    """Student-t half-width of the mean's two-sided ``confidence`` interval (exactly 0 when
    every value is the same); None for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    sd = statistics.stdev(values)
    return 0.0 if sd == 0.0 else _t(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)


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
        return ci_half_width(self.values, self.confidence)

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
        """``+0.85 ± 2.2``: the mean with its sign, and the half-width when there is one."""
        return delta_text(self.mean, self.half_width)

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "confidence": self.confidence,
                "per_seed": list(self.values)}


#: significant digits of a figure without an interval, and the most a mean ever shows
MEAN_DIGITS = 3
#: significant digits of a half-width
INTERVAL_DIGITS = 2


def _decimals(value: float, digits: int) -> int:
    """Decimal places that show ``digits`` significant digits of ``value`` (0 for
    integers' worth of digits, and for 0 itself)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def _plain(value: float, sign: str) -> str:
    """Three significant digits, trailing zeros dropped as ``g`` drops them (no interval
    vouches for them), never an exponent."""
    text = f"{value:{sign}.{_decimals(value, MEAN_DIGITS)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def figure(value: float, half_width: float | None = None, *, signed: bool = False) -> str:
    """``value`` (± ``half_width`` when given) in fixed notation with the digits the
    interval supports; ``signed`` writes the sign of a difference (``+296 ± 23``)."""
    sign = "+" if signed else ""
    if not math.isfinite(value):
        return f"{value:{sign}}"
    if half_width is None or not math.isfinite(half_width):
        return _plain(value, sign)
    if half_width <= 0:  # every seed agrees
        return f"{_plain(value, sign)} ± 0"
    rounded = float(f"{half_width:.{INTERVAL_DIGITS}g}")
    interval_decimals = _decimals(rounded, INTERVAL_DIGITS)
    mean_decimals = interval_decimals if value == 0 else min(interval_decimals, _decimals(value, MEAN_DIGITS))
    shown = min(interval_decimals, mean_decimals + 1)  # an interval far below the mean's last digit reads 0
    width = f"{rounded:.{shown}f}"
    return f"{value:{sign}.{mean_decimals}f} ± {'0' if float(width) == 0 else width}"


def delta_text(mean: float, half_width: float | None) -> str:
    """A paired difference as every report writes it: ``+0.85 ± 2.2`` (no ``±`` without
    an interval; :func:`figure`'s digits)."""
    return figure(mean, half_width, signed=True)


def percent(share: float) -> str:
    """A relative change with two significant digits and its sign: ``+62%``, ``-1.8%``."""
    value = share * 100
    return f"{value:+.{_decimals(round(value, 12), INTERVAL_DIGITS)}f}%"


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
