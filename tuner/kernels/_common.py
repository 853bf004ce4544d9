"""Plumbing the families share: launch steps that keep ``plan`` and ``run`` in agreement,
dtype names, shape and config checks, and the kernels' error.

Kernels are plain ``@triton.jit`` functions. ``triton.jit`` decides at decoration time (at
import) between a compilable ``JITFunction`` and, under ``TRITON_INTERPRET=1``, an
interpreted function — and so does Triton's own library (``tl.cdiv``, ``tl.sum``, …). A
process therefore either compiles launches for a GPU target or interprets them on the
CPU, never both: compile where ``TRITON_INTERPRET`` is unset.
"""

from __future__ import annotations

import functools

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import KernelError
from .family import LAUNCH_COSTS, KernelLaunch

#: Signature names of the element types the families accept, and their sizes in bytes.
DTYPES: dict[str, int] = {"bf16": 2, "fp16": 2}
INT32_MAX = 2**31 - 1


def dtype_name(dtype: Any) -> str:
    """``"bf16"`` or ``"fp16"`` from a torch dtype or either name.

    Raises:
        KernelError: any other dtype.
    """
    if isinstance(dtype, str):
        name = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(dtype, dtype)
    else:
        name = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(str(dtype), str(dtype))
    if name not in DTYPES:
        raise KernelError(f"dtype must be bf16 or fp16 but got {dtype!r}.")
    return name


def torch_dtype(name: str) -> Any:
    """The torch dtype of a dtype name (``bf16``, ``fp16``, ``fp32``)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def cdiv(a: int, b: int) -> int:
    """``a / b`` rounded up (Triton's ``cdiv``): the tiles that cover ``a``."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n`` <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def check_choice(name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    """Constructor validation, quoting the bad value."""
    if value not in allowed:
        raise KernelError(f"{name} must be one of {', '.join(map(repr, allowed))} but got {value!r}.")


def shape_problem(shape: Mapping[str, int], keys: tuple[str, ...]) -> str | None:
    """Why ``shape`` is not a shape of these keys (a missing or non-positive size), or None."""
    for key in keys:
        if key not in shape:
            return f"the shape has no {key} (a shape needs {', '.join(keys)})"
        value = shape[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{key} must be a positive integer but is {value!r}"
    return None


def config_problem(config: Mapping[str, Any], space: Mapping[str, tuple[Any, ...]]) -> str | None:
    """Why ``config`` is not a point of ``space`` (a missing parameter or a value outside it)."""
    from .family import OPTIONAL_PARAMS

    for name, allowed in space.items():
        if name not in config:
            if name in OPTIONAL_PARAMS:
                continue
            return f"the config has no {name}"
        if config[name] not in allowed:
            return f"{name}={config[name]!r} is not in the space ({', '.join(map(repr, allowed))})"
    extra = sorted(set(config) - set(space))
    if extra:
        return f"the config has unknown parameters {', '.join(extra)}"
    return None


@dataclass(frozen=True)
class Step:
    """One launch as ``run`` performs it: the plan's :class:`KernelLaunch`, the grid's
    dimensions, and each runtime argument bound to a buffer name or an integer.

    ``plan`` and ``run`` both derive from the same steps, so what is profiled is what runs.
    """

    launch: KernelLaunch
    grid_dims: tuple[int, ...]
    args: tuple[tuple[str, str | int | float], ...]


@dataclass(frozen=True)
class Buffer:
    """A tensor ``run`` allocates: element count, dtype name, and whether it is workspace."""

    numel: int
    dtype: str
    workspace: bool = True

    @property
    def nbytes(self) -> int:
        return self.numel * (4 if self.dtype == "fp32" else DTYPES[self.dtype])


def make_launch(
    name: str,
    fn: Any,
    args: Mapping[str, str],
    constexprs: Mapping[str, Any],
    *,
    num_warps: int,
    num_stages: int,
    grid_dims: tuple[int, ...],
    persistent: bool,
    flops: float,
    dram_bytes: float,
    bindings: Mapping[str, str | int | float],
    cost: str | None = None,
) -> Step:
    """A :class:`Step` whose signature follows ``fn``'s argument order.

    ``args`` gives the type string of each runtime argument, ``constexprs`` the value of
    each ``tl.constexpr`` one; together they must name every argument of ``fn`` once.
    ``bindings`` gives each runtime argument's buffer name or value; pointers are taken
    as 16-byte aligned (every buffer is a fresh allocation) and integers as divisible by
    16 when their value is, as Triton's JIT specialises them. ``cost`` says how the
    analytic model prices the launch (``KernelLaunch.cost``).

    Raises:
        KernelError: a ``cost`` that is not one of ``LAUNCH_COSTS``.
    """
    if cost is not None and cost not in LAUNCH_COSTS:
        raise KernelError(f"launch {name!r}: cost {cost!r} is not one of {', '.join(LAUNCH_COSTS)}")
    signature, constexpr_values, runtime, pointers, ints = _layout(
        fn, tuple(args.items()), tuple((k, type(v), v) for k, v in constexprs.items()))  # True is not 1 here
    divisible = tuple(arg for arg in runtime if arg in pointers or (arg in ints and bindings[arg] % 16 == 0))
    grid = 1
    for dim in grid_dims:
        grid *= dim
    launch = KernelLaunch(
        name=name,
        fn=fn,
        signature=signature,
        constexprs=constexpr_values,
        num_warps=num_warps,
        num_stages=num_stages,
        grid=grid,
        persistent=persistent,
        flops=float(flops),
        dram_bytes=float(dram_bytes),
        divisible_by_16=divisible,
        cost=cost,
    )
    return Step(launch, grid_dims, tuple([(arg, bindings[arg]) for arg in runtime]))


@functools.lru_cache(maxsize=4096)
def _layout(fn: Any, args: tuple[tuple[str, str], ...], constexprs: tuple[tuple[str, type, Any], ...]
            ) -> tuple[tuple, tuple, tuple[str, ...], frozenset[str], frozenset[str]]:
    """What of a launch follows from its kernel and argument kinds alone, the same at every
    shape (a GEMM config is planned at thousands): the signature in ``fn``'s argument
    order, the constexpr values, the runtime arguments, and which are pointers (taken as
    16-byte aligned) and ``i32`` (divisible by 16 when their value is)."""
    types, values = dict(args), {k: v for k, _, v in constexprs}
    signature = []
    for arg in fn.arg_names:
        if arg in values:
            signature.append((arg, "constexpr"))
        elif arg in types:
            signature.append((arg, types[arg]))
        else:
            raise AssertionError(f"{fn.__name__}: argument {arg} has neither a type nor a value")
    runtime = tuple(arg for arg in fn.arg_names if arg in types)
    return (tuple(signature), tuple((k, values[k]) for k in fn.arg_names if k in values), runtime,
            frozenset(arg for arg in runtime if types[arg].startswith("*")),
            frozenset(arg for arg in runtime if types[arg] == "i32"))


def allocate(buffers: Mapping[str, Buffer], device: Any) -> dict[str, Any]:
    """An uninitialised tensor per buffer, on ``device``."""
    import torch

    return {name: torch.empty(b.numel, dtype=torch_dtype(b.dtype), device=device) for name, b in buffers.items()}


def run_steps(steps: list[Step], tensors: Mapping[str, Any]) -> None:
    """Launch each step's runnable kernel with its bound arguments, in order."""
    for step in steps:
        launch = step.launch
        args = [tensors[value] if isinstance(value, str) else value for _, value in step.args]
        launch.fn[step.grid_dims](
            *args, **dict(launch.constexprs), num_warps=launch.num_warps, num_stages=launch.num_stages
        )


def workspace_bytes(buffers: Mapping[str, Buffer]) -> int:
    """The bytes of the buffers a launch plan needs beyond its inputs and output."""
    return sum(b.nbytes for b in buffers.values() if b.workspace)


def sm_count(device: Any) -> int:
    """The persistent grid ``run`` uses: the GPU's SMs, or 4 CTAs on the CPU interpreter."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
