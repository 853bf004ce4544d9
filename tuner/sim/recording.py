"""Timelines of one simulation: kept in memory, or handed on in chunks as they grow.

Recording is off by default because it costs memory per kernel; ``tuner simulate
--trace FILE`` turns it on with a sink (:class:`tuner.sim.chrome_trace.TraceWriter`) that
writes each chunk out, so a long run's trace never sits in memory whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

#: Kernel slices buffered before a recording with a sink hands its series on (the GPU's
#: R(t) edges grow about twice as fast: a chunk is a few MB).
CHUNK = 65_536


class Sink(Protocol):
    """Where a recording's series go, chunk by chunk, each in time order; a sink uses
    each list at once (the recording empties and refills it)."""

    def kernels(self, slices: list[tuple[int, str, float, float]]) -> None: ...

    def samples(self, samples: list[tuple[float, float, int, int]]) -> None: ...

    def sm(self, edges: list[tuple[float, float]]) -> None: ...


@dataclass
class Recording:
    """Kernel slices per stream; the service's M(t), queue depth and admitted requests at
    each service event; and R(t) at each of the GPU's phase boundaries.

    R(t) is recorded by the GPU itself because it changes inside kernels (after the launch
    overhead, at wave tails, when a neighbour starts): service events alone would miss it.
    All series are step functions: a value holds from its time until the next one. With a
    ``sink``, the series hold only what was not handed on yet; call :meth:`close` after
    the run.
    """

    slices: list[tuple[int, str, float, float]] = field(default_factory=list)
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)
    sm: list[tuple[float, float]] = field(default_factory=list)
    sink: Sink | None = None

    def kernel(self, stream: int, name: str, start: float, end: float) -> None:
        self.slices.append((stream, name, start, end))
        if self.sink is not None and len(self.slices) >= CHUNK:
            self._hand_on(keep=1)

    def sample(self, t: float, memory: float, queue: int, admitted: int) -> None:
        """Append a sample when any value changed (a step function needs only its edges)."""
        if self.samples and self.samples[-1][1:] == (memory, queue, admitted):
            return
        if self.samples and self.samples[-1][0] == t:
            self.samples[-1] = (t, memory, queue, admitted)
        else:
            self.samples.append((t, memory, queue, admitted))

    def memory_series(self) -> list[tuple[float, float]]:
        return [(t, m) for t, m, _, _ in self.samples]

    def close(self) -> None:
        """Hand everything left to the sink (nothing to do without one)."""
        if self.sink is not None:
            self._hand_on(keep=0)

    def _hand_on(self, keep: int) -> None:
        """Give the sink the buffered series, but for the last ``keep`` sample and R(t)
        edge: the next ones are compared with them. The lists are emptied in place, as
        the GPU appends to ``sm`` through its own reference."""
        assert self.sink is not None
        self.sink.kernels(self.slices)
        self.slices.clear()
        for series, give in ((self.samples, self.sink.samples), (self.sm, self.sink.sm)):
            cut = len(series) - keep
            if cut > 0:
                give(series[:cut])
                del series[:cut]
