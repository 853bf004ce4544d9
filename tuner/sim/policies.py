"""Which class runs each batching policy a problem file names (``service.batching``).

The names and what they mean to a problem file live in :mod:`tuner.problem.batching`;
this registry pairs each with the simulator's class, and a test holds the two to the
same names. Every class takes the host, the executor count, the workload, the requests'
sizes and the size fields the programs read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .batching import BatchingPolicy, ContinuousBatching, DynamicBatching, PolicyHost
from .vllm_batching import VllmBatching

if TYPE_CHECKING:
    from ..traffic import Workload

Factory = Callable[[PolicyHost, int, "Workload", Mapping[str, list[Any]], frozenset[str]], BatchingPolicy]

POLICIES: dict[str, Factory] = {
    "dynamic": DynamicBatching,
    "continuous": lambda host, executors, workload, sizes, _fields: ContinuousBatching(host, executors, workload,
                                                                                      sizes),
    "vllm": VllmBatching,
}


def batching_policy(name: str, host: PolicyHost, executors: int, workload: Workload, sizes: Mapping[str, list[Any]],
                    size_fields: frozenset[str]) -> BatchingPolicy:
    """The policy ``name`` hosted by ``host`` (names are checked when the problem loads)."""
    return POLICIES[name](host, executors, workload, sizes, size_fields)
