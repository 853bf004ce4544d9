"""Triton kernel families: their spaces, shape limits, launch plans and references.

Importing this package imports Triton (the families hold ``@triton.jit`` kernels) but not
torch; torch is imported when inputs are made or kernels run.
"""

from __future__ import annotations

from typing import Any

from ..errors import KernelError
from .comm import CommFamily
from .decode_attention import DecodeAttentionFamily
from .family import KernelFamily, KernelLaunch, LaunchPlan, all_configs, ast_source
from .fused_moe import FusedMoeFamily
from .matmul import MatmulFamily
from .rmsnorm import RmsNormFamily

#: Family name → its class; options of :func:`get_family` go to the class.
FAMILIES: dict[str, type] = {
    MatmulFamily.name: MatmulFamily,
    DecodeAttentionFamily.name: DecodeAttentionFamily,
    RmsNormFamily.name: RmsNormFamily,
    CommFamily.name: CommFamily,
    FusedMoeFamily.name: FusedMoeFamily,
}


def get_family(name: str, **options: Any) -> KernelFamily:
    """The family called ``name``, built with ``options`` (e.g. ``epilogue="silu"``).

    Raises:
        KernelError: an unknown name, or options the family does not take.
    """
    cls = FAMILIES.get(name)
    if cls is None:
        raise KernelError(f"unknown kernel family {name!r}; the built-in families are {', '.join(sorted(FAMILIES))}.")
    try:
        return cls(**options)
    except TypeError as e:
        raise KernelError(f"kernel family {name!r} does not take options {sorted(options)}: {e}") from e


__all__ = [
    "FAMILIES",
    "CommFamily",
    "DecodeAttentionFamily",
    "FusedMoeFamily",
    "KernelError",
    "KernelFamily",
    "KernelLaunch",
    "LaunchPlan",
    "MatmulFamily",
    "RmsNormFamily",
    "all_configs",
    "ast_source",
    "get_family",
]
