"""Chrome Trace Event JSON of one simulation (Perfetto opens it), streamed to its file.

A heavy regime's run makes millions of kernel slices and R(t) edges: building them as
one list of dicts and one string took 2 GB of memory for a 306 MB file. The writer
instead takes a recording's chunks as the simulation produces them and writes each event
as one line (gzipped when the file name ends in ``.gz``); :class:`TraceOptions` keeps a
time window or a sample of the kernel slices, and :func:`estimate_trace` says how big the
file will be before the run.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from ..errors import TunerError
from .recording import Recording
from .service import SimResult, simulate

#: The pilot :func:`estimate_trace` runs, as a share of the horizon.
PILOT_FRACTION = 0.1


@dataclass(frozen=True)
class TraceOptions:
    """What goes into a trace: events inside ``[start_s, end_s)`` of simulated time, and
    every ``kernel_every``-th kernel slice of each stream (1: all, 0: none).

    A counter's value at ``start_s`` is the one that held then (a step function's last
    value before the window), so every track starts right.
    """

    start_s: float = 0.0
    end_s: float = math.inf
    kernel_every: int = 1

    @classmethod
    def parse(cls, window: str | None, kernels: str) -> TraceOptions:
        """From ``--trace-window START:END`` (seconds, either side may be empty) and
        ``--trace-kernels all|none|sample:N``.

        Raises:
            TunerError: either is malformed.
        """
        start, end = 0.0, math.inf
        if window is not None:
            first, sep, last = window.partition(":")
            try:
                start, end = float(first or 0.0), float(last or math.inf)
            except ValueError:
                sep = ""
            if not sep or not (0 <= start < end) or math.isnan(end):
                raise TunerError(f"--trace-window {window!r}: expected START:END in seconds with 0 <= START < END "
                                 "(e.g. 10:20, or 30: for the rest)")
        every = {"all": 1, "none": 0}.get(kernels)
        if every is None:
            count = kernels.removeprefix("sample:")
            if not (kernels.startswith("sample:") and count.isdigit() and int(count) >= 1):
                raise TunerError(f"--trace-kernels {kernels!r}: expected all, none or sample:N "
                                 "(every N-th kernel of each stream, N >= 1)")
            every = int(count)
        return cls(start, end, every)

    def share(self, end_s: float) -> float:
        """The window's share of a run that ends at ``end_s``."""
        if end_s <= 0:
            return 1.0
        return max(min(self.end_s, end_s) - min(self.start_s, end_s), 0.0) / end_s


class TraceWriter:
    """Implements :class:`tuner.sim.recording.Sink`: writes Trace Event JSON, one event
    per line, as the chunks come; call :meth:`close` once after the last.

    A track per stream holds its kernel slices; counter tracks hold M(t), the queue
    depth, the admitted requests and R(t). Timestamps are microseconds, as the format
    requires, to the nanosecond (Perfetto's resolution).
    """

    def __init__(self, out: IO[str], stream_names: Sequence[str], options: TraceOptions = TraceOptions(),
                 process: str = "GPU (simulated)") -> None:
        self.options = options
        self.events = 0
        self.end_s = 0.0  # the latest time seen: where the run ended, once closed
        self._out = out
        self._names: dict[str, str] = {}
        self._seen: defaultdict[int, int] = defaultdict(int)
        self._held: dict[str, tuple] = {}
        out.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        self._separator = ""
        self._write([f'{{"name":"process_name","ph":"M","pid":1,"args":{{"name":{json.dumps(process)}}}}}']
                    + [f'{{"name":"thread_name","ph":"M","pid":1,"tid":{tid},"args":{{"name":{json.dumps(name)}}}}}'
                       for tid, name in enumerate(stream_names)])

    def kernels(self, slices: list[tuple[int, str, float, float]]) -> None:
        """Write a chunk of kernel slices ``(stream, name, start_s, end_s)``, every
        ``kernel_every``-th one of each stream kept (0: none), as the options ask."""
        if slices:
            self.end_s = max(self.end_s, slices[-1][3])
        every = self.options.kernel_every
        if not every:
            return
        start, end, names, seen = self.options.start_s, self.options.end_s, self._names, self._seen
        lines = []
        for stream, name, t0, t1 in slices:
            if t0 >= end or t1 < start:
                continue
            if every > 1:
                count = seen[stream]
                seen[stream] = count + 1
                if count % every:
                    continue
            quoted = names.get(name) or names.setdefault(name, json.dumps(name))
            lines.append(f'{{"name":{quoted},"cat":"kernel","ph":"X","pid":1,"tid":{stream},'
                         f'"ts":{t0 * 1e6:.3f},"dur":{max(t1 - t0, 0.0) * 1e6:.3f}}}')
        self._write(lines)

    def samples(self, samples: list[tuple[float, float, int, int]]) -> None:
        if samples:
            self.end_s = max(self.end_s, samples[-1][0])
        self._write(self._sample_lines(self._windowed("samples", samples)))

    def sm(self, edges: list[tuple[float, float]]) -> None:
        if edges:
            self.end_s = max(self.end_s, edges[-1][0])
        self._write(self._sm_lines(self._windowed("sm", edges)))

    def close(self) -> None:
        """Write the counters whose last change came before the window, and the end."""
        start = self.options.start_s
        if "samples" in self._held:
            self._write(self._sample_lines([(start, *self._held["samples"][1:])]))
        if "sm" in self._held:
            self._write(self._sm_lines([(start, *self._held["sm"][1:])]))
        self._out.write("\n]}\n")

    @staticmethod
    def _sample_lines(samples: list[tuple[float, float, int, int]]) -> list[str]:
        lines = []
        for t, memory, queue, admitted in samples:
            ts = f"{t * 1e6:.3f}"
            gib = f"{memory / 2**30:.6g}"
            lines += [f'{{"name":"M(t) reserved memory","ph":"C","pid":1,"ts":{ts},"args":{{"GiB":{gib}}}}}',
                      f'{{"name":"queue depth","ph":"C","pid":1,"ts":{ts},"args":{{"requests":{queue}}}}}',
                      f'{{"name":"admitted requests","ph":"C","pid":1,"ts":{ts},"args":{{"requests":{admitted}}}}}']
        return lines

    @staticmethod
    def _sm_lines(edges: list[tuple[float, float]]) -> list[str]:
        return [f'{{"name":"R(t) SM slots in use","ph":"C","pid":1,"ts":{t * 1e6:.3f},"args":{{"fraction":{r:.6g}}}}}'
                for t, r in edges]

    def _windowed(self, series: str, points: list) -> list:
        """The points inside the window, the first one preceded by the value that held at
        its start (the last point before it, kept across chunks)."""
        start, end = self.options.start_s, self.options.end_s
        if start == 0.0 and end == math.inf:
            return points
        inside = []
        for point in points:
            if point[0] < start:
                self._held[series] = point
            elif point[0] < end:
                held = self._held.pop(series, None)
                if held is not None and point[0] > start:
                    inside.append((start, *held[1:]))
                inside.append(point)
        return inside

    def _write(self, lines: list[str]) -> None:
        if lines:
            self._out.write(self._separator + ",\n".join(lines))
            self._separator = ",\n"
            self.events += len(lines)


@contextmanager
def trace_file(path: Path) -> Iterator[IO[str]]:
    """The trace's text stream, gzipped when the name ends in ``.gz``. It is written to
    ``PATH.part`` and renamed at the end, so a failed run leaves no half file at PATH
    (and an existing one stays until the new one is whole)."""
    part = path.with_name(path.name + ".part")
    try:
        with _text(part.open("wb"), gzipped=path.name.endswith(".gz")) as out:
            yield out
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def _text(raw: IO[bytes], gzipped: bool) -> io.TextIOWrapper:
    """UTF-8 text over ``raw``, through gzip when asked (level 6: near 9's size, faster)."""
    if gzipped:
        return io.TextIOWrapper(_ClosingGzip(raw), encoding="utf-8")
    return io.TextIOWrapper(raw, encoding="utf-8")


class _ClosingGzip(gzip.GzipFile):
    """A gzip stream that closes the file under it too (GzipFile leaves a given one open)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="wb", compresslevel=6)
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def traced_simulation(problem, assignment, regime: str, seed: int, horizon_s: float | None, out: IO[str],
                      stream_names: Sequence[str], options: TraceOptions = TraceOptions()
                      ) -> tuple[SimResult, TraceWriter]:
    """Simulate with the trace streamed to ``out`` as it is made: the result (its
    recording empty: the series went to ``out``, chunk by chunk) and the closed writer
    (how many events, where the run ended)."""
    writer = TraceWriter(out, stream_names, options)
    recording = Recording(sink=writer)
    result = simulate(problem, assignment, regime, seed=seed, horizon_s=horizon_s, record=recording)
    recording.close()
    writer.close()
    return result, writer


@dataclass(frozen=True)
class TraceEstimate:
    """A trace's expected events and bytes (compressed ones for ``.gz``), and the pilot's
    simulated seconds they were scaled from."""

    events: int
    bytes: int
    pilot_s: float


def estimate_trace(problem, assignment, regime: str, seed: int, horizon_s: float | None,
                   stream_names: Sequence[str], options: TraceOptions = TraceOptions(),
                   gzipped: bool = False) -> TraceEstimate:
    """How big the trace of this run will be, from a pilot run.

    The pilot is the same simulation (same seed, so the same traffic shape and rate) over
    :data:`PILOT_FRACTION` of the horizon, written through the same writer with the same
    kernel option into a byte counter; its events and bytes scale by horizon / pilot
    horizon, then by the window's share of the run. The scaling includes the drain after
    the horizon: under overload the backlog, hence the drain, grows with the horizon as
    the scaling assumes; otherwise the estimate errs high by about the drain's share.
    Measured: llm_decode's heavy regime 363 MB estimated for 245 MB written (its pilot's
    drain is long), seed_example's light regime 0.95 times the size written.
    """
    horizon = problem.regime(regime).window_s(horizon_s)
    pilot = horizon * PILOT_FRACTION
    counter = _ByteCounter()
    with _text(counter, gzipped) as out:
        _, writer = traced_simulation(problem, assignment, regime, seed, pilot, out, stream_names,
                                      replace(options, start_s=0.0, end_s=math.inf))
    scale = horizon / pilot * options.share(writer.end_s * horizon / pilot)
    return TraceEstimate(round(writer.events * scale), round(counter.count * scale), pilot)


class _ByteCounter(io.RawIOBase):
    """A binary sink that only counts what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.count += len(data)
        return len(data)


def write_chrome_trace(recording: Recording, path: str | Path, stream_names: Sequence[str],
                       options: TraceOptions = TraceOptions()) -> int:
    """Write an in-memory recording as a trace file; returns the events written."""
    with trace_file(Path(path)) as out:
        writer = TraceWriter(out, stream_names, options)
        writer.kernels(recording.slices)
        writer.samples(recording.samples)
        writer.sm(recording.sm)
        writer.close()
    return writer.events
