"""Replay a request trace through the engine: the scheduler of :mod:`.scheduler`, each
step priced by :mod:`.step_cost`, one step after another as vLLM's engine core loop runs
them (a request that arrives during a step joins at the next ``schedule``).

With ``async_scheduling`` (vLLM's default), the engine schedules step n+1 as soon as step
n is launched, while the GPU runs it (vllm/v1/engine/core.py, ``step_with_batch_queue``):
a request that arrives during step n was not seen by that schedule and runs first in step
n+2. Without it the schedule follows the step's end, and the request runs in step n+1.

A request whose prompt and output exceed ``max_model_len`` is refused on arrival, as
vLLM's API server refuses it; one that cannot get KV blocks while nothing runs (it can
never fit) is refused when that is found.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from .scheduler import EngineArgs, EngineRequest, Scheduler
from .step_cost import FEATURES, StepCoefficients, StepCost


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives (s), its prompt and output lengths, a key
    per full block of its prompt for prefix caching (equal keys: equal tokens), and the
    prompt's id where the trace names one (requests sending the same prompt)."""

    arrival_s: float
    prompt: int
    output: int
    prefix: tuple[Hashable, ...] = ()
    prompt_id: int | None = None


@dataclass(frozen=True)
class Replay:
    """Per-request times (s; NaN where refused) and, with ``record``, every step's start,
    end and terms (``features``: steps x len(FEATURES)) and which step gave each
    request's first and last token (for fitting the coefficients)."""

    arrival_s: np.ndarray
    first_s: np.ndarray
    finish_s: np.ndarray
    output: np.ndarray
    request_overhead_s: float
    steps: int
    preemptions: int
    cached_tokens: int
    refused: int
    step_start: np.ndarray | None = None
    step_end: np.ndarray | None = None
    features: np.ndarray | None = None
    first_step: np.ndarray | None = None
    last_step: np.ndarray | None = None

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_s - self.arrival_s + self.request_overhead_s

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s + self.request_overhead_s

    @property
    def tpot_s(self) -> np.ndarray:
        """(e2e − TTFT) / (output − 1) per request; NaN (left out of the figures, as vLLM's
        benchmark leaves it out) for a one-token output."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output > 1, (self.finish_s - self.first_s) / np.maximum(self.output - 1, 1), np.nan)


def replay(requests: Sequence[TraceRequest], args: EngineArgs, cost: StepCost, coefficients: StepCoefficients,
           record: bool = False) -> Replay:
    """Run ``requests`` (sorted by arrival) through the engine; see the module docstring."""
    n = len(requests)
    engine = [EngineRequest(i, r.arrival_s, r.prompt, r.output, r.prefix) for i, r in enumerate(requests)]
    arrivals = [r.arrival_s for r in requests]
    if any(b < a for a, b in zip(arrivals, arrivals[1:])) or not all(math.isfinite(a) for a in arrivals):
        raise ValueError("requests must be sorted by arrival time, every time finite")
    scheduler = Scheduler(args)
    coef = coefficients.vector()
    starts: list[float] = []
    ends: list[float] = []
    terms: list[tuple[float, ...]] = []
    first_step = [-1] * n
    last_step = [-1] * n
    t = 0.0
    i = steps = 0
    scheduled_at: float | None = None  # when the step now ending was launched (async: the next one was scheduled then)
    while True:
        seen_until = scheduled_at if args.async_scheduling and scheduled_at is not None else t
        while i < n and arrivals[i] <= seen_until:
            scheduler.add(engine[i])
            i += 1
        if not scheduler.running and not scheduler.waiting:
            if i >= n:
                break
            t = max(t, arrivals[i])
            scheduled_at = None  # idle: the next schedule sees what arrived until it runs
            continue
        step = scheduler.schedule()
        if not step.entries:  # a step that only preempted or refused: schedule again
            continue
        features = cost.features(step)
        start = scheduled_at = t
        t += cost.seconds(features, coef)
        end = scheduler.finish_step(step, t)
        for request in end.first:
            first_step[request.rid] = steps
        for request in end.finished:
            last_step[request.rid] = steps
        steps += 1
        if record:
            starts.append(start)
            ends.append(t)
            terms.append(features)
    return Replay(
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        first_s=np.array([r.first_t for r in engine]), finish_s=np.array([r.finish_t for r in engine]),
        output=np.array([r.output for r in engine], dtype=np.float64),
        request_overhead_s=coefficients.request_overhead_s, steps=steps,
        preemptions=scheduler.preemptions, cached_tokens=scheduler.cached_tokens, refused=scheduler.refused,
        step_start=np.asarray(starts) if record else None, step_end=np.asarray(ends) if record else None,
        features=np.asarray(terms, dtype=np.float64).reshape(-1, len(FEATURES)) if record else None,
        first_step=np.asarray(first_step) if record else None, last_step=np.asarray(last_step) if record else None,
    )


def percentiles(values: np.ndarray) -> dict[str, float]:
    """Mean, p50, p90, p99 of the finite values (NaN when none)."""
    values = values[np.isfinite(values)]
    if not len(values):
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}
