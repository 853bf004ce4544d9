"""What an executor runs for a batch: each operator's real kernel where its config has
one, its modeled time where it has none (a declared profile: the issue's spin kernel),
on a backend that is the device.

A batch's :attr:`~tuner.sim.program.Program.cells` say what each operator computes (its
shape and bucket); the bucket's config in the bound service says with what. Two
backends:

- :class:`CpuReferences`: the family's PyTorch reference at a reduced shape (every
  dimension divided by :data:`CPU_SHAPE_DIVISOR`, at least 1: a layer's GEMMs at full
  size take seconds on a CPU); a declared profile's time waited out. It exercises the
  path without claiming its times mean anything for a GPU.
- :class:`CudaKernels`: the family's Triton kernel (``run``) at the full shape with the
  config's parameters, on the executor's own CUDA stream; a declared profile as a spin
  kernel of its time (``torch.cuda._sleep``, its cycles per second measured once); the
  batch ends when its stream has drained. Written against ``torch.cuda``'s calls only, so
  a stand-in that records them runs it on any machine (``tests/test_replay.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, ContextManager, Protocol

from ..problem.model import Config
from ..sim.program import BoundService, Cell, Program

#: How much smaller than the problem's shapes the CPU runs each kernel.
CPU_SHAPE_DIVISOR = 16
#: Cycles of the spin kernel timed once to learn the GPU's cycles per second.
SPIN_CALIBRATION_CYCLES = 10_000_000


class Backend(Protocol):
    """Where a replay's kernels run (see the module docstring)."""

    described: str

    def shape(self, shape: dict[str, int]) -> dict[str, int]: ...

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]: ...

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None: ...

    def spin(self, seconds: float, stop: threading.Event) -> None: ...

    def batch(self, executor: int) -> ContextManager[None]: ...


class CpuReferences:
    """The families' PyTorch references on the CPU at reduced shapes."""

    described = f"CPU references at 1/{CPU_SHAPE_DIVISOR} of each dimension, modeled times where no kernel"

    def shape(self, shape: dict[str, int]) -> dict[str, int]:
        return {key: max(1, value // CPU_SHAPE_DIVISOR) for key, value in shape.items()}

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        return kernel.make_inputs(shape, seed=0, device="cpu")

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None:
        kernel.reference(inputs, shape)

    def spin(self, seconds: float, stop: threading.Event) -> None:
        stop.wait(seconds)

    def batch(self, executor: int) -> ContextManager[None]:
        return nullcontext()


class CudaKernels:
    """The families' Triton kernels on one CUDA stream per executor (``cuda``:
    ``torch.cuda`` or a stand-in with the same calls), each stream at the service's
    ``priority`` (CUDA's convention, the problem file's too: lower gets SMs first; torch
    maps a value beyond the device's range to its nearest end)."""

    described = "Triton kernels on one CUDA stream per executor, spin kernels of the declared time"

    def __init__(self, executors: int, cuda: Any = None, priority: int = 0) -> None:
        if cuda is None:
            import torch

            cuda = torch.cuda
        self.cuda = cuda
        self.streams = [cuda.Stream(priority=priority) for _ in range(executors)]
        self.cycles_per_s = self._spin_rate()

    def _spin_rate(self) -> float:
        start, end = self.cuda.Event(enable_timing=True), self.cuda.Event(enable_timing=True)
        start.record()
        self.cuda._sleep(SPIN_CALIBRATION_CYCLES)
        end.record()
        end.synchronize()
        return SPIN_CALIBRATION_CYCLES / (start.elapsed_time(end) / 1e3)

    def shape(self, shape: dict[str, int]) -> dict[str, int]:
        return shape

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        return kernel.make_inputs(shape, seed=0, device="cuda")

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None:
        kernel.run(inputs, params, shape)

    def spin(self, seconds: float, stop: threading.Event) -> None:
        self.cuda._sleep(int(seconds * self.cycles_per_s))

    @contextmanager
    def batch(self, executor: int) -> Iterator[None]:
        """The batch's launches go on the executor's stream; it ends when they have run."""
        stream = self.streams[executor]
        with self.cuda.stream(stream):
            yield
        stream.synchronize()


def configs_by_operator(bound: BoundService) -> dict[str, tuple[Config, ...]]:
    """Each operator's config per bucket, as the bound service runs them."""
    return {op.operator.name: op.configs for ops, _ in bound.blocks for op in ops}


def kernel_of(config: Config) -> Any | None:
    """The kernel family object behind a config's profile (a modeled profile's), or None
    for a declared profile, which names a time and no kernel."""
    family = getattr(config.profile, "family", None)
    return family if family is not None and hasattr(family, "reference") else None


def has_kernels(bound: BoundService) -> bool:
    """Whether any config the service may run has a real kernel."""
    return any(kernel_of(config) is not None for configs in configs_by_operator(bound).values() for config in configs)


class KernelRunner:
    """Runs a program's cells on ``backend``; counts the kernels it ran (:attr:`kernels`)."""

    def __init__(self, bound: BoundService, backend: Backend, launch_overhead_s: float) -> None:
        self.configs = configs_by_operator(bound)
        self.shape_keys = {op.operator.name: tuple(dim for dim, _ in op.operator.shape)
                           for ops, _ in bound.blocks for op in ops}
        self.backend = backend
        self.overhead = launch_overhead_s
        self.kernels = 0
        self._inputs: dict[tuple[str, tuple[float, ...]], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, executor: int, program: Program, scale: float, stop: threading.Event) -> None:
        """One batch: every block's cells, ``repeat`` times, in order, on the executor's
        stream; stopped early when ``stop`` is set."""
        with self.backend.batch(executor):
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
            self.backend.spin(seconds * scale + self.overhead, stop)
            return
        shape = self.backend.shape({key: int(value) for key, value in zip(self.shape_keys[name], dims)})
        key = (name, dims)
        inputs = self._inputs.get(key)
        if inputs is None:
            inputs = self._inputs[key] = self.backend.inputs(kernel, shape)
        self.backend.run(kernel, inputs, config.param_dict, shape)
        with self._lock:
            self.kernels += 1
