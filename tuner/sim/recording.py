"""Timelines of one simulation, and their export as Chrome Trace Event JSON (Perfetto).

Recording is off by default because it costs memory per kernel; ``tuner simulate
--trace FILE`` turns it on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Recording:
    """Kernel slices per stream; the service's M(t), queue depth and admitted requests at
    each service event; and R(t) at each of the GPU's phase boundaries.

    R(t) is recorded by the GPU itself because it changes inside kernels (after the launch
    overhead, at wave tails, when a neighbour starts): service events alone would miss it.
    All series are step functions: a value holds from its time until the next one.
    """

    slices: list[tuple[int, str, float, float]] = field(default_factory=list)
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)
    sm: list[tuple[float, float]] = field(default_factory=list)

    def kernel(self, stream: int, name: str, start: float, end: float) -> None:
        self.slices.append((stream, name, start, end))

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


def write_chrome_trace(recording: Recording, path: str | Path, stream_names: list[str]) -> None:
    """Write Trace Event JSON: a track per stream with kernel slices, and counter tracks.

    Timestamps are microseconds, as the format requires.
    """
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "GPU (simulated)"}},
    ]
    for tid, name in enumerate(stream_names):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}})
    for stream, name, start, end in recording.slices:
        events.append({
            "name": name, "cat": "kernel", "ph": "X", "pid": 1, "tid": stream,
            "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6,
        })
    for t, memory, queue, admitted in recording.samples:
        ts = t * 1e6
        events.append({"name": "M(t) reserved memory", "ph": "C", "pid": 1, "ts": ts, "args": {"GiB": memory / 2**30}})
        events.append({"name": "queue depth", "ph": "C", "pid": 1, "ts": ts, "args": {"requests": queue}})
        events.append({"name": "admitted requests", "ph": "C", "pid": 1, "ts": ts, "args": {"requests": admitted}})
    for t, sm in recording.sm:
        events.append({"name": "R(t) SM slots in use", "ph": "C", "pid": 1, "ts": t * 1e6, "args": {"fraction": sm}})
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
