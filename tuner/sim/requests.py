"""A run's requests: their sizes, the state each holds while admitted, their timeline, and
each one's verdict as it is settled, with the early stop that verdicts allow.

A run asked to stop below an attainment target (``stop_below``: a capacity search only
needs to know whether the target holds) counts the judged requests that miss their SLO
as they finish or are rejected; once more have missed than the target allows, the run's
verdict cannot change and :class:`Decided` ends it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..problem.model import Service
from ..traffic import Workload
from .batching import RequestTimes

_INF = math.inf


class Decided(Exception):
    """Raised inside a run asked to stop below an attainment target once it must."""


class Requests:
    """The run's ``n`` requests: ``sizes`` by field, ``state`` (the bytes each holds while
    admitted), ``times`` (each one's timeline, shared with the batching policy), and
    ``judged``, how many have been settled (finished or rejected) so far; ``misses`` and
    ``misses_allowed`` are the early stop's count, over the requests arriving after
    ``warmup``."""

    def __init__(self, service: Service, workload: Workload, stop_below: float | None) -> None:
        self.service = service  # its SLO judges them (every assignment a switch takes runs on it)
        self.n = len(workload)
        self.sizes = {name: np.asarray(values).tolist() for name, values in workload.sizes.items()}
        self.state = request_state(service, workload)
        self.times = RequestTimes(workload)
        self.judged = 0
        self.warmup = workload.warmup_s
        self.misses = 0
        self.misses_allowed = _INF if stop_below is None else (
            (1.0 - stop_below) * int((workload.arrivals_s >= workload.warmup_s).sum()) + 1e-9)

    def finished(self, request: int, now: float) -> None:
        """``request`` completed at ``now``: settled, and under an early stop a judged
        request that missed its SLO counts as a miss."""
        self.times.finish_t[request] = now
        self.judged += 1
        if self.misses_allowed < _INF and self.times.arrival_t[request] >= self.warmup and not self._good(request, now):
            self.missed()

    def rejected(self, now: float) -> None:
        """A request arriving at ``now`` can never be admitted: settled as missed."""
        self.judged += 1
        if now >= self.warmup:
            self.missed()

    def missed(self) -> None:
        self.misses += 1
        if self.misses > self.misses_allowed:
            raise Decided

    def _good(self, request: int, now: float) -> bool:
        service, arrival = self.service, self.times.arrival_t[request]
        if not service.kind.token_level:
            return bool(service.slo.met(now - arrival))
        first = self.times.first_t[request]
        return bool(service.slo.met(now - arrival, first - arrival, tpot(now, first, self.sizes["output"][request])))


def request_state(service: Service, workload: Workload) -> list[float]:
    """The bytes each request holds while admitted (``service.memory.per_request`` at its
    sizes): what admission checks, in a simulation and in a replay alike; 0 for an
    engine policy (vllm), which keeps its KV cache itself and admits on arrival."""
    state = 0.0 if service.kind.engine else service.memory.per_request.evaluate_array(
        {name: np.asarray(v, dtype=np.float64) for name, v in workload.sizes.items()}
    )
    return np.broadcast_to(np.asarray(state, dtype=np.float64), (len(workload),)).tolist()


def tpot(finish: Any, first: Any, output: Any) -> Any:
    """Time per output token after the first (0 for a one-token output)."""
    return np.where(output > 1, (finish - first) / np.maximum(output - 1, 1), 0.0)
