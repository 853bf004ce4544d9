"""The ``rmsnorm`` family: a folder of its own, as every family's recipe asks
(``docs/kernel-families.md``): this spec, standard library only, and its kernel in
:mod:`tuner.families.rmsnorm.kernel` (Triton), imported when a config is planned or run.

No workspace (h is an output). Launches: ``add`` (``cdiv(M·N, BLOCK_N)``) when the
residual is not fused, ``rmsnorm`` (``M``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..formulas import PlannedLaunch, WorkBuffer, cdiv
from ..spec import FamilySpec


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple[WorkBuffer, ...]:
    return ()


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]:
    M, N = shape["M"], shape["N"]
    add = options.get("residual", True) and not config["FUSE_RESIDUAL"]
    return ((("add", cdiv(M * N, config["BLOCK_N"]), False),) if add else ()) + (("rmsnorm", M, False),)


SPEC = FamilySpec(
    name="rmsnorm", kernel="tuner.families.rmsnorm.kernel:RmsNormFamily", cost="memory",
    workspace=workspace, launches=launches,
    # Triton's layer-norm tutorial (python/tutorials/05-layer-norm.py) calls its block BLOCK_SIZE.
    runtime_names={"BLOCK_N": "BLOCK_SIZE"},
)
