"""Triton kernel families: their spaces, shape limits, launch plans and references.

Importing this package imports Triton (the families hold ``@triton.jit`` kernels) but not
torch; torch is imported when inputs are made or kernels run. Which families exist is the
registry's to say (:mod:`tuner.families`); :func:`get_family` is its, re-exported. The
``rmsnorm`` family lives in its own folder, ``tuner/families/rmsnorm``, as new families do.
"""

from __future__ import annotations

from ..errors import KernelError
from ..families import get_family
from .comm import CommFamily
from .decode_attention import DecodeAttentionFamily
from .family import KernelFamily, KernelLaunch, LaunchPlan, all_configs, ast_source
from .fused_moe import FusedMoeFamily
from .matmul import MatmulFamily

__all__ = [
    "CommFamily",
    "DecodeAttentionFamily",
    "FusedMoeFamily",
    "KernelError",
    "KernelFamily",
    "KernelLaunch",
    "LaunchPlan",
    "MatmulFamily",
    "all_configs",
    "ast_source",
    "get_family",
]
