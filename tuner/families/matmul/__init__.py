"""The ``matmul`` family's spec (its kernel: :mod:`tuner.families.matmul.kernel`).

``NW`` = N, or 2N for the ``gated_silu`` epilogue; ``e`` the element size of ``dtype``.
Workspace: split-K partials ``4·SPLIT_K·M·NW`` bytes (fp32) when ``SPLIT_K > 1``; the
unfused intermediate ``e·M·NW`` when ``FUSE_EPILOGUE`` is False. Launches: the GEMM
(``matmul``, or ``matmul_partial`` when split), ``splitk_reduce`` when split,
``epilogue`` when unfused; the GEMM's grid is ``cdiv(M, BLOCK_M)·cdiv(N, BLOCK_N)·SPLIT_K``
work items, or ``min(sized SMs × CTAs per SM, items)`` when ``PERSISTENT``; the
elementwise launches ``cdiv(M·N, 1024)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..formulas import EW_BLOCK, PlannedLaunch, WorkBuffer, cdiv, matmul_items
from ..spec import FamilySpec


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple[WorkBuffer, ...]:
    M, N = shape["M"], shape["N"]
    nw = 2 * N if options.get("epilogue") == "gated_silu" else N
    out: list[WorkBuffer] = []
    if config["SPLIT_K"] > 1:
        out.append(("partials", config["SPLIT_K"] * M * nw, "fp32"))
    if not config["FUSE_EPILOGUE"]:
        out.append(("mid", M * nw, options.get("dtype", "bf16")))
    return tuple(out)


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]:
    M, N = shape["M"], shape["N"]
    split, fused = config["SPLIT_K"], config["FUSE_EPILOGUE"]
    items = matmul_items(config, shape)
    persistent = bool(config["PERSISTENT"])
    grid: int | None = items
    if persistent:
        grid = None if ctas_per_sm is None else min(num_sms * ctas_per_sm, items)
    out: list[PlannedLaunch] = [("matmul" if split == 1 else "matmul_partial", grid, persistent)]
    if split > 1:
        out.append(("splitk_reduce", cdiv(M * N, EW_BLOCK), False))
    if not fused:
        out.append(("epilogue", cdiv(M * N, EW_BLOCK), False))
    return tuple(out)


SPEC = FamilySpec(
    name="matmul", kernel="tuner.families.matmul.kernel:MatmulFamily", cost="gemm",
    workspace=workspace, launches=launches,
    # Triton's tutorial kernel (python/tutorials/03-matrix-multiplication.py) names its tiles so.
    runtime_names={"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
                   "GROUP_M": "GROUP_SIZE_M"},
    # The tile sizes, warps, stages and splits a Triton autotune list typically holds.
    autotune_space={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (64, 128, 256), "BLOCK_K": (32, 64),
                    "num_warps": (4, 8), "num_stages": (3, 4), "SPLIT_K": (1, 4)},
)
