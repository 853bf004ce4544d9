"""Bind an assignment to a service: what a batch launches, and what memory it reserves.

A *program* is the ordered list of kernel launches one batch (or one continuous-batching
iteration) makes: consecutive operators with the same ``repeat`` form a block that runs
``repeat`` times, as the layers of a transformer do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import AssignmentError
from ..problem.model import Config, Device, Operator, Service

Phases = tuple[tuple[float, float, float], ...]
Launch = tuple[str, Phases]


@dataclass(frozen=True)
class Program:
    """The launches of one batch, the real kernel count, and the largest SM share any of
    its kernels takes (kept exact when launches are merged)."""

    launches: tuple[Launch, ...]
    kernels: int
    peak_sm: float


def merge(blocks: list[tuple[tuple[Launch, ...], int]], overhead_s: float) -> Launch:
    """One launch standing for a whole batch that runs alone on the GPU.

    A stream alone on the GPU runs every kernel at rate 1, so the batch takes the sum of
    its kernels' times and gaps, and the SM-seconds it occupies are Σ s·t; one phase with
    that duration and the time-weighted shares keeps both exact, at a fraction of the
    events. The GPU adds one launch overhead itself, so the other gaps go in the phase.
    ``blocks`` are (launches, repeat) pairs, summed once per block, not per repeat.
    """
    seconds = sm_seconds = dram_seconds = 0.0
    count = 0
    for launches, repeat in blocks:
        for _, phases in launches:
            for t, s, b in phases:
                seconds += t * repeat
                sm_seconds += s * t * repeat
                dram_seconds += b * t * repeat
        count += len(launches) * repeat
    total = seconds + overhead_s * (count - 1)
    if total <= 0.0:
        return ("batch", ((0.0, 0.0, 0.0),))
    return ("batch", ((total, sm_seconds / total, dram_seconds / total),))


_CACHE_LIMIT = 8192


@dataclass(frozen=True)
class BoundOperator:
    operator: Operator
    config: Config

    def launches(self, variables: Mapping[str, float], device: Device) -> tuple[Launch, ...]:
        values = self.operator.variables(variables)
        return self.config.profile.launches(values, device, self.operator.name)

    def workspace(self, variables: Mapping[str, float]) -> float:
        return self.config.profile.workspace_bytes(self.operator.variables(variables))


@dataclass(frozen=True)
class BoundService:
    """A service with one config per operator: the unit the simulator evaluates."""

    service: Service
    blocks: tuple[tuple[tuple[BoundOperator, ...], int], ...]
    reserved_workspace: float
    merged: bool = False
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def program(self, variables: Mapping[str, float]) -> Program:
        """The launches of one batch with these variables (memoised: batches repeat).

        When :attr:`merged`, the batch is one launch (see :func:`merge`).
        """
        key = tuple(variables.values())
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        device = self.service.device
        blocks = [(tuple(launch for op in ops for launch in op.launches(variables, device)), repeat)
                  for ops, repeat in self.blocks]
        kernels = sum(len(launches) * repeat for launches, repeat in blocks)
        peak = max((s for launches, _ in blocks for _, phases in launches for _, s, _ in phases), default=0.0)
        if self.merged and kernels > 1:
            program = Program((merge(blocks, self.service.launch_overhead_s),), kernels, peak)
        else:
            program = Program(tuple(launch for launches, repeat in blocks for launch in launches * repeat),
                              kernels, peak)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = program
        return program


def bind(service: Service, assignment: Mapping[str, Config], size_fields: frozenset[str],
         allow_merge: bool = True) -> BoundService:
    """Pair each operator with its config and compute the workspace the engine reserves.

    The reservation is the assignment's peak workspace at the largest batch (one
    operator runs at a time per executor), once per executor, as an engine profiles it
    before sizing its request state. A service whose one executor has the GPU to itself
    (no neighbours) runs each batch as one merged launch, exactly (see :func:`merge`),
    unless ``allow_merge`` is off (a recorded timeline shows every kernel) or jitter
    would also stretch the merged launch gaps.

    Raises:
        AssignmentError: an operator has no config, or a config of another family.
    """
    bound = []
    for op in service.operators:
        config = assignment.get(op.name)
        if config is None:
            raise AssignmentError(f"operator {op.name!r} has no config in the assignment")
        if config.family != op.family:
            raise AssignmentError(
                f"operator {op.name!r} is family {op.family!r} but config {config.name!r} is of {config.family!r}"
            )
        bound.append(BoundOperator(op, config))
    blocks: list[tuple[tuple[BoundOperator, ...], int]] = []
    for item in bound:
        if blocks and blocks[-1][1] == item.operator.repeat:
            blocks[-1] = (blocks[-1][0] + (item,), item.operator.repeat)
        else:
            blocks.append(((item,), item.operator.repeat))
    largest = service.largest_batch_variables(size_fields)
    peak = max(op.workspace(largest) for op in bound)
    merged = (allow_merge and service.executors == 1 and not service.neighbors
              and service.jitter.kind == "deterministic")
    return BoundService(service, tuple(blocks), peak * service.executors, merged)
