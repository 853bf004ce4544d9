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
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def program(self, variables: Mapping[str, float]) -> list[Launch]:
        """The launches of one batch with these variables (memoised: batches repeat)."""
        key = tuple(variables.values())
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        device = self.service.device
        launches: list[Launch] = []
        for ops, repeat in self.blocks:
            launches.extend([launch for op in ops for launch in op.launches(variables, device)] * repeat)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = launches
        return launches


def bind(service: Service, assignment: Mapping[str, Config], size_fields: frozenset[str]) -> BoundService:
    """Pair each operator with its config and compute the workspace the engine reserves.

    The reservation is the assignment's peak workspace at the largest batch (one
    operator runs at a time per executor), once per executor, as an engine profiles it
    before sizing its request state.

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
    return BoundService(service, tuple(blocks), peak * service.executors)
