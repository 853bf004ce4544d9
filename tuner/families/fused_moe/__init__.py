"""The ``fused_moe`` family's spec (its kernel: :mod:`tuner.families.fused_moe.kernel`).

``P = M·top_k`` (token, expert) pairs, ``e`` the element size of ``dtype``. Workspace:
the intermediate ``e·P·N``, the down output ``e·P·K`` when ``top_k > 1``, and the align
step's int32 arrays at vLLM's bound ``R = P + E·(BLOCK_SIZE_M - 1)`` rows: ``4·R`` and
``4·cdiv(R, BLOCK_SIZE_M)``. Launches: ``fused_moe_gate_up`` and ``fused_moe_down``
(grids ``blocks·cdiv(N_out, BLOCK_SIZE_N)``, blocks from the routing: even when not
given), ``moe_sum`` when ``top_k > 1``. vLLM reads its tuned configs from files of its
own (``E=..,N=..,device_name=...json``), which ``tuner table export --format vllm``
writes for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..formulas import EW_BLOCK, PlannedLaunch, WorkBuffer, cdiv, uniform_counts
from ..spec import FamilySpec


def _routing(options: Mapping[str, Any]) -> tuple[int, int]:
    return int(options.get("top_k", 2)), int(options.get("experts", 8))


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple[WorkBuffer, ...]:
    (top_k, experts), bm = _routing(options), config["BLOCK_SIZE_M"]
    pairs = shape["M"] * top_k
    bound = pairs + experts * (bm - 1)
    dtype = options.get("dtype", "bf16")
    out: list[WorkBuffer] = [("cache1", pairs * shape["N"], dtype)]
    if top_k > 1:
        out.append(("cache3", pairs * shape["K"], dtype))
    out += [("sorted_token_ids", bound, "i32"), ("expert_ids", cdiv(bound, bm), "i32")]
    return tuple(out)


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]:
    (top_k, experts), bm = _routing(options), config["BLOCK_SIZE_M"]
    counts = expert_counts if expert_counts is not None else uniform_counts(shape["M"], experts, top_k)
    blocks = sum(cdiv(int(c), bm) for c in counts)
    bn = config["BLOCK_SIZE_N"]
    out: list[PlannedLaunch] = [("fused_moe_gate_up", blocks * cdiv(shape["N"], bn), False),
                                ("fused_moe_down", blocks * cdiv(shape["K"], bn), False)]
    if top_k > 1:
        out.append(("moe_sum", cdiv(shape["M"] * shape["K"], EW_BLOCK), False))
    return tuple(out)


SPEC = FamilySpec(
    name="fused_moe", kernel="tuner.families.fused_moe.kernel:FusedMoeFamily", cost="grouped_gemm",
    workspace=workspace, launches=launches, export_options=("experts", "top_k", "dtype"), vllm_layout="fused_moe",
)
