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
  config's parameters, on the executor's CUDA stream (an operator on another partition
  on a second stream of that executor); a declared profile as a spin
  kernel of its time on its share of the SMs (:mod:`tuner.replay.spin`); the batch ends
  when its stream has drained. Written against ``torch.cuda``'s calls only, so
  a stand-in that records them runs it on any machine (``tests/test_replay.py``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, ContextManager, Protocol

from ..problem.model import Config, Device
from ..sim.program import BoundService, Cell, Program
from . import spin as spin_kernel

#: How much smaller than the problem's shapes the CPU runs each kernel.
CPU_SHAPE_DIVISOR = 16
#: What a CPU replay allocates per byte of the budget it accounts: a GPU's bytes scaled
#: down (2 GiB of workspace becomes 2 MiB).
CPU_MEMORY_SCALE = 2.0 ** -10
#: The share of the GPU's free memory (after the kernels' inputs) a CUDA replay's budget
#: may take; a budget larger than that is held at a scale below 1, and the scale reported.
CUDA_FREE_SHARE = 0.9


class Backend(Protocol):
    """Where a replay's kernels run (see the module docstring)."""

    described: str
    #: Whether an operator's inputs are made once, at its largest shape, and launched at
    #: each smaller one over them (a GPU: a layer's weights made once, not per batch
    #: size; the kernels address what the shape says, within the larger buffers).
    shares_inputs: bool
    #: Whether a launch pays its host cost for real (a GPU): then a declared profile's
    #: spin is its modeled time alone, not that plus the problem's launch overhead.
    launches_for_real: bool

    def shape(self, shape: dict[str, int]) -> dict[str, int]: ...

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]: ...

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None: ...

    def spin(self, seconds: float, stop: threading.Event, share: float) -> None: ...

    def can_run(self, kernel: Any) -> bool: ...

    def batch(self, executor: int) -> ContextManager[None]: ...

    def lane(self, executor: int, lane: int) -> ContextManager[None]: ...

    def drain(self) -> None: ...

    def memory_scale(self, budget: float) -> float: ...

    def set_origin(self, clock: Callable[[], float]) -> None: ...

    def stamp(self) -> Any: ...

    def stamp_seconds(self, stamp: Any) -> float: ...


class CpuReferences:
    """The families' PyTorch references on the CPU at reduced shapes."""

    described = (f"CPU references at 1/{CPU_SHAPE_DIVISOR} of each dimension, modeled times where a config has no "
                 "kernel or no PyTorch reference")
    shares_inputs = False
    launches_for_real = False

    def shape(self, shape: dict[str, int]) -> dict[str, int]:
        return {key: max(1, value // CPU_SHAPE_DIVISOR) for key, value in shape.items()}

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        return kernel.make_inputs(shape, seed=0, dtype=None, device="cpu")

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None:
        kernel.reference(inputs, shape)

    def spin(self, seconds: float, stop: threading.Event, share: float) -> None:
        stop.wait(seconds)

    def can_run(self, kernel: Any) -> bool:
        """Only a family with a PyTorch reference (a user's kernel is waited out)."""
        return getattr(kernel, "torch_reference", True)

    def batch(self, executor: int) -> ContextManager[None]:
        return nullcontext()

    def lane(self, executor: int, lane: int) -> ContextManager[None]:
        return nullcontext()  # one thread per executor: its lanes run one after another

    def drain(self) -> None:
        pass

    def memory_scale(self, budget: float) -> float:
        return CPU_MEMORY_SCALE

    # a trace's times: the replay's clock around each reference
    def set_origin(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    def stamp(self) -> float:
        return self._clock()

    def stamp_seconds(self, stamp: float) -> float:
        return stamp


class CudaKernels:
    """The families' Triton kernels on CUDA streams (``cuda``: ``torch.cuda`` or a
    stand-in with the same calls): one per executor and lane, at the lane's priority
    (``lane_priorities``: the service's priority plus its lane partition's, as the
    simulator gives them; CUDA's convention, the problem file's too: lower gets SMs
    first; torch maps a value beyond the device's range to its nearest end), then one per
    ``extra`` priority (the neighbours'). A batch's launches go on its executor's first
    lane, an operator placed on another partition on that lane's stream, beside it. What
    has a time and no kernel runs as the spin kernel of :mod:`tuner.replay.spin`
    (``launch_spin(ctas, seconds)``; default: on the GPU, with a sink of one word per SM)."""

    described = ("Triton kernels on CUDA streams (one per executor and lane), spin kernels of the declared time "
                 "and SM share")
    shares_inputs = True
    launches_for_real = True

    def __init__(self, executors: int, cuda: Any = None, lane_priorities: tuple[int, ...] = (0,),
                 extra: tuple[int, ...] = (), launch_spin: Callable[[int, float], None] | None = None) -> None:
        if cuda is None:
            import torch

            cuda = torch.cuda
        self.cuda = cuda
        self.executors = executors
        #: the problem's priorities as the device's (see :func:`device_priorities`)
        self.priority_map = device_priorities((*lane_priorities, *extra), cuda.Stream.priority_range())
        #: stream ``lane * executors + executor``, then the extra ones
        self.streams = [cuda.Stream(priority=self.priority_map[value]) for value in lane_priorities
                        for _ in range(executors)]
        self._lanes = len(lane_priorities)
        self.streams += [cuda.Stream(priority=self.priority_map[value]) for value in extra]
        if len(self.priority_map) > 1:
            self.described = f"{self.described}; stream priorities, problem's -> CUDA's: {self.priority_map}"
        self.sms = int(cuda.get_device_properties(0).multi_processor_count)
        self.launch_spin = launch_spin or self._gpu_spin()

    def _gpu_spin(self) -> Callable[[int, float], None]:
        import torch

        sink = torch.empty(self.sms, dtype=torch.int64, device="cuda")
        return lambda ctas, seconds: spin_kernel.spin(sink, ctas, seconds)

    def shape(self, shape: dict[str, int]) -> dict[str, int]:
        return shape

    def inputs(self, kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        return kernel.make_inputs(shape, seed=0, dtype=None, device="cuda")

    def run(self, kernel: Any, inputs: dict[str, Any], params: dict[str, object], shape: dict[str, int]) -> None:
        kernel.run(inputs, params, shape)

    def spin(self, seconds: float, stop: threading.Event, share: float) -> None:
        self.launch_spin(spin_kernel.ctas_for(share, self.sms), seconds)

    def can_run(self, kernel: Any) -> bool:
        return True

    @contextmanager
    def batch(self, executor: int) -> Iterator[None]:
        """The batch's launches go on the executor's first lane's stream; it ends when
        every lane's have run (an index past the executors' lane streams: an extra stream,
        alone)."""
        lanes = range(self._lanes) if executor < self.executors else (0,)
        with self.cuda.stream(self.streams[executor]):
            yield
        for lane in lanes:
            self.streams[lane * self.executors + executor].synchronize()

    def lane(self, executor: int, lane: int) -> ContextManager[None]:
        return self.cuda.stream(self.streams[lane * self.executors + executor])

    def drain(self) -> None:
        self.cuda.synchronize()

    # a trace's times: CUDA events on the launch's stream, placed on the replay's clock
    # through one origin event (valid once the batch's stream has drained)
    def set_origin(self, clock: Callable[[], float]) -> None:
        self.origin = self.cuda.Event(enable_timing=True)
        self.origin.record()
        self.origin.synchronize()
        self.origin_s = clock()

    def stamp(self) -> Any:
        event = self.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stamp_seconds(self, stamp: Any) -> float:
        return self.origin_s + self.origin.elapsed_time(stamp) / 1e3

    def memory_scale(self, budget: float) -> float:
        """1 where the budget fits in :data:`CUDA_FREE_SHARE` of the free memory, else the
        scale that makes it fit (the accounting stays in the problem's bytes); measured
        after the allocator has returned what it caches and no tensor uses."""
        self.cuda.empty_cache()
        free, _ = self.cuda.mem_get_info()
        return min(1.0, CUDA_FREE_SHARE * free / budget) if budget > 0 else 1.0


def device_priorities(values: tuple[int, ...], device_range: tuple[int, int]) -> dict[int, int]:
    """Each of the problem's stream priorities as one the device has, in the same order.

    CUDA (and torch) clamp a priority outside ``device_range`` (``(least, greatest)``,
    e.g. ``(0, -5)``: lower is more urgent) to its nearest end, so a problem's 0 and 3
    would both run at 0; the problem's order is what the simulator models, so the least
    urgent value becomes the device's least and each more urgent one a step more urgent,
    down to the device's greatest (where the steps run out, the most urgent share it)."""
    least, greatest = device_range
    ordered = sorted(set(values), reverse=True)  # least urgent first
    return {value: max(least - rank, greatest) for rank, value in enumerate(ordered)}


def configs_by_operator(bound: BoundService) -> dict[str, tuple[Config, ...]]:
    """Each operator's config per bucket, as the bound service runs them."""
    return {op.operator.name: op.configs for ops, _ in bound.blocks for op in ops}


def kernel_of(config: Config) -> Any | None:
    """The kernel family object behind a config's profile (a modeled profile's), or None
    for a declared profile, which names a time and no kernel, and for a family that says
    it cannot run on one device (``runnable = False``: a collective)."""
    family = getattr(config.profile, "family", None)
    runs = family is not None and hasattr(family, "reference") and getattr(family, "runnable", True)
    return family if runs else None


def has_kernels(bound: BoundService) -> bool:
    """Whether any config the service may run has a real kernel."""
    return any(kernel_of(config) is not None for configs in configs_by_operator(bound).values() for config in configs)


def share_of(config: Config, name: str, variables: dict[str, float], device: Device) -> float:
    """The SM share ``config`` holds at its widest phase (1: the whole device, where its
    profile cannot say at these variables)."""
    declared = getattr(config.profile, "sm", None)
    if isinstance(declared, (int, float)) and not isinstance(declared, bool):
        return float(declared)
    try:
        launches = config.profile.launches(variables, device, name)
        return max((phase[1] for _, phases in launches for phase in phases), default=1.0)
    except Exception:  # noqa: BLE001 - a profile that needs more than the shape: the whole device
        return 1.0


class KernelRunner:
    """Runs a program's cells on ``backend``; counts the kernels it ran (:attr:`kernels`)."""

    def __init__(self, bound: BoundService, backend: Backend, launch_overhead_s: float,
                 size_fields: frozenset[str] = frozenset()) -> None:
        self.configs = configs_by_operator(bound)
        operators = {op.operator.name: op.operator for ops, _ in bound.blocks for op in ops}
        self.shape_keys = {name: tuple(dim for dim, _ in op.shape) for name, op in operators.items()}
        #: each operator's lane (its stream beside the executor's first), where lanes run
        #: independently (a micro-batched overlap's waits between lanes are not replayed:
        #: its launches stay on the first lane, in program order)
        self.lane_of = {op.operator.name: op.lane for ops, _ in bound.blocks for op in ops}
        largest = bound.service.largest_batch_variables(size_fields)
        #: Per operator, each bucket's representative shape (what :meth:`warm` compiles).
        self.bucket_shapes: dict[str, list[dict[str, int] | None]] = {
            name: [self._shape_of(name, op.bucket_variables(largest, b))
                   if op.bucketing.reachable(op.bucketing.buckets[b]) else None for b in range(op.bucketing.size)]
            for name, op in operators.items()}
        self.largest = {name: self._shape_of(name, op.variables(largest)) for name, op in operators.items()}
        self.backend = backend
        self.device = bound.service.device
        self._shares: dict[tuple, float] = {}
        self.overhead = launch_overhead_s
        self.kernels = 0
        #: seconds the executors spent issuing their batches' launches, and in the batches
        #: in all (issuing and waiting for the device): on a GPU a share near 1 says the
        #: host, not the GPU, set the pace (:attr:`issue_share`)
        self.issue_s = 0.0
        self.batch_s = 0.0
        #: ``on_kernels(executor, [(operator, start, end), ...])`` after each batch, when
        #: tracing (each launch stamped: CUDA events on a GPU)
        self.on_kernels: Callable[[int, list[tuple[str, float, float]]], None] | None = None
        self._inputs: dict[object, tuple[dict[str, int], dict[str, Any]]] = {}
        self._retired: list[dict[str, Any]] = []
        self._inputs_lock = threading.Lock()
        self._lock = threading.Lock()

    def _shape_of(self, name: str, variables: Mapping[str, float]) -> dict[str, int]:
        return {dim: int(math.ceil(variables[dim])) for dim in self.shape_keys[name]}

    def __call__(self, executor: int, program: Program, scale: float, stop: threading.Event) -> None:
        """One batch: every block's cells, ``repeat`` times, in order, on the executor's
        streams (its operators' lanes); stopped early when ``stop`` is set."""
        timed: list[tuple[str, Any, Any]] | None = [] if self.on_kernels is not None else None
        started = time.perf_counter()
        with self.backend.batch(executor):
            for block, repeat in program.cells:
                for _ in range(repeat):
                    for cell in block:
                        if stop.is_set():
                            return
                        lane = self.lane_of[cell[0]] if program.waits is None else 0
                        with self.backend.lane(executor, lane) if lane else nullcontext():
                            if timed is None:
                                self.run_cell(cell, scale, stop)
                                continue
                            began = self.backend.stamp()
                            self.run_cell(cell, scale, stop)
                            timed.append((cell[0], began, self.backend.stamp()))
            issued = time.perf_counter()
        ended = time.perf_counter()
        with self._lock:
            self.issue_s += issued - started
            self.batch_s += ended - started
        if timed and self.on_kernels is not None:
            seconds = self.backend.stamp_seconds
            self.on_kernels(executor, [(name, seconds(t0), seconds(t1)) for name, t0, t1 in timed])

    @property
    def issue_share(self) -> float | None:
        """The share of the batches' time spent issuing launches (None before any batch)."""
        return self.issue_s / self.batch_s if self.batch_s > 0 else None

    def run_cell(self, cell: Cell, scale: float, stop: threading.Event) -> None:
        name, dims, bucket, seconds = cell
        config = self.configs[name][bucket]
        kernel = kernel_of(config)
        if kernel is None or not self.backend.can_run(kernel):
            overhead = 0.0 if self.backend.launches_for_real else self.overhead
            self.backend.spin(seconds * scale + overhead, stop, self.share(name, bucket, dims))
            return
        shape = {key: int(value) for key, value in zip(self.shape_keys[name], dims)}
        self._launch(name, kernel, config, shape)
        with self._lock:
            self.kernels += 1

    def share(self, name: str, bucket: int, dims: tuple[float, ...]) -> float:
        """The SM share a config without a kernel holds at its widest phase: a declared
        profile's ``sm``; a modeled one's (a collective's channels) at this shape."""
        key = (name, bucket, dims)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = share_of(self.configs[name][bucket], name,
                                                  dict(zip(self.shape_keys[name], dims)), self.device)
        return share

    def _launch(self, name: str, kernel: Any, config: Config, shape: dict[str, int]) -> None:
        shape = self.backend.shape(shape)
        self.backend.run(kernel, self._inputs_for(name, kernel, shape), config.param_dict, shape)

    def _inputs_for(self, name: str, kernel: Any, shape: dict[str, int]) -> dict[str, Any]:
        """Inputs for ``shape``: per shape (also for a family whose inputs fix their shape),
        or (``shares_inputs``) one set per operator made at the largest shape it has met
        or may meet, remade only if one grows (the
        set it replaces kept alive, as another executor's stream may still read it).
        Checked and made under one lock, so two executors never make the same set."""
        shared = self.backend.shares_inputs and not getattr(kernel, "inputs_fix_shape", False)
        key: object = name if shared else (name, tuple(shape.items()))
        held = self._inputs.get(key)
        if held is not None and all(held[0].get(dim, 0) >= value for dim, value in shape.items()):
            return held[1]
        with self._inputs_lock:
            held = self._inputs.get(key)
            if held is not None and all(held[0].get(dim, 0) >= value for dim, value in shape.items()):
                return held[1]
            at = shape
            if shared:
                before = held[0] if held is not None else self.backend.shape(self.largest[name])
                at = {dim: max(value, before.get(dim, 0)) for dim, value in shape.items()}
                if held is not None:
                    self._retired.append(held[1])
            made = self._inputs[key] = (at, self.backend.inputs(kernel, at))
        return made[1]

    def warm(self) -> int:
        """Run every config with a kernel once at its bucket's representative shape (in
        the buckets the service can reach), and the spin kernel once, so that compiling
        happens before the window, not in it (a shape in the window that Triton specialises
        otherwise, as a multiple of 16 or 1, still compiles there); returns how many ran."""
        ran = 0
        for name, configs in self.configs.items():
            for bucket, config in enumerate(configs):
                kernel, shape = kernel_of(config), self.bucket_shapes[name][bucket]
                if kernel is not None and self.backend.can_run(kernel) and shape is not None:
                    self._launch(name, kernel, config, shape)
                    ran += 1
        self.backend.spin(1e-6, threading.Event(), 1.0)  # the spin compiled too (short: a 32-bit duration)
        self.backend.drain()
        return ran
