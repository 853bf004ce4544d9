"""Who chooses the joint assignment while a simulation runs: a regime switch (not to be
confused with the batching policy, :mod:`tuner.sim.batching`, which forms the batches).

:class:`NoSwitch` keeps one assignment; :class:`DispatcherSwitch` drives the same
:class:`tuner.runtime.Dispatcher` a service runs, fed by the simulated load, so "static
config X" and "the load-aware table" compare on the same non-stationary workload.
Contract: the run calls ``observe_arrival(t)`` at each arrival and ``choose(now)`` at
each safe point (a batch boundary); ``choose`` returns a key of the run's assignments.
A switch takes effect for new batches only; batches in flight finish on the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class RegimeSwitch(Protocol):
    """What a run asks of whoever chooses the assignment while it runs: told each arrival,
    asked at each safe point which assignment (by key) should serve."""

    def observe_arrival(self, t: float) -> None: ...

    def choose(self, now: float) -> str: ...


@dataclass
class NoSwitch:
    """Always the same assignment (a static config, or one regime's row of a table)."""

    key: str

    def observe_arrival(self, t: float) -> None:
        pass

    def choose(self, now: float) -> str:
        return self.key


@dataclass
class DispatcherSwitch:
    """The runtime dispatcher's regime, on simulated time.

    The dispatcher is ticked at safe points but at most once per ``interval_s`` (a
    service's control loop runs on a period, not at every kernel launch), so its
    hysteresis spans real time rather than a few microseconds of batches.
    """

    dispatcher: Any
    interval_s: float = 0.25
    _last_tick: float = float("-inf")
    _regime: str | None = None

    def observe_arrival(self, t: float) -> None:
        self.dispatcher.observe_arrival(t)

    def choose(self, now: float) -> str:
        if self._regime is None or now - self._last_tick >= self.interval_s:
            self._regime, self._last_tick = self.dispatcher.tick(now), now
        return self._regime
