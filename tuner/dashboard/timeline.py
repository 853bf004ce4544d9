"""Resource timelines of one regime: M(t), R(t) and the queue depth, with their integrals
and peaks, for the tuned assignment beside THE baseline (per-bucket isolated-fastest).

The integrals cover the arrival window ``[0, horizon)`` (as :class:`~tuner.sim.Metrics`
does); the peaks cover the whole run including the drain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..sim.metrics import Metrics

BINS = 1000  # plotted points per trace: time-averaged bins, not a subsample


@dataclass(frozen=True)
class Timeline:
    """One recorded simulation: bin-averaged series for plotting and exact summary figures.

    A kernel-level R(t) switches every few microseconds; picking every n-th sample of it
    would draw noise, so each plotted point is the average over its time bin.
    """

    label: str
    bin_starts: tuple[float, ...]
    memory_bytes: tuple[float, ...]  # bin averages of M(t)
    sm_fraction: tuple[float, ...]  # bin averages of R(t)
    queue: tuple[float, ...]  # bin averages of the queue depth
    metrics: Metrics
    sm_count: int
    queue_mean: float
    queue_peak: int

    @property
    def bin_s(self) -> float:
        return self.bin_starts[1] - self.bin_starts[0] if len(self.bin_starts) > 1 else 0.0

    @property
    def memory_gib_seconds(self) -> float:
        return self.metrics.memory_byte_seconds / 2**30

    @property
    def sm_seconds(self) -> float:
        """SM-seconds busy in the window: the SM fraction's integral times the SM count."""
        return self.metrics.sm_busy_fraction * self.metrics.window_s * self.sm_count

    def coarser(self, bins: int) -> Timeline:
        """The same timeline averaged into ``bins`` bins (for figures stored in a study)."""
        factor = max(1, -(-len(self.bin_starts) // bins))

        def mean(values: tuple[float, ...]) -> tuple[float, ...]:
            return tuple(float(np.mean(values[i:i + factor])) for i in range(0, len(values), factor))

        return dataclasses.replace(self, bin_starts=self.bin_starts[::factor], memory_bytes=mean(self.memory_bytes),
                                   sm_fraction=mean(self.sm_fraction), queue=mean(self.queue))


def step_integrals(times: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Integral from 0 to each of ``at`` of the right-continuous step function that takes
    ``values[i]`` from ``times[i]`` on (0 before the first time)."""
    cumulative = np.concatenate(([0.0], np.cumsum(values[:-1] * np.diff(times))))
    k = np.searchsorted(times, at, side="right") - 1
    inside = k >= 0
    kk = np.where(inside, k, 0)
    return np.where(inside, cumulative[kk] + values[kk] * (at - times[kk]), 0.0)


def bin_averages(times: np.ndarray, values: np.ndarray, end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bin starts, average of the step function over each bin)`` on ``[0, end)``."""
    edges = np.linspace(0.0, end, bins + 1)
    return edges[:-1], np.diff(step_integrals(times, values, edges)) / np.diff(edges)


def record(problem: Problem, assignment: Assignment, regime: str, horizon_s: float,
           label: str, seed: int = 0, bins: int = BINS) -> Timeline:
    """One recorded simulation of ``assignment`` in ``regime``, binned into ``bins`` points
    of M(t), R(t) and queue depth."""
    from ..sim import simulate

    result = simulate(problem, assignment, regime, seed, horizon_s, record=True)
    service = np.asarray(result.recording.samples, dtype=float).reshape(-1, 4)  # t, memory, queue, admitted
    gpu = np.asarray(result.recording.sm, dtype=float).reshape(-1, 2)  # t, R
    times, window = service[:, 0], result.metrics.window_s
    end = max(float(times[-1]), float(gpu[-1, 0]), window)
    starts, memory = bin_averages(times, service[:, 1], end, bins)
    _, queue = bin_averages(times, service[:, 2], end, bins)
    _, sm = bin_averages(gpu[:, 0], gpu[:, 1], end, bins)
    queue_mean = float(step_integrals(times, service[:, 2], np.array([window]))[0] / window) if window else 0.0
    return Timeline(label, tuple(starts.tolist()), tuple(memory.tolist()), tuple(sm.tolist()), tuple(queue.tolist()),
                    result.metrics, problem.service.device.sms, queue_mean, int(service[:, 2].max(initial=0)))


def summary_rows(timelines: Sequence[Timeline]) -> list[tuple[str, list[str]]]:
    """Integrals and peaks side by side: what each assignment costs in memory and SM time."""
    def p99(t: Timeline) -> str:
        return "—" if t.metrics.latency_p99_s is None else f"{t.metrics.latency_p99_s:.3g}"

    return [
        ("goodput (req/s)", [f"{t.metrics.goodput_rps:.3g}" for t in timelines]),
        ("realised arrival rate (req/s)", [f"{t.metrics.arrival_rate_rps:.3g}" for t in timelines]),
        ("backlog growth (requests)", [f"{int(t.metrics.backlog_growth):+d}" + (" (overloaded)" * t.metrics.overloaded)
                                       for t in timelines]),
        ("p99 latency (s)", [p99(t) for t in timelines]),
        ("∫M dt (GiB·s)", [f"{t.memory_gib_seconds:.4g}" for t in timelines]),
        ("peak M (GiB)", [f"{t.metrics.memory_peak_bytes / 2**30:.4g}" for t in timelines]),
        ("∫R dt (SM·s)", [f"{t.sm_seconds:.4g}" for t in timelines]),
        ("peak R (SM fraction)", [f"{t.metrics.sm_peak:.3g}" for t in timelines]),
        ("mean queue (requests)", [f"{t.queue_mean:.3g}" for t in timelines]),
        ("peak queue (requests)", [str(t.queue_peak) for t in timelines]),
        ("admission stall (s)", [f"{t.metrics.admission_stall_s:.3g}" for t in timelines]),
    ]
