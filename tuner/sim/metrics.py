"""What a simulation reports: one frozen value with the keys users script against."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


#: How every output marks a window whose backlog grew (see ``Metrics.overloaded``).
OVERLOADED = "overloaded: goodput depends on the horizon"


def overload_note(tuned: int, baseline: int, seeds: int) -> str:
    """The overload mark with the seeds whose backlog grew under the tuned assignment and
    THE baseline (the one text of ``tuner tune`` and the dashboard), or "" when none did."""
    if not (tuned or baseline):
        return ""
    return (f"{OVERLOADED} (backlog grew through the window in {tuned} of {seeds} seeds tuned, "
            f"{baseline} of {seeds} baseline; compare capacities)")


@dataclass(frozen=True)
class Metrics:
    """Service-level results of one simulation (all times in seconds, memory in bytes).

    One accounting base: the *judged* requests are those arriving in
    ``[warmup_s, window_s)``, each followed to its end through the drain.
    ``goodput_rps`` (judged requests that met the SLO) and ``throughput_rps`` (judged
    requests completed) are both per second of that judged window, so goodput ≤
    throughput; ``slo_attainment`` is goodput's share of the judged arrivals and
    ``arrival_rate_rps`` their realised rate. ``overloaded`` says the backlog grew
    through the judged window (by ``backlog_growth`` requests): then goodput at this rate
    depends on the window's length and is not a steady-state figure.
    ``arrivals``, ``completed`` and ``rejected`` count every request of the window.

    Time integrals (``memory_byte_seconds``, ``sm_busy_fraction``,
    ``idle_while_waiting_s``) cover the measurement window ``[0, window_s)``; peaks cover
    the whole run including the drain. Latency percentiles are over completed requests.
    ``idle_while_waiting_s`` is the scheduling gap: the integral of idle SM capacity
    (1 − R(t), in whole-GPU seconds) over the times at which some request waits.
    ``iterations`` counts the batches (continuous-batching iterations) started in the
    whole run; ``host_bound_iterations`` those whose GPU waited on the host to issue their
    launches (``service.launch``: eager launches, a graph replay's cost) for more than
    half the iteration, the waits summed over the executor's streams.
    """

    goodput_rps: float
    throughput_rps: float
    slo_attainment: float
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    arrivals: int
    completed: int
    rejected: int
    window_s: float
    admitted_max: int
    memory_peak_bytes: float
    memory_byte_seconds: float
    reserved_workspace_bytes: float
    sm_busy_fraction: float
    sm_peak: float
    admission_stall_s: float
    wait_mean_s: float
    idle_while_waiting_s: float
    kernels: int
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    neighbor_progress_ratio: float | None = None
    config_switches: int = 0
    warmup_s: float = 0.0
    judged: int = 0
    arrival_rate_rps: float = 0.0
    backlog_growth: int = 0
    overloaded: bool = False
    iterations: int = 0
    host_bound_iterations: int = 0

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def percentile(values: np.ndarray, q: float) -> float | None:
    """``q``-th percentile, or None when there is nothing to measure."""
    if values.size == 0:
        return None
    result = float(np.percentile(values, q))
    return result if math.isfinite(result) else None
