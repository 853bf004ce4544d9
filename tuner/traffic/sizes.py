"""Request-size distributions: how many tokens (or items) each request carries.

Sizes are counts, so every distribution returns int64 values >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: The size field that names a request's prompt rather than counting anything: requests
#: with equal ids send the same prompt (an engine's prefix cache finds it); a trace may
#: number its prompts from 0.
PROMPT_ID = "prompt_id"


class SizeDistribution(Protocol):
    """A distribution of per-request sizes.

    Contract:
        * ``mean`` is the distribution's mean, the number a capacity estimate uses.
        * ``sample(rng, n)`` returns ``n`` int64 values >= 1, drawing randomness only
          from ``rng`` and keeping no state.
    """

    @property
    def mean(self) -> float:
        """The mean size."""
        ...

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` int64 sizes, each >= 1."""
        ...


@dataclass(frozen=True)
class Fixed:
    """Every request has the same size.

    Attributes:
        value: The size, an integer >= 1.
    """

    value: int

    def __post_init__(self) -> None:
        _require_count("value", self.value)

    @property
    def mean(self) -> float:
        return float(self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True)
class Uniform:
    """Sizes uniform over the integers ``low..high``, both inclusive.

    Attributes:
        low: Smallest size, an integer >= 1.
        high: Largest size, an integer >= ``low``.
    """

    low: int
    high: int

    def __post_init__(self) -> None:
        _require_count("low", self.low)
        _require_count("high", self.high)
        if self.high < self.low:
            raise ValueError(f"high must be >= low ({self.low!r}) but got {self.high!r}")

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, dtype=np.int64, endpoint=True)


@dataclass(frozen=True)
class LogNormal:
    """Right-skewed sizes, parameterised by their own mean and CV (not the log's).

    Draws are rounded to the nearest integer and raised to 1, which moves the mean by a
    negligible amount once the mean is well above 1.

    Attributes:
        mean: Mean size, >= 1.
        cv: Coefficient of variation (standard deviation / mean), >= 0.
    """

    mean: float
    cv: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and self.mean >= 1.0):
            raise ValueError(f"mean must be a finite number >= 1 but got {self.mean!r}")
        if not (math.isfinite(self.cv) and self.cv >= 0.0):
            raise ValueError(f"cv must be a finite number >= 0 but got {self.cv!r}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sigma2 = math.log1p(self.cv**2)
        draws = rng.lognormal(math.log(self.mean) - sigma2 / 2.0, math.sqrt(sigma2), n)
        return np.maximum(np.rint(draws), 1).astype(np.int64)


@dataclass(frozen=True)
class Exponential:
    """Memoryless sizes: the geometric distribution on 1, 2, ... with the given mean.

    The geometric law is the exponential's discrete counterpart; using it keeps the mean
    exact and every size >= 1 (its CV is ``sqrt(1 - 1 / mean)``, close to 1).

    Attributes:
        mean: Mean size, >= 1.
    """

    mean: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and self.mean >= 1.0):
            raise ValueError(f"mean must be a finite number >= 1 but got {self.mean!r}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.geometric(1.0 / self.mean, n).astype(np.int64)


@dataclass(frozen=True)
class Empirical:
    """Sizes resampled with replacement from observed values (e.g. a trace column).

    Attributes:
        values: The observed sizes, integers >= 1; any sequence is stored as a tuple so
            the distribution stays hashable.
    """

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        if values.ndim != 1 or len(values) == 0:
            raise ValueError(f"values must be a non-empty sequence but got {self.values!r}")
        integral = np.issubdtype(values.dtype, np.integer) or (
            np.issubdtype(values.dtype, np.floating) and np.all(values == np.rint(values))
        )
        if not integral or values.min() < 1:
            raise ValueError(
                f"values must be integers >= 1 but got {_preview(self.values)}"
            )
        object.__setattr__(self, "values", tuple(int(v) for v in values))

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n)


def _require_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 but got {value!r}")


def _preview(values: Sequence[object]) -> str:
    """The first few values, so a message about a 20,000-row column stays one line."""
    shown = ", ".join(repr(v) for v in list(values[:5]))
    return f"[{shown}{', ...' if len(values) > 5 else ''}] ({len(values)} values)"
