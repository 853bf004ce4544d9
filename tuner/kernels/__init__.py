"""The contract of a Triton kernel family and the toolkit its kernel module is built with.

The families themselves live in folders of their own (``tuner/families/<name>/``: a spec
and a kernel module); which exist is the registry's to say (:mod:`tuner.families`), and
:func:`get_family` is its, re-exported. Here: the :class:`KernelFamily` protocol, the
:class:`KernelLaunch` and :class:`LaunchPlan` values, and :func:`make_launch`,
:func:`run_steps`, :func:`allocate`, :class:`Step` and :class:`Buffer`, with which a
family's kernel module builds its plans and runs them. Importing this package imports
Triton (the toolkit compiles ``@triton.jit`` kernels) but not torch.
"""

from __future__ import annotations

from ..deprecated import moved_names
from ..errors import KernelError
from ..families import get_family
from ._common import Buffer, Step, allocate, make_launch, run_steps
from .family import KernelFamily, KernelLaunch, LaunchPlan, all_configs, ast_source

__all__ = [
    "Buffer",
    "Step",
    "allocate",
    "make_launch",
    "run_steps",
    "KernelError",
    "KernelFamily",
    "KernelLaunch",
    "LaunchPlan",
    "all_configs",
    "ast_source",
    "get_family",
]

#: The family classes this package held before families had folders of their own.
__getattr__ = moved_names(__name__, {
    "MatmulFamily": "tuner.families.matmul.kernel:MatmulFamily",
    "DecodeAttentionFamily": "tuner.families.decode_attention.kernel:DecodeAttentionFamily",
    "RmsNormFamily": "tuner.families.rmsnorm.kernel:RmsNormFamily",
    "CommFamily": "tuner.families.comm.kernel:CommFamily",
    "FusedMoeFamily": "tuner.families.fused_moe.kernel:FusedMoeFamily",
})
