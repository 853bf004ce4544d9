"""The ``decode_attention`` family's spec (its kernel: :mod:`tuner.families.decode_attention.kernel`).

Workspace: split-KV partials ``4·B·H·S·(D+2)`` bytes with S the splits that run
(:func:`~tuner.families.formulas.decode_splits`) when ``S > 1``; the ``materialize``
variant's score matrix ``4·B·H·L``. Launches: ``decode_split`` (grid ``B·KV·S``) and
``decode_reduce`` (``B·H``) when split; ``decode_scores`` (``B·KV·cdiv(L, BLOCK_N)``) and
``decode_softmax_pv`` (``B·KV``) when materialized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..formulas import PlannedLaunch, WorkBuffer, cdiv, decode_splits
from ..spec import FamilySpec


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple[WorkBuffer, ...]:
    B, H, D = shape["B"], shape["H"], shape["D"]
    if config["VARIANT"] == "materialize":
        return (("scores", B * H * shape["L"], "fp32"),)
    splits = decode_splits(config, shape, num_sms)
    return (("partials", B * H * splits * (D + 2), "fp32"),) if splits > 1 else ()


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]:
    B, H, KV = shape["B"], shape["H"], shape["KV"]
    if config["VARIANT"] == "materialize":
        return (("decode_scores", B * KV * cdiv(shape["L"], config["BLOCK_N"]), False),
                ("decode_softmax_pv", B * KV, False))
    splits = decode_splits(config, shape, num_sms)
    split: tuple[PlannedLaunch, ...] = (("decode_split", B * KV * splits, False),)
    return split + ((("decode_reduce", B * H, False),) if splits > 1 else ())


SPEC = FamilySpec(
    name="decode_attention", kernel="tuner.families.decode_attention.kernel:DecodeAttentionFamily", cost="attention",
    workspace=workspace, launches=launches, runtime_names={},
)
