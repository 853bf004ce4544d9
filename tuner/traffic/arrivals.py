"""Arrival processes: when requests reach the service.

Each process is a frozen value that turns a random generator and a horizon into arrival
times. Processes with a stationary regime start in it, so any window is a typical slice
of the traffic rather than a warm-up transient.

Every process gives common random numbers across the assignments (configs) of a study:
one generator state, one arrival sequence. :class:`Poisson`, :class:`Gamma` and
:class:`TraceReplay` (either rate basis) are moreover exact time-rescalings of one
sample across rates: ``X(2 * r).sample(rng, T)`` equals ``X(r).sample(rng_copy, 2 * T)
/ 2`` bit for bit, and at one horizon the sample at rate ``2 * r`` is the sample at rate
``r`` compressed in time and continued (for a trace in window basis: the same start in
the trace, the first ``N`` rows at rate ``r`` being the first ``N`` at rate ``2 * r``).
So rates compared on one seed are the same traffic at different loads. :class:`OnOff`
and :class:`Diurnal` are not: their on/off lengths and periods are in seconds, so a
change of rate is not a change of time scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

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
        # Cumulative standard exponential gaps divided by the rate: one generator state is
        # one unit-rate sample, which a higher rate compresses in time. The running sum
        # carries over chunks (each chunk's cumsum starts from the previous total), and a
        # Generator yields the same numbers whether drawn in one call or several (tested),
        # so the rate-dependent chunk size does not break the rescaling.
        pieces, total, end = [], 0.0, 0.0
        chunk = _chunk(self.rate * horizon_s)
        while end < horizon_s:
            units = np.cumsum(np.concatenate(([total], rng.standard_exponential(chunk))))
            total = units[-1]
            pieces.append(units[1:] / self.rate)
            end = pieces[-1][-1]
        times = np.concatenate(pieces)
        return times[times < horizon_s]


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
        # Gaps are standard gamma draws times a scale proportional to 1 / rate, summed in
        # one running sequence across chunks (the previous end leads each chunk's
        # cumsum); with a Generator drawing the same numbers in one call or several, a
        # higher rate is this sample compressed in time (see the module docstring).
        chunk = _chunk(self.rate * horizon_s)
        pieces, start = [], first
        while start < horizon_s:
            ends = np.cumsum(np.concatenate(([start], rng.gamma(shape, scale, chunk))))
            pieces.append(ends[:-1])
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
    """Replays a recorded trace's arrivals at a target rate, keeping its burst structure.

    The trace is treated as cyclic: after its last arrival comes one mean gap and then
    the first arrival again, so a window may run past the end. What ``rate`` refers to
    is set by ``basis``:

    * ``"window"`` (the default): every window realises the rate. A window of
      ``horizon_s`` holds exactly ``N = round(rate * horizon_s)`` arrivals: the next
      ``N`` after its start in the recorded trace, time-scaled so that the span from the
      start to the arrival after them maps onto ``[0, horizon_s)``. The bursts inside
      the window are kept; only the window's pace is set. This is the default because a
      regime is an index of the config table and the runtime classifies load by the rate
      it observes in a window, so a regime's samples should realise its label.
    * ``"trace"``: every gap is multiplied by ``trace.mean_rate / rate``, so the trace's
      long-run rate is ``rate`` but a window of a bursty trace realises anything from
      near 0 to several times that (the Azure code trace, gap CV 13, realised 0.47-0.81
      req/s in 180 s windows at 1.5-2.5 req/s).

    The window starts ``offset_s`` into the trace, wrapped around its cycle: in window
    basis in the recorded trace's seconds (the window's time scale depends on where it
    starts), in trace basis in the rescaled trace's. With no offset each sample draws a
    uniform position on the cycle from ``rng`` (one draw whatever the rate), so
    different seeds see different slices of the trace, which is what a regime's bucket
    is, and one seed sees the same slice at every rate.

    Attributes:
        trace: The recorded trace.
        rate: Target mean arrivals per second, in the sense of ``basis``; None replays
            the trace as recorded (its own times, whatever the basis).
        offset_s: Where the window starts (see above); None draws it per sample.
        basis: ``"window"``: each window realises ``rate``; ``"trace"``: the rescaled
            trace does in the long run.
    """

    trace: Trace
    rate: float | None = None
    offset_s: float | None = None
    basis: Literal["window", "trace"] = "window"

    def __post_init__(self) -> None:
        if self.rate is not None:
            _require_positive("rate", self.rate)
        if self.offset_s is not None and not (
            math.isfinite(self.offset_s) and self.offset_s >= 0.0
        ):
            raise ValueError(
                f"offset_s must be a finite number >= 0 but got {self.offset_s!r}"
            )
        if self.basis not in ("window", "trace"):
            raise ValueError(f"basis must be 'window' or 'trace' but got {self.basis!r}")

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
        if self.basis == "trace" or self.rate is None:  # no target rate: replay as recorded
            return self._rescaled_trace_rows(rng, horizon_s)
        return self._window_rows(rng, horizon_s)

    def _start(self, rng: np.random.Generator, cycle_s: float) -> float:
        """The window's start on a cycle of ``cycle_s``: one uniform draw unless given."""
        if self.offset_s is None:
            return rng.random() * cycle_s
        return self.offset_s % cycle_s

    def _window_rows(
        self, rng: np.random.Generator, horizon_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        times = self.trace.times_s
        cycle_s = len(self.trace) / self.trace.mean_rate  # recorded span plus a mean gap
        start = self._start(rng, cycle_s)
        count = round(self.mean_rate * horizon_s)
        if count == 0:
            return np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64)
        # The next count arrivals at or after the start, and the one after them, which
        # sets the time scale; indices past the end continue on later laps.
        first = int(np.searchsorted(times, start))
        index = np.arange(first, first + count + 1, dtype=np.int64)
        laps, rows = np.divmod(index, len(times))
        elapsed = times[rows] + laps * cycle_s - start
        span = elapsed[-1]
        if span > 0.0:
            window = elapsed[:-1] * (horizon_s / span)
        else:  # count + 1 arrivals on one timestamp
            window = np.zeros(count)
        # An arrival tied with the one after the window, or rounding, could land on the
        # horizon itself; keep it just inside so the window holds exactly count arrivals.
        window = np.minimum(window, np.nextafter(horizon_s, 0.0))
        return window, rows[:-1]

    def _rescaled_trace_rows(
        self, rng: np.random.Generator, horizon_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        scale = self.trace.mean_rate / self.mean_rate
        times = self.trace.times_s * scale
        cycle_s = len(self.trace) / self.mean_rate  # scaled span plus one mean gap
        offset = self._start(rng, cycle_s)
        time_parts, row_parts = [], []
        for lap in range(int((offset + horizon_s) // cycle_s) + 1):
            low = offset - lap * cycle_s
            first, last = np.searchsorted(times, (low, low + horizon_s))
            time_parts.append(times[first:last] - low)
            row_parts.append(np.arange(first, last, dtype=np.int64))
        window = np.concatenate(time_parts)
        inside = window < horizon_s  # guards float rounding at the window's end
        return window[inside], np.concatenate(row_parts)[inside]


def _chunk(expected: float) -> int:
    """How many gaps to draw at a time: the expected count plus 4 standard deviations."""
    return int(expected + 4.0 * math.sqrt(expected)) + 16


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0 but got {value!r}")
