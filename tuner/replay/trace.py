"""A replay's Perfetto trace (``tuner replay --trace FILE``): what ran when, measured.

Tracks: each executor's batches on the host's clock (when the harness handed a batch
over and saw it end); each executor's kernels, timed on the device (on a GPU, a pair of
CUDA events around each launch on its stream, placed on the replay's clock through one
origin event recorded at the start; on the CPU, the clock around each reference); each
neighbour's launches; and the counters of a simulation's trace (memory held, queue
depth, admitted requests) at each arrival and batch end. Written by the simulator's
:class:`tuner.sim.chrome_trace.TraceWriter`, so the two traces open side by side.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..sim.chrome_trace import TraceWriter, trace_file


class ReplayTrace:
    """Slices and samples gathered while a replay runs (threads append), written once."""

    def __init__(self, executors: int, neighbors: tuple[str, ...], device: str) -> None:
        self.executors, self.neighbors, self.device = executors, neighbors, device
        self.slices: list[tuple[int, str, float, float]] = []
        self.samples: list[tuple[float, float, int, int]] = []
        self._lock = threading.Lock()

    def batch(self, executor: int, start: float, end: float) -> None:
        with self._lock:
            self.slices.append((executor, "batch", start, end))

    def kernels(self, executor: int, timed: list[tuple[str, float, float]]) -> None:
        with self._lock:
            self.slices.extend((self.executors + executor, name, t0, t1) for name, t0, t1 in timed)

    def neighbor(self, index: int, start: float, end: float) -> None:
        with self._lock:
            self.slices.append((2 * self.executors + index, self.neighbors[index], start, end))

    def sample(self, t: float, memory: float, queue: int, admitted: int) -> None:
        self.samples.append((t, memory, queue, admitted))

    def track_names(self) -> list[str]:
        clock = "CUDA events" if self.device == "cuda" else "CPU clock"
        return ([f"executor {e}: batches (host clock)" for e in range(self.executors)]
                + [f"executor {e}: kernels ({clock})" for e in range(self.executors)]
                + [f"neighbour {name}" for name in self.neighbors])

    def write(self, path: Path) -> int:
        """Write the trace to ``path`` (gzipped for ``.gz``); returns the events written."""
        with trace_file(path) as out:
            writer = TraceWriter(out, self.track_names(), process=f"replay on the {self.device} (measured)")
            writer.kernels(sorted(self.slices, key=lambda s: s[2]))
            writer.samples(self.samples)
            writer.close()
        return writer.events
