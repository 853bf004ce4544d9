"""Arrival processes: when requests reach the service.

Each process is a frozen value that turns a random generator and a horizon into arrival
times. Processes with a stationary regime start in it, so any window is a typical slice
of the traffic rather than a warm-up transient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tuner.traffic.trace import Trace


class ArrivalProcess(Protocol):
    """A source of request arrival times.

    Contract:
        * ``mean_rate`` is the long-run arrival rate in requests per second; an
          ``ArrivalProcess`` is a value, so it never changes.
        * ``sample(rng, horizon_s)`` returns sorted float64 arrival times in
          ``[0, horizon_s)``. It draws randomness only from ``rng`` and keeps no state, so
          the same generator state gives the same arrivals (common random numbers across
          the configs of a study) and one process may be sampled from many threads.
        * ``horizon_s`` has been validated (> 0) by the caller.
    """

    @property
    def mean_rate(self) -> float:
        """Long-run arrival rate in requests per second."""
        ...

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        """Sorted float64 arrival times in ``[0, horizon_s)``."""
        ...


@dataclass(frozen=True)
class Poisson:
    """Memoryless arrivals at a constant rate (inter-arrival gap CV 1).

    Attributes:
        rate: Arrivals per second.
    """

    rate: float

    def __post_init__(self) -> None:
        _require_positive("rate", self.rate)

    @property
    def mean_rate(self) -> float:
        return self.rate

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        # Given the count, Poisson arrival times are uniform order statistics.
        count = rng.poisson(self.rate * horizon_s)
        return np.sort(rng.random(count) * horizon_s)


@dataclass(frozen=True)
class Gamma:
    """A renewal process with gamma gaps, as in vLLM's benchmark ``--burstiness``.

    Gaps are ``Gamma(shape=burstiness, scale=1 / (rate * burstiness))``: mean
    ``1 / rate``, squared CV ``1 / burstiness``. Burstiness below 1 clusters requests,
    above 1 spaces them evenly; 1 is Poisson.

    Attributes:
        rate: Mean arrivals per second.
        burstiness: The gamma shape parameter.
    """

    rate: float
    burstiness: float

    def __post_init__(self) -> None:
        _require_positive("rate", self.rate)
        _require_positive("burstiness", self.burstiness)

    @property
    def mean_rate(self) -> float:
        return self.rate

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        shape, scale = self.burstiness, 1.0 / (self.rate * self.burstiness)
        # Stationary start: time zero falls in a length-biased gap, Gamma(shape + 1), at a
        # uniform position, so the first arrival is at the residual of that gap.
        first = rng.random() * rng.gamma(shape + 1.0, scale)
        chunk = int(self.rate * horizon_s + 4.0 * math.sqrt(self.rate * horizon_s)) + 16
        pieces, start = [], first
        while start < horizon_s:
            ends = start + np.cumsum(rng.gamma(shape, scale, chunk))
            pieces.append(np.concatenate(([start], ends[:-1])))
            start = ends[-1]
        times = np.concatenate(pieces) if pieces else np.empty(0)
        return times[times < horizon_s]


@dataclass(frozen=True)
class OnOff:
    """Interrupted Poisson bursts: silence alternating with Poisson traffic.

    On and off periods have exponential lengths with means ``on_s`` and ``off_s``.
    During an on period requests arrive at ``rate * (on_s + off_s) / on_s``, so the
    long-run rate is ``rate``; gaps have CV above 1. The start state is drawn from the
    stationary distribution (on with probability ``on_s / (on_s + off_s)``).

    Attributes:
        rate: Long-run mean arrivals per second.
        on_s: Mean length of a burst in seconds.
        off_s: Mean length of a silence in seconds.
    """

    rate: float
    on_s: float
    off_s: float

    def __post_init__(self) -> None:
        _require_positive("rate", self.rate)
        _require_positive("on_s", self.on_s)
        _require_positive("off_s", self.off_s)

    @property
    def mean_rate(self) -> float:
        return self.rate

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        cycle_s = self.on_s + self.off_s
        # Period lengths alternate on, off, on, ...; starting in an off period is an
        # empty first burst. Exponential lengths are memoryless, so the residual first
        # period has the same law as the others.
        starts_on = rng.random() < self.on_s / cycle_s
        first = rng.exponential(self.on_s) if starts_on else 0.0
        chunks, covered = [np.array([first])], first
        pairs = int(horizon_s / cycle_s) + 2
        while covered < horizon_s:
            chunk = np.column_stack(
                (rng.exponential(self.off_s, pairs), rng.exponential(self.on_s, pairs))
            ).ravel()
            chunks.append(chunk)
            covered += chunk.sum()
        lengths = np.concatenate(chunks)
        ends = np.cumsum(lengths)
        on = slice(0, None, 2)
        begin = (ends - lengths)[on]
        duration = np.minimum(ends[on], horizon_s) - begin
        keep = duration > 0
        begin, duration = begin[keep], duration[keep]
        counts = rng.poisson(self.rate * cycle_s / self.on_s * duration)
        times = np.repeat(begin, counts) + rng.random(counts.sum()) * np.repeat(
            duration, counts
        )
        return np.sort(times)


@dataclass(frozen=True)
class Diurnal:
    """A Poisson process whose rate follows a sinusoidal daily (or any periodic) cycle.

    ``lambda(t) = rate * (1 + amplitude * sin(2 * pi * t / period_s + phase))``,
    generated by thinning a Poisson process at the peak rate.

    Attributes:
        rate: Mean arrivals per second over a whole period.
        amplitude: Relative swing of the rate, in ``[0, 1]``.
        period_s: Length of one cycle in seconds.
        phase: Phase of the sinusoid at ``t = 0`` in radians.
    """

    rate: float
    amplitude: float
    period_s: float
    phase: float = 0.0

    def __post_init__(self) -> None:
        _require_positive("rate", self.rate)
        if not 0.0 <= self.amplitude <= 1.0:
            raise ValueError(f"amplitude must be in [0, 1] but got {self.amplitude!r}")
        _require_positive("period_s", self.period_s)
        if not math.isfinite(self.phase):
            raise ValueError(f"phase must be a finite number but got {self.phase!r}")

    @property
    def mean_rate(self) -> float:
        return self.rate

    def rate_at(self, t_s: np.ndarray) -> np.ndarray:
        """The instantaneous arrival rate at times ``t_s``."""
        angle = 2.0 * math.pi * t_s / self.period_s + self.phase
        return self.rate * (1.0 + self.amplitude * np.sin(angle))

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        peak = self.rate * (1.0 + self.amplitude)
        candidates = Poisson(peak).sample(rng, horizon_s)
        accept = rng.random(len(candidates)) * peak < self.rate_at(candidates)
        return candidates[accept]


@dataclass(frozen=True)
class TraceReplay:
    """Replays a recorded trace's arrivals, time-scaled to a target rate.

    Scaling multiplies every gap by ``trace.mean_rate / rate``, which keeps the trace's
    burst structure (and gap CV) at a new load. The trace is treated as cyclic: after its
    last arrival comes one mean gap and then the first arrival again, so a window may
    run past the end. The window starts ``offset_s`` into the scaled trace; with no
    offset each sample draws one from ``rng``, so different seeds see different slices
    of the trace, which is what a regime's bucket is.

    Attributes:
        trace: The recorded trace.
        rate: Target mean arrivals per second; None keeps the trace's own rate.
        offset_s: Where the window starts in the scaled trace (wrapped around its cycle);
            None draws it uniformly per sample.
    """

    trace: Trace
    rate: float | None = None
    offset_s: float | None = None

    def __post_init__(self) -> None:
        if self.rate is not None:
            _require_positive("rate", self.rate)
        if self.offset_s is not None and not (
            math.isfinite(self.offset_s) and self.offset_s >= 0.0
        ):
            raise ValueError(
                f"offset_s must be a finite number >= 0 but got {self.offset_s!r}"
            )

    @property
    def mean_rate(self) -> float:
        return self.trace.mean_rate if self.rate is None else self.rate

    def sample(self, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
        return self.sample_rows(rng, horizon_s)[0]

    def sample_rows(
        self, rng: np.random.Generator, horizon_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Arrival times and the trace rows they replay.

        Returns:
            Sorted float64 times in ``[0, horizon_s)`` and, for each, the int64 index of
            its row in the trace, so request sizes stay paired with their arrivals.
        """
        scale = self.trace.mean_rate / self.mean_rate
        times = self.trace.times_s * scale
        cycle_s = len(self.trace) / self.mean_rate  # scaled span plus one mean gap
        if self.offset_s is None:
            offset = rng.random() * cycle_s
        else:
            offset = self.offset_s % cycle_s
        time_parts, row_parts = [], []
        for lap in range(int((offset + horizon_s) // cycle_s) + 1):
            low = offset - lap * cycle_s
            first, last = np.searchsorted(times, (low, low + horizon_s))
            time_parts.append(times[first:last] - low)
            row_parts.append(np.arange(first, last, dtype=np.int64))
        window = np.concatenate(time_parts)
        inside = window < horizon_s  # guards float rounding at the window's end
        return window[inside], np.concatenate(row_parts)[inside]


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0 but got {value!r}")
