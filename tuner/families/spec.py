"""What tuner knows of a kernel family without importing it: a :class:`FamilySpec`.

A family is two things. Its *kernel* (a :class:`tuner.kernels.family.KernelFamily`: the
``@triton.jit`` code, its space and legality, its launch plans, inputs and PyTorch
reference) imports Triton, so a serving process cannot load it. Its *spec*, this value,
imports only the standard library: what a config needs at a shape (workspace buffers,
launches and grids), what kind of cost its main launch is (each launch says its own kind
to the analytic model: ``KernelLaunch.cost``), what the runtime's drop-in autotuner and
the exports call its parameters, and the space ``tuner profile --best`` searches. Every room asks the registry (:mod:`tuner.families`) for the spec by name
instead of switching on the family's name, so a new family is its folder and one
registry line — the way Triton's autotuner takes an explicit ``perf_model`` rather than
guessing what a kernel is.

A family's space and legality stay with its kernel class, for two reasons. Its legality
reads the kernel's own options and limits (an epilogue to unfuse, int32 indexing, a
register budget), which the plan and the run check the same way. And a bundled
kernel module's ``SPACE`` sits above its ``@triton.jit`` functions, whose identity
(Triton's ``cache_key``, a stored row's ``kernel_source_hash``, the compile cache's key)
counts the line each starts on: moving it would make every stored table and compile
cache look out of date for no change to any kernel.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from ..errors import KernelError
from .formulas import PlannedLaunch, WorkBuffer

#: What a family's main launch costs, as the analytic model prices each launch of that
#: kind (``tuner.profile.model.COST_PATHS``): ``gemm`` tile by tile, ``grouped_gemm`` the
#: same over per-expert blocks, ``attention`` from its work on the tensor cores,
#: ``memory`` from the bytes it moves; and ``collective``, priced by the collective model
#: (not a Triton kernel).
COST_KINDS: tuple[str, ...] = ("gemm", "grouped_gemm", "attention", "memory", "collective")


class WorkspaceRule(Protocol):
    """The global workspace buffers of ``config`` at ``shape`` (``num_sms``: the SMs it is
    sized to, margin taken off); the kernel's ``plan`` sums them and its ``run`` allocates
    them, so what a server reserves is what runs."""

    def __call__(self, options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
                 num_sms: int) -> tuple[WorkBuffer, ...]: ...


class LaunchRule(Protocol):
    """``(name, grid, persistent)`` per launch of ``config`` at ``shape``, in order; a
    persistent grid is None when ``ctas_per_sm`` (the compiled occupancy) is unknown.
    ``expert_counts``: a routed family's pairs per expert (None: spread evenly)."""

    def __call__(self, options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
                 num_sms: int, ctas_per_sm: int | None,
                 expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]: ...


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if mapping is None else MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=False)
class FamilySpec:
    """One kernel family as the registry holds it.

    Attributes:
        name: what a problem file's ``kernel:`` and a table row's ``family`` say.
        kernel: the family's kernel class (or a factory taking the family's options), or
            ``"module:attribute"`` naming it, imported on first use: a spec that names
            its kernel by string keeps Triton out of processes that never launch it.
        cost: what kind of cost its main launch is (one of :data:`COST_KINDS`), shown by
            ``tuner families``; the model reads each launch's own ``KernelLaunch.cost``.
        workspace, launches: its requirement rules (see :class:`WorkspaceRule`,
            :class:`LaunchRule`); None: ``tuner.requirements`` cannot judge its rows.
        runtime_names: its table parameter names → those of the Triton kernel a server
            already has (``tuner.runtime.autotune(names=NAME)``); None: not offered there.
        autotune_space: the space ``tuner profile --best`` searches (None: the kernel's).
        export_options: the options an export needs with the kernel's defaults filled in
            (a fused MoE file's name carries E, top-k and dtype).
        vllm_layout: how ``tuner table export --format vllm`` writes its rows: ``m_keyed``
            (one M-keyed file per operator) or ``fused_moe`` (vLLM's fused MoE files).
    """

    name: str
    kernel: str | Callable[..., Any] = field(repr=False)
    cost: str
    workspace: WorkspaceRule | None = field(default=None, repr=False)
    launches: LaunchRule | None = field(default=None, repr=False)
    runtime_names: Mapping[str, str] | None = None
    autotune_space: Mapping[str, tuple[Any, ...]] | None = None
    export_options: tuple[str, ...] = ()
    vllm_layout: str = "m_keyed"

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or not self.name.replace("_", "a").isalnum():
            raise KernelError(f"kernel family name {self.name!r}: letters, digits and '_' only")
        if self.cost not in COST_KINDS:
            raise KernelError(f"kernel family {self.name!r}: cost {self.cost!r} is not one of {', '.join(COST_KINDS)}")
        if self.vllm_layout not in ("m_keyed", "fused_moe"):
            raise KernelError(f"kernel family {self.name!r}: vllm_layout {self.vllm_layout!r} is not m_keyed or fused_moe")
        object.__setattr__(self, "runtime_names", _frozen(self.runtime_names))
        object.__setattr__(self, "autotune_space", _frozen(self.autotune_space))

    @property
    def judges_requirements(self) -> bool:
        """Whether ``tuner.requirements`` can say what its configs need."""
        return self.workspace is not None and self.launches is not None

    def kernel_class(self) -> Callable[..., Any]:
        """The kernel class (imports it, and Triton, when named by string).

        Raises:
            KernelError: the named module or attribute does not import.
        """
        if not isinstance(self.kernel, str):
            return self.kernel
        module, _, attribute = self.kernel.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise KernelError(f"kernel family {self.name!r}: its kernel {self.kernel!r} does not import: {exc}") from None

    def build(self, **options: Any) -> Any:
        """The family's kernel built with ``options`` (e.g. ``epilogue="silu"``).

        Raises:
            KernelError: options the kernel does not take, or values it refuses.
        """
        try:
            return self.kernel_class()(**options)
        except TypeError as exc:
            raise KernelError(f"kernel family {self.name!r} does not take options {sorted(options)}: {exc}") from exc
