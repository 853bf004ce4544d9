"""Triton kernel families: their spaces, shape limits, launch plans and references.

Importing this package imports Triton (the families hold ``@triton.jit`` kernels) but not
torch; torch is imported when inputs are made or kernels run. Which families exist is the
registry's to say (:mod:`tuner.families`); :func:`get_family` is its, re-exported. The
``rmsnorm`` family lives in its own folder, ``tuner/families/rmsnorm``, as new families do;
:func:`make_launch`, :func:`run_steps`, :func:`allocate`, :class:`Step` and :class:`Buffer`
are the toolkit a family's kernel module builds its plans and runs with.
"""

from __future__ import annotations

from ..errors import KernelError
from ..families import get_family
from ._common import Buffer, Step, allocate, make_launch, run_steps
from .comm import CommFamily
from .decode_attention import DecodeAttentionFamily
from .family import KernelFamily, KernelLaunch, LaunchPlan, all_configs, ast_source
from .fused_moe import FusedMoeFamily
from .matmul import MatmulFamily

__all__ = [
    "Buffer",
    "Step",
    "allocate",
    "make_launch",
    "run_steps",
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
