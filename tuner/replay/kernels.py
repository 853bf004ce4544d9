"""What an executor runs for a batch: each operator's real kernel where its config has
one, the modeled time where it has none (a declared profile: the issue's spin kernel).

A batch's :attr:`~tuner.sim.program.Program.cells` say what each operator computes (its
shape and bucket); the bucket's config in the bound service says with what. On the CPU
the kernel is the family's PyTorch reference at a reduced shape (every dimension divided
by :data:`CPU_SHAPE_DIVISOR`, at least 1: a layer's GEMMs at full size take seconds
there), which exercises the path a GPU replay takes (inputs made once per shape, the
config's kernel called per launch) without claiming its time means anything.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..problem.model import Config
from ..sim.program import BoundService, Cell, Program

#: How much smaller than the problem's shapes the CPU runs each kernel.
CPU_SHAPE_DIVISOR = 16


def configs_by_operator(bound: BoundService) -> dict[str, tuple[Config, ...]]:
    """Each operator's config per bucket, as the bound service runs them."""
    return {op.operator.name: op.configs for ops, _ in bound.blocks for op in ops}


def kernel_of(config: Config) -> Any | None:
    """The kernel family object behind a config's profile (a modeled profile's), or None
    for a declared profile, which names a time and no kernel."""
    family = getattr(config.profile, "family", None)
    return family if family is not None and hasattr(family, "reference") else None


class KernelRunner:
    """Runs a program's cells on the CPU; counts the kernels it ran (:attr:`kernels`) and
    the seconds it waited for operators without one."""

    def __init__(self, bound: BoundService, shape_keys: Mapping[str, tuple[str, ...]], launch_overhead_s: float,
                 divisor: int = CPU_SHAPE_DIVISOR) -> None:
        self.configs = configs_by_operator(bound)
        self.shape_keys = shape_keys
        self.overhead = launch_overhead_s
        self.divisor = divisor
        self.kernels = 0
        self._inputs: dict[tuple[str, tuple[float, ...]], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, program: Program, scale: float, stop: threading.Event) -> None:
        """One batch: every block's cells, ``repeat`` times, in order; stopped early when
        ``stop`` is set."""
        for block, repeat in program.cells:
            for _ in range(repeat):
                for cell in block:
                    if stop.is_set():
                        return
                    self.run_cell(cell, scale, stop)

    def run_cell(self, cell: Cell, scale: float, stop: threading.Event) -> None:
        name, dims, bucket, seconds = cell
        config = self.configs[name][bucket]
        kernel = kernel_of(config)
        if kernel is None:
            stop.wait(seconds * scale + self.overhead)
            return
        shape = {key: max(1, int(value) // self.divisor) for key, value in zip(self.shape_keys[name], dims)}
        kernel.reference(self._inputs_for(name, dims, kernel, shape), shape)
        with self._lock:
            self.kernels += 1

    def _inputs_for(self, name: str, dims: tuple[float, ...], kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        key = (name, dims)
        inputs = self._inputs.get(key)
        if inputs is None:
            inputs = self._inputs[key] = kernel.make_inputs(shape, seed=0, device="cpu")
        return inputs


def has_kernels(bound: BoundService) -> bool:
    """Whether any config the service may run has a real kernel."""
    return any(kernel_of(config) is not None for configs in configs_by_operator(bound).values() for config in configs)


def shape_keys(bound: BoundService) -> dict[str, tuple[str, ...]]:
    """Each operator's shape dimensions in the order its cells list their values."""
    return {op.operator.name: tuple(dim for dim, _ in op.operator.shape) for ops, _ in bound.blocks for op in ops}

