"""The load monitor: arrival rate, burstiness, queue depth and free memory, from events.

The rate is the inverse of an exponentially weighted moving average (EWMA) of the
inter-arrival gaps; burstiness is the coefficient of variation (CV) of those gaps,
from the matching EWMA of their variance (1 for Poisson arrivals, above 1 for bursts).
A monitor that hears nothing decays: the gap used for the rate is at least the time
since the last arrival, so an idle service reads as light load.

Thread safety: observations take a lock; :meth:`LoadMonitor.snapshot` returns a frozen
value. Times are seconds on one clock: ``clock()`` unless the caller passes ``t``/``now``.

An observation is never allowed to raise inside a serving engine: a time, depth or byte
count that is not a finite number is ignored, with one warning per kind of observation
(logger ``tuner.runtime``), and the estimates keep what they had.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LoadMonitor", "LoadSnapshot"]

logger = logging.getLogger("tuner.runtime")


@dataclass(frozen=True)
class LoadSnapshot:
    """What the monitor knows at one instant.

    Attributes:
        rate_rps: estimated arrival rate (requests/s); 0 before two arrivals.
        burstiness: CV of the inter-arrival gaps (0 before three arrivals).
        queue_depth: the last reported queue depth (None if never reported).
        free_memory: the last reported free bytes (None if never reported).
        arrivals: arrivals observed so far.
    """

    rate_rps: float
    burstiness: float
    queue_depth: int | None
    free_memory: int | None
    arrivals: int


class LoadMonitor:
    """EWMA estimates of the load a service sees.

    Args:
        alpha: weight of the newest gap in the EWMAs, in (0, 1]; smaller is smoother.
        clock: the time source for observations and snapshots without explicit times.
    """

    def __init__(self, *, alpha: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1] but got {alpha!r}.")
        self._alpha = alpha
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._mean_gap = 0.0
        self._var_gap = 0.0
        self._arrivals = 0
        self._queue: int | None = None
        self._free: int | None = None
        self._warned: set[str] = set()

    def _finite(self, value: object, observation: str) -> float | None:
        """``value`` as a finite float, else None with one warning per ``observation``."""
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        if math.isfinite(number):
            return number
        if observation not in self._warned:
            self._warned.add(observation)
            logger.warning("tuner.runtime: %s(%r) is not a finite number; ignored (and every later one, silently)",
                           observation, value)
        return None

    def observe_arrival(self, t: float | None = None) -> None:
        """One request arrived at ``t`` (default: now). Out-of-order times count as a 0 gap."""
        now = self._clock() if t is None else self._finite(t, "observe_arrival")
        if now is None:
            return
        with self._lock:
            self._arrivals += 1
            last, self._last = self._last, now if self._last is None else max(self._last, now)
            if last is None:
                return
            gap = max(0.0, now - last)
            if self._arrivals == 2:
                self._mean_gap = gap
                return
            delta = gap - self._mean_gap
            self._mean_gap += self._alpha * delta
            self._var_gap = (1.0 - self._alpha) * (self._var_gap + self._alpha * delta * delta)

    def observe_queue(self, depth: int) -> None:
        value = self._finite(depth, "observe_queue")
        if value is not None:
            self._queue = int(value)  # one reference store: atomic, no lock needed

    def observe_free_memory(self, free_bytes: int) -> None:
        value = self._finite(free_bytes, "observe_free_memory")
        if value is not None:
            self._free = int(value)

    def snapshot(self, now: float | None = None) -> LoadSnapshot:
        """The current estimates; ``now`` (default: the clock) sets the idle decay."""
        with self._lock:
            last, mean, var, n = self._last, self._mean_gap, self._var_gap, self._arrivals
        if n < 2:
            return LoadSnapshot(0.0, 0.0, self._queue, self._free, n)
        now = self._clock() if now is None else now
        gap = max(mean, now - last, 1e-12)
        cv = math.sqrt(var) / mean if mean > 0 and n >= 3 else 0.0
        return LoadSnapshot(1.0 / gap, cv, self._queue, self._free, n)
