"""The arithmetic the bundled families' specs share: the SMs a config is sized to, work
items, split counts, routing spread, element sizes.

Standard library only: a serving process reads these through :mod:`tuner.requirements`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Element sizes of the dtype names the families use (their buffers' and options').
ELEMENT_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "i32": 4, "fp8": 1}
#: The most splits decode attention's ``NUM_SPLITS="auto"`` picks (FlashAttention-2's cap).
MAX_AUTO_SPLITS = 128
#: The flat block of the families' untuned elementwise launches (split-K reduce, epilogue, moe_sum).
EW_BLOCK = 1024

#: A workspace buffer: ``(name, elements, dtype name)``.
WorkBuffer = tuple[str, int, str]
#: A planned launch: ``(name, grid, persistent)``; a persistent grid is None when the
#: compiled occupancy is unknown.
PlannedLaunch = tuple[str, "int | None", bool]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def sized_sms(config: Mapping[str, Any], sms: int) -> int:
    """The SMs a config sizes its persistent grid and split counts to: the ``sms`` it is
    told, less its ``SM_MARGIN`` (the SMs it leaves to another stream, as PyTorch's
    sm_carveout, FlashAttention-3's sm_margin, DeepGEMM's num_sms and cuBLASLt's
    SM_COUNT_TARGET do), at least one. The one rule of the margin, for the model and
    for the real launch alike."""
    return max(1, sms - int(config.get("SM_MARGIN", 0)))


def margin_problem(config: Mapping[str, Any], sms: int) -> str | None:
    """Why a config's margin cannot run on ``sms`` SMs (it would leave none), or None."""
    margin = int(config.get("SM_MARGIN", 0))
    if margin >= sms:
        return f"SM_MARGIN={margin} leaves no SM of the {sms} it is told"
    return None


def matmul_items(config: Mapping[str, Any], shape: Mapping[str, int]) -> int:
    """A matmul config's work items: (K slice, output tile) pairs, one CTA each unless persistent."""
    return cdiv(shape["M"], config["BLOCK_M"]) * cdiv(shape["N"], config["BLOCK_N"]) * config["SPLIT_K"]


def flash_splits(ctas: int, num_sms: int, tiles: int, most: int = MAX_AUTO_SPLITS) -> int:
    """FlashAttention-2's split-KV count for ``ctas`` CTAs without splits, ``tiles``
    context tiles and ``num_sms`` SMs (two CTA slots each, as FlashAttention-2 counts).

    One split when the CTAs already fill 80 % of the slots; otherwise the wave
    efficiency of n splits is ``w / ceil(w)`` with ``w = ctas · n / slots``, counts that
    leave the tiles per split unchanged are skipped, and the fewest splits within 85 %
    of the best efficiency win.
    """
    slots = 2 * num_sms
    if ctas >= 0.8 * slots:
        return 1
    most = min(most, slots, tiles)
    efficiency = {}
    for n in range(1, most + 1):
        if n == 1 or cdiv(tiles, n) != cdiv(tiles, n - 1):
            waves = ctas * n / slots
            efficiency[n] = waves / math.ceil(waves)
    best = max(efficiency.values())
    return next(n for n, e in efficiency.items() if e >= 0.85 * best)


def decode_splits(config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int) -> int:
    """Decode attention's splits that run: at most one per context tile, kept a power of
    two (the reduce kernel's arange over splits needs one); ``auto`` sized to ``num_sms``
    (the sized SMs, margin already taken off)."""
    tiles = cdiv(shape["L"], config["BLOCK_N"])
    asked = config["NUM_SPLITS"]
    if asked == "auto":
        chosen = flash_splits(shape["B"] * shape["KV"], num_sms, tiles)
        asked = 1 << (chosen.bit_length() - 1)
    return min(asked, 1 << (tiles.bit_length() - 1))


def uniform_counts(tokens: int, experts: int, top_k: int) -> tuple[int, ...]:
    """``tokens · top_k`` (token, slot) pairs spread as evenly as possible over
    ``experts``: the first ``rem`` experts one more than the rest."""
    base, rem = divmod(tokens * top_k, experts)
    return (base + 1,) * rem + (base,) * (experts - rem)
