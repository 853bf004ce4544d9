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
    """Kernel slices per stream and samples of M(t), R(t), queue depth, admitted requests."""

    slices: list[tuple[int, str, float, float]] = field(default_factory=list)
    samples: list[tuple[float, float, float, int, int]] = field(default_factory=list)

    def kernel(self, stream: int, name: str, start: float, end: float) -> None:
        self.slices.append((stream, name, start, end))

    def sample(self, t: float, memory: float, sm: float, queue: int, admitted: int) -> None:
        """Append a sample when any value changed (a step function needs only its edges)."""
        if self.samples and self.samples[-1][1:] == (memory, sm, queue, admitted):
            return
        if self.samples and self.samples[-1][0] == t:
            self.samples[-1] = (t, memory, sm, queue, admitted)
        else:
            self.samples.append((t, memory, sm, queue, admitted))

    def memory_series(self) -> list[tuple[float, float]]:
        return [(t, m) for t, m, _, _, _ in self.samples]


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
    for t, memory, sm, queue, admitted in recording.samples:
        ts = t * 1e6
        events.append({"name": "M(t) reserved memory", "ph": "C", "pid": 1, "ts": ts, "args": {"GiB": memory / 2**30}})
        events.append({"name": "R(t) SM slots in use", "ph": "C", "pid": 1, "ts": ts, "args": {"fraction": sm}})
        events.append({"name": "queue depth", "ph": "C", "pid": 1, "ts": ts, "args": {"requests": queue}})
        events.append({"name": "admitted requests", "ph": "C", "pid": 1, "ts": ts, "args": {"requests": admitted}})
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
