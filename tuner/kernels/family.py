"""The contract of a kernel family: a Triton kernel, its parameter space, its shape limits,
what each config launches for a shape, and a PyTorch reference.

A config may launch several kernels (a split-K GEMM launches the partial products and a
reduction; an unfused epilogue is a second, elementwise kernel), and may need global
workspace (split-K partials, an unfused intermediate, a materialised score matrix). The
profiler compiles each launch, the analytic model times it, the simulator runs the
launches in order. Every config of a family computes the same function: configs differ
in speed and footprint, never in results beyond floating-point tolerance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any, Protocol

from ..errors import KernelError

Shape = Mapping[str, int]
ConfigParams = Mapping[str, Any]

#: The cost kinds a launch may declare (``KernelLaunch.cost``); the analytic model has one
#: path for each (``tuner.profile.model.COST_PATHS``).
LAUNCH_COSTS: tuple[str, ...] = ("gemm", "grouped_gemm", "attention", "memory")


@dataclass(frozen=True)
class KernelLaunch:
    """One Triton kernel launch of a config at a shape.

    Attributes:
        name: what the launch does, e.g. ``"matmul_partial"`` or ``"splitk_reduce"``.
        fn: the ``@triton.jit`` function.
        signature: its arguments for ``triton.compiler.ASTSource``: name → type string
            (``"*bf16"``, ``"i32"``, ``"constexpr"``), in the function's order.
        constexprs: values of its ``tl.constexpr`` arguments (compile-time config).
        num_warps, num_stages: launch options that change the compiled code.
        grid: CTAs launched (the product of the grid dimensions).
        persistent: the grid is sized to the GPU and loops over tiles.
        flops: useful floating-point operations.
        dram_bytes: bytes it must read and write at least (compulsory traffic).
        divisible_by_16: the arguments Triton's JIT would specialise as divisible by 16
            at this shape (pointers to fresh allocations; integers whose value is a
            multiple of 16). It changes the binary — without it loads do not vectorise
            and the pipeliner keeps one stage — so it is part of the compile key.
        model_constexprs: the constexprs the analytic model reads, where the kernel's
            own names are not the model's vocabulary (a user kernel's ``BLOCK_SIZE_M`` is
            the model's ``BLOCK_M``); None: ``constexprs``. Not part of the compile key.
        cost: how the analytic model prices it, one of :data:`LAUNCH_COSTS` (``gemm``,
            ``grouped_gemm``, ``attention``, ``memory``); None: inferred from its
            constexprs' names, for a family that does not say. Not part of the compile key.
    """

    name: str
    fn: Any = field(compare=False, hash=False, repr=False)
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: int
    grid: int
    persistent: bool
    flops: float
    dram_bytes: float
    divisible_by_16: tuple[str, ...] = ()
    model_constexprs: tuple[tuple[str, Any], ...] | None = None
    cost: str | None = None

    @property
    def modeled_constexprs(self) -> dict[str, Any]:
        """The constexprs as the analytic model reads them (see ``model_constexprs``)."""
        return dict(self.constexprs if self.model_constexprs is None else self.model_constexprs)

    def modeled_as(self, constexprs: tuple[tuple[str, Any], ...]) -> KernelLaunch:
        """This launch, read by the model through ``constexprs`` (its binary unchanged)."""
        return replace(self, model_constexprs=tuple(constexprs))

    def compile_key(self) -> tuple:
        """What the compiled binary depends on (not the grid; the shape only through
        which integer arguments are multiples of 16)."""
        return (self.name, self.signature, self.constexprs, self.num_warps, self.num_stages,
                self.divisible_by_16)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a config does for one shape."""

    launches: tuple[KernelLaunch, ...]
    workspace_bytes: float


class KernelFamily(Protocol):
    """A kernel family. Implementations are stateless and thread-safe.

    ``bucket_key`` names the shape dimensions whose value changes which config is
    fastest: a problem's default shape buckets split them (``tuner.problem.buckets``).
    ``space`` is the full parameter space (parameter → allowed values, first value the
    default). ``illegal`` says why a config cannot run a shape (a shape limit, a
    parameter combination the kernel does not support) or returns None. ``plan`` is only
    called for legal pairs; ``persistent_ctas`` is the grid a persistent config launches
    (SMs × CTAs per SM, which only the compiled resources know). ``run`` launches the
    real kernels on ``inputs`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``) and must
    match ``reference`` within floating-point tolerance.

    Optional class attributes, read where tuner runs kernels itself (``tuner replay``):
    ``runnable = False`` (it cannot run on one device: a collective), ``torch_reference =
    False`` (its ``reference`` is a kernel too, not PyTorch: nothing of it runs on a CPU)
    and ``inputs_fix_shape = True`` (its inputs carry the shape they were made for, so
    inputs made for a larger shape cannot serve a smaller launch).
    """

    name: str
    shape_keys: tuple[str, ...]
    bucket_key: tuple[str, ...]
    space: Mapping[str, tuple[Any, ...]]

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None: ...

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan: ...

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any, device: str) -> dict[str, Any]: ...

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any: ...

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape) -> Any: ...


#: Bytes per element of each pointer type a signature can hold (``*bf16`` → 2).
SIGNATURE_BYTES: dict[str, int] = {"fp8e4nv": 1, "fp8e5": 1, "fp8e4b15": 1, "fp8e5b16": 1, "i1": 1, "i8": 1,
                                   "u8": 1, "fp16": 2, "bf16": 2, "i16": 2, "fp32": 4, "i32": 4, "fp64": 8,
                                   "i64": 8}
_OUTPUT_NAMES = ("c_ptr", "c", "out_ptr", "out", "dst_ptr", "dst", "y_ptr", "y")


def operand_bytes(signature: tuple[tuple[str, str], ...]) -> tuple[int, int]:
    """Element sizes of a launch's inputs (its first pointer) and of its output (the
    pointer named like ``c_ptr``/``out``/``dst``, else the third); 2 bytes when unknown.
    The analytic model's GEMM traffic and a user kernel's compulsory bytes read the same
    rule."""
    pointers = [(name, t[1:]) for name, t in signature if t.startswith("*")]
    if not pointers:
        return 2, 2
    named = dict(pointers)
    out = next((named[n] for n in _OUTPUT_NAMES if n in named),
               pointers[2][1] if len(pointers) > 2 else pointers[-1][1])
    return SIGNATURE_BYTES.get(pointers[0][1], 2), SIGNATURE_BYTES.get(out, 2)


#: Parameters a family may leave out of a config: a config without one behaves as at its
#: first value. A problem file that does not name them keeps its configs' names and
#: parameters (and its stored tables) as they were before the parameter existed.
OPTIONAL_PARAMS: frozenset[str] = frozenset({"SM_MARGIN"})


# The margin's one rule lives in ``tuner.requirements`` (importable without Triton, for
# the runtime); re-exported here for the families and the profiler.
from ..requirements import margin_problem, sized_sms  # noqa: E402


def all_configs(space: Mapping[str, tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    """Every point of a space, in a stable order."""
    names = list(space)
    for values in product(*(space[name] for name in names)):
        yield dict(zip(names, values))


def ast_source(launch: KernelLaunch) -> Any:
    """The ``triton.compiler.ASTSource`` of ``launch``, ready for ``triton.compile``, with
    the divisibility hints Triton's JIT would give it (``launch.divisible_by_16``).

    Raises:
        KernelError: the kernel was loaded under ``TRITON_INTERPRET=1`` and cannot compile.
    """
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(launch.fn, JITFunction):
        raise KernelError(
            f"launch {launch.name!r} cannot be compiled in this process: its kernel was loaded "
            "under TRITON_INTERPRET=1 (as was Triton's own library); compile in a process "
            "where TRITON_INTERPRET is unset."
        )
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, _) in enumerate(launch.signature)
             if name in launch.divisible_by_16}
    return ASTSource(launch.fn, signature=dict(launch.signature), constexprs=dict(launch.constexprs),
                     attrs=attrs)
