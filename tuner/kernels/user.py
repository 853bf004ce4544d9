"""A user's own ``@triton.jit`` kernel as a kernel family (``kernel: module:function``).

The people tuner is for already have kernels, with ``triton.Config`` lists and a launch
wrapper. This family takes them as they are: the kernel, its configs (parameters under
the user's names, plus ``num_warps``/``num_stages``), the dimensions of its autotune
key, and an *argument builder* — a small user function ``arguments(shape, device) ->
(args, kwargs, grid)`` that does what the user's wrapper does before ``kernel[grid](...)``.

From one call of the builder on the ``meta`` device (tensors without storage) the family
derives what a bundled family writes by hand: the signature in the kernel's argument
order (tensor → ``*fp16``, int → ``i32``/``i64``, float → ``fp32``), the constexpr values
(config, then the builder's keyword arguments, then the kernel's defaults), the grid
(Triton's ``grid(META)`` rule) and the divisibility hints Triton's JIT would give. So
each config compiles offline for the target like a bundled one, and its occupancy and
shared memory come from the compiled binary.

Triton cannot say what a kernel computes, so its cost is declared by a *cost class* the
problem file names: ``gemm`` (the analytic model's tiled-GEMM path, with the file saying
which of the kernel's parameters are the model's ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``)
or ``memory_bound`` (the roofline on the bytes it moves). The profile says ``modeled``;
``tuner profile --measure`` on a GPU replaces it with measurements, as for bundled
families.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import KernelError
from ._common import INT32_MAX, make_launch
from .family import ConfigParams, LaunchPlan, Shape, operand_bytes

#: Config entries that are launch options, not kernel arguments (``triton.Config``'s).
LAUNCH_OPTIONS: tuple[str, ...] = ("num_warps", "num_stages", "num_ctas", "maxnreg")
#: The analytic model's tile parameters: the first three a ``gemm`` cost must map.
MODEL_TILE: tuple[str, ...] = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")

_TORCH_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
                "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
                "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}

Dimension = Callable[[Shape], float]
ArgumentBuilder = Callable[[Shape, str], tuple[Any, ...]]


@dataclass(frozen=True)
class GemmCost:
    """``C[M, N] = A[M, K] · B[K, N]`` timed tile by tile: M, N, K of a shape, and which
    config parameter is each model tile parameter (``BLOCK_M`` → ``BLOCK_SIZE_M``)."""

    m: Dimension
    n: Dimension
    k: Dimension
    tile: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        missing = [name for name in MODEL_TILE[:3] if name not in dict(self.tile)]
        if missing:
            raise KernelError(f"a gemm cost maps {', '.join(MODEL_TILE[:3])} to the kernel's parameters; "
                              f"{missing[0]} is missing")
        unknown = [name for name, _ in self.tile if name not in MODEL_TILE]
        if unknown:
            raise KernelError(f"{unknown[0]} is not a tile parameter of the model ({', '.join(MODEL_TILE)})")


@dataclass(frozen=True)
class StreamCost:
    """A kernel bound by the bytes it moves (and the flops it does, if any)."""

    bytes: Dimension
    flops: Dimension | None = None


@dataclass(frozen=True)
class _Call:
    """What one call of the argument builder gives, bound to the kernel's parameters."""

    types: dict[str, str]
    values: dict[str, Any]
    grid: Any


class UserKernelFamily:
    """A user's kernel, its configs and cost class, behind the :class:`KernelFamily`
    contract. ``name`` is its import path (``tutorial_matmul:matmul_kernel``).

    Its reference is its own first config (no PyTorch one), and its inputs are the
    builder's arguments at one shape, grid and sizes included (see :class:`KernelFamily`)."""

    torch_reference = False
    inputs_fix_shape = True

    def __init__(self, path: str, fn: Any, configs: tuple[dict[str, Any], ...], key: tuple[str, ...],
                 arguments: ArgumentBuilder, cost: GemmCost | StreamCost,
                 workspace: Dimension | None = None, output: str | None = None,
                 heuristics: Mapping[str, Callable[[dict[str, Any]], Any]] | None = None) -> None:
        # Private, so the measured store keys this family by its name alone (measured.family_options).
        self._name, self._fn, self._configs, self._key = path, fn, configs, key
        self._arguments, self._cost, self._workspace, self._output = arguments, cost, workspace, output
        # @triton.heuristics: meta-parameters computed from the arguments at each launch
        self._heuristics = dict(heuristics or {})
        params = {p.name: p for p in fn.params}
        self._constexpr_names = frozenset(p.name for p in fn.params if p.is_constexpr)
        for i, config in enumerate(configs):
            for name in config:
                if name not in params and name not in LAUNCH_OPTIONS:
                    raise KernelError(f"configs[{i}] sets {name}, which {path} does not take "
                                      f"(its parameters: {', '.join(params)})")
        if isinstance(cost, GemmCost):
            for model, mine in cost.tile:
                if not all(mine in config for config in configs):
                    raise KernelError(f"the gemm cost maps {model} to {mine}, which not every config sets")
        if output is not None and output not in params:
            raise KernelError(f"output {output!r} is not a parameter of {path}")
        space: dict[str, list[Any]] = {}
        for config in configs:
            for name, value in config.items():
                if value not in space.setdefault(name, []):
                    space[name].append(value)
        self._space = {name: tuple(values) for name, values in space.items()}
        self._calls: dict[tuple[int, ...], _Call] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def fn(self) -> Any:
        """The user's ``@triton.jit`` function."""
        return self._fn

    @property
    def configs(self) -> tuple[dict[str, Any], ...]:
        """The user's configs, in their order (a list, not a product space)."""
        return self._configs

    @property
    def shape_keys(self) -> tuple[str, ...]:
        return self._key

    @property
    def bucket_key(self) -> tuple[str, ...]:
        return self._key

    @property
    def space(self) -> dict[str, tuple[Any, ...]]:
        """Each parameter's values over the configs, in order of first use."""
        return self._space

    def __repr__(self) -> str:
        return f"UserKernelFamily({self.name})"

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        """Nothing beyond what compiling says (shared memory, registers): a user kernel
        declares no shape limits."""
        return None

    def call(self, shape: Shape) -> _Call:
        """The builder's arguments at ``shape`` on the ``meta`` device, bound and typed
        (memoised per shape: the builder allocates nothing there, but is user code).

        Raises:
            KernelError: the builder raised, or gave an argument tuner cannot type.
        """
        key = tuple(int(shape[k]) for k in self.shape_keys)
        found = self._calls.get(key)
        if found is None:
            args, kwargs, grid = self._built(shape, "meta")
            values = self._bound(args, kwargs)
            types = {name: _argument_type(name, value) for name, value in values.items()
                     if name not in self._constexpr_names}
            found = self._calls[key] = _Call(types, values, grid)
        return found

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan:
        call = self.call(shape)
        constexprs = self._constexprs(config, call.values)
        meta = {**call.values, **constexprs, **{k: v for k, v in config.items() if k in LAUNCH_OPTIONS}}
        grid_dims = _grid(call.grid, meta, self.name)
        in_bytes, out_bytes = operand_bytes(tuple((p.name, call.types[p.name]) for p in self._fn.params
                                                  if p.name in call.types))
        dims = {k: int(shape[k]) for k in self.shape_keys}
        if isinstance(self._cost, GemmCost):
            m, n, k = (int(_amount(f"the gemm cost's {name} of {self.name}", f, dims))
                       for name, f in (("M", self._cost.m), ("N", self._cost.n), ("K", self._cost.k)))
            modeled = tuple((model, config[mine]) for model, mine in self._cost.tile) + (("M", m), ("N", n), ("K", k))
            flops, dram = 2.0 * m * n * k, float((m * k + k * n) * in_bytes + m * n * out_bytes)
        else:
            modeled = ()
            flops = _amount(f"the cost's flops of {self.name}", self._cost.flops, dims)
            dram = _amount(f"the cost's bytes of {self.name}", self._cost.bytes, dims)
        step = make_launch(
            self.name.rsplit(":", 1)[-1], self.fn, call.types, constexprs,
            num_warps=int(config.get("num_warps", 4)), num_stages=int(config.get("num_stages", 3)),
            grid_dims=grid_dims, persistent=False, flops=flops, dram_bytes=dram,
            bindings={name: value if isinstance(value, int) else name for name, value in call.values.items()
                      if name in call.types},
            cost="gemm" if isinstance(self._cost, GemmCost) else "memory",
        )
        launch = step.launch.modeled_as(modeled)
        workspace = _amount(f"the workspace of {self.name}", self._workspace, dims)
        return LaunchPlan((launch,), workspace)

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any, device: str) -> dict[str, Any]:
        """The builder's real arguments on ``device`` (``dtype`` is the builder's own
        choice; ``seed`` seeds torch's generator before it runs)."""
        import torch

        torch.manual_seed(seed)
        args, kwargs, grid = self._built(shape, device)
        return {"values": self._bound(args, kwargs), "grid": grid}

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape) -> Any:
        """Launch the kernel with ``config`` as ``kernel[grid](...)`` would; the output
        argument (``output``), or None when the file names none."""
        values = inputs["values"]
        constexprs = self._constexprs(config, values)
        options = {k: v for k, v in config.items() if k in LAUNCH_OPTIONS}
        runtime = {name: value for name, value in values.items() if name not in self._constexpr_names}
        self._fn[inputs["grid"]](**runtime, **constexprs, **options)
        return values.get(self._output) if self._output is not None else None

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        """The first config's result: configs of one kernel must agree with each other."""
        return self.run(inputs, self.configs[0], shape)

    def _built(self, shape: Shape, device: str) -> tuple[tuple, dict, Any]:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # its prints never reach --json
                built = self._arguments({k: int(shape[k]) for k in self.shape_keys}, device)
            args, kwargs, grid = built
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: name it, never a traceback or an exit
            raise KernelError(f"the argument builder of {self.name} at {dict(shape)} on {device!r} failed: "
                              f"{type(exc).__name__}: {exc}") from None
        return tuple(args), dict(kwargs), grid

    def _bound(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        names = [p.name for p in self._fn.params]
        if len(args) > len(names):
            raise KernelError(f"the argument builder of {self.name} gives {len(args)} positional arguments; "
                              f"the kernel takes {len(names)}")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names:
                raise KernelError(f"the argument builder of {self.name} passes {name}, which the kernel does not take")
            values[name] = value
        return values

    def _constexprs(self, config: ConfigParams, values: Mapping[str, Any]) -> dict[str, Any]:
        """Each constexpr's value: the config's, else the builder's, else the kernel's
        default. A constexpr with none is an error: the kernel would not compile."""
        found = {}
        for p in self._fn.params:
            if not p.is_constexpr:
                if p.name not in values:
                    raise KernelError(f"the argument builder of {self.name} gives no {p.name}")
                continue
            if p.name in config:
                found[p.name] = config[p.name]
            elif p.name in values:
                found[p.name] = values[p.name]
            elif p.has_default:
                found[p.name] = p.default
            elif p.name not in self._heuristics:
                raise KernelError(f"{self.name}'s constexpr {p.name} has no value: neither the config "
                                  "nor the argument builder sets it, and it has no default")
        for name, heuristic in self._heuristics.items():  # as Heuristics.run: over the arguments and config
            try:
                found[name] = heuristic({**values, **found, **{k: v for k, v in config.items() if k not in found}})
            except Exception as exc:  # noqa: BLE001 - user code: one line naming it
                raise KernelError(f"{self.name}'s @triton.heuristics for {name} raised "
                                  f"{type(exc).__name__}: {exc}") from None
        return found


def _argument_type(name: str, value: Any) -> str:
    """Triton's signature type of a runtime argument, as its JIT would infer it."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _TORCH_TYPES:
            raise KernelError(f"argument {name} is a {dtype} tensor, which tuner does not type")
        return "*" + _TORCH_TYPES[dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -INT32_MAX - 1 <= value <= INT32_MAX else "i64"
    if isinstance(value, float):
        return "fp32"
    raise KernelError(f"argument {name} is a {type(value).__name__}; tuner types tensors, ints, floats and bools")


def _amount(what: str, expression: Dimension | None, dims: Mapping[str, int]) -> float:
    """A count a user's expression gives at ``dims`` (FLOPs, bytes, a GEMM's M): a finite
    number >= 0 (0 without an expression), else one line, also when evaluating it divides
    by zero or leaves its domain (``sqrt`` of a negative), as the second fuzz round found."""
    shown = ", ".join(f"{k}={v}" for k, v in dims.items())
    try:
        value = 0.0 if expression is None else expression(dims)
    except (ArithmeticError, ValueError) as exc:
        raise KernelError(f"{what} at {shown} cannot be evaluated: {type(exc).__name__}: {exc}") from None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not (math.isfinite(number) and number >= 0.0):
        raise KernelError(f"{what} at {shown} is {value!r}; it must be a finite number >= 0")
    return number


#: CUDA's largest grid, x, y and z (``maxGridSize`` on every GPU since sm_30): a launch
#: beyond it fails, so a plan beyond it is refused rather than priced.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def _grid(grid: Any, meta: Mapping[str, Any], name: str) -> tuple[int, ...]:
    """The grid's dimensions: ``grid(META)`` when it is callable, as Triton launches it;
    one to three positive integers within :data:`GRID_LIMITS`.

    Raises:
        KernelError: the grid function raised, or gave anything else (one line).
    """
    try:
        with contextlib.redirect_stdout(sys.stderr):
            dims = grid(dict(meta)) if callable(grid) else grid
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's grid function: one line, not a traceback
        raise KernelError(f"the grid of {name} raised {type(exc).__name__}: {exc}") from None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise KernelError(f"the grid of {name} must be one to three positive integers but is {dims!r}")
    over = [f"{axis}={d:,} (at most {top:,})" for axis, d, top in zip("xyz", dims, GRID_LIMITS) if d > top]
    if over:
        raise KernelError(f"the grid of {name} is beyond CUDA's limits: {', '.join(over)}")
    return dims
