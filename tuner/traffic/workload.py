"""Workloads: the concrete, seeded sample of traffic that one simulation consumes."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

import numpy as np

from tuner.traffic.arrivals import ArrivalProcess, TraceReplay
from tuner.traffic.routing import Routing
from tuner.traffic.sizes import SizeDistribution

JitterKind = Literal["deterministic", "exponential", "lognormal"]


@dataclass(frozen=True, eq=False)
class Workload:
    """The concrete sample a simulation consumes: identical for every config assignment
    at a given seed (common random numbers).

    The arrays are read-only because one workload is shared by every trial of a seed.

    Attributes:
        arrivals_s: Sorted arrival times in ``[0, horizon_s)``.
        sizes: One int64 array per size field (e.g. ``prompt``, ``output``), each as long
            as ``arrivals_s``.
        jitter: Per-request service-time multiplier with mean 1 (all 1.0 when
            service is deterministic).
        horizon_s: Length of the arrival window in seconds.
        warmup_s: The start of the window whose requests are served but not judged
            (the service starts empty, so its first requests meet an idle GPU).
        routing: The MoE routing whose per-iteration expert counts the simulator draws,
            from a generator it seeds with ``routing_seed`` (each simulation afresh, so
            every assignment draws the same stream).
    """

    arrivals_s: np.ndarray
    sizes: Mapping[str, np.ndarray]
    jitter: np.ndarray
    horizon_s: float
    warmup_s: float = 0.0
    routing: Routing | None = None
    routing_seed: np.random.SeedSequence | None = None

    def __len__(self) -> int:
        return len(self.arrivals_s)


@dataclass(frozen=True)
class Jitter:
    """Random variation of service times around the profiled latency.

    Attributes:
        kind: ``deterministic`` (every multiplier 1), ``exponential`` (mean 1, CV 1 by
            definition) or ``lognormal`` (mean 1 and CV ``cv``).
        cv: Coefficient of variation; only ``lognormal`` takes a free value, the other
            kinds accept their own CV (0, or 1 for ``exponential``) or the default 0.
    """

    kind: JitterKind = "deterministic"
    cv: float = 0.0

    def __post_init__(self) -> None:
        kinds = get_args(JitterKind)
        if self.kind not in kinds:
            raise ValueError(f"kind must be one of {kinds} but got {self.kind!r}")
        if not (math.isfinite(self.cv) and self.cv >= 0.0):
            raise ValueError(f"cv must be a finite number >= 0 but got {self.cv!r}")
        allowed = {"deterministic": (0.0,), "exponential": (0.0, 1.0)}.get(self.kind)
        if allowed is not None and self.cv not in allowed:
            raise ValueError(
                f"cv of {self.kind} jitter must be one of {allowed} but got {self.cv!r}"
            )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` float64 service-time multipliers with mean 1."""
        if self.kind == "exponential":
            return rng.exponential(1.0, n)
        if self.kind == "lognormal" and self.cv > 0.0:
            sigma2 = math.log1p(self.cv**2)
            return rng.lognormal(-sigma2 / 2.0, math.sqrt(sigma2), n)
        return np.ones(n)


def make_workload(
    arrivals: ArrivalProcess,
    sizes: Mapping[str, SizeDistribution] | None,
    jitter: Jitter,
    horizon_s: float,
    seed: int,
    warmup_s: float = 0.0,
    routing: Routing | None = None,
) -> Workload:
    """Sample the workload of one seed.

    Arrivals, sizes and jitter draw from independent streams spawned from ``seed``, and
    each size field from its own stream keyed by the field's name, so changing one
    component (say the jitter kind, or the output-size distribution) leaves the others'
    samples unchanged.

    Args:
        arrivals: The arrival process.
        sizes: One distribution per size field, drawn independently per request. None
            takes the sizes of the replayed rows when ``arrivals`` is a
            :class:`TraceReplay` (paired with their arrivals), else no size fields.
        jitter: The service-time variation.
        horizon_s: Length of the arrival window in seconds.
        seed: The seed; equal seeds give identical workloads.
        warmup_s: How much of the window's start is served but not judged.
        routing: The regime's MoE routing, if its service has a router.

    Returns:
        The workload, with read-only arrays.

    Raises:
        ValueError: ``horizon_s`` is not a finite number > 0, or ``warmup_s`` is not in
            ``[0, horizon_s)``.
    """
    if not (math.isfinite(horizon_s) and horizon_s > 0.0):
        raise ValueError(f"horizon_s must be a finite number > 0 but got {horizon_s!r}")
    if not (math.isfinite(warmup_s) and 0.0 <= warmup_s < horizon_s):
        raise ValueError(f"warmup_s must be >= 0 and below the horizon ({horizon_s!r} s) but got {warmup_s!r}")
    # a fourth child for the routing: spawning more leaves the first three as they were
    arrival_seq, size_seq, jitter_seq, routing_seq = np.random.SeedSequence(seed).spawn(4)
    arrival_rng = np.random.default_rng(arrival_seq)
    if isinstance(arrivals, TraceReplay):
        times, rows = arrivals.sample_rows(arrival_rng, horizon_s)
        replayed = {name: column[rows] for name, column in arrivals.trace.columns.items()}
    else:
        times, replayed = arrivals.sample(arrival_rng, horizon_s), {}
    if sizes is None:
        drawn = replayed
    else:
        drawn = {
            name: dist.sample(np.random.default_rng(_field_seed(size_seq, name)), len(times))
            for name, dist in sizes.items()
        }
    multipliers = jitter.sample(np.random.default_rng(jitter_seq), len(times))
    for array in (times, multipliers, *drawn.values()):
        array.flags.writeable = False
    return Workload(times, MappingProxyType(drawn), multipliers, float(horizon_s), float(warmup_s),
                    routing, routing_seq if routing is not None else None)


def _field_seed(parent: np.random.SeedSequence, name: str) -> np.random.SeedSequence:
    """A child of ``parent`` keyed by a field name rather than by its position."""
    return np.random.SeedSequence(
        parent.entropy, spawn_key=(*parent.spawn_key, zlib.crc32(name.encode()))
    )
