"""The ``decode_attention`` family: one query token per sequence against its KV cache, with
grouped-query heads (flash-decoding).

Shapes: B sequences, H query heads, KV key/value heads (H % KV == 0; a group of
G = H / KV query heads shares one KV head), head dimension D (a power of two, 16 to 256),
and context length L — the same for every sequence of the batch (a padded, rectangular
batch: the profile of a ragged batch is that of its longest sequence).
Layouts, contiguous: q [B, H, D], k and v [B, KV, L, D], output [B, H, D] in q's dtype.
Softmax scale 1/sqrt(D); accumulation in fp32.

Variants:

* ``split`` — a CTA per (sequence, KV head, split) loads its group's G query rows as one
  tile (padded to BLOCK_H = max(16, next power of two ≥ G), so K and V are read once per
  group and QK^T runs on tensor cores), walks its share of the context in BLOCK_N tiles
  with an online softmax, and writes the unnormalised partial output, the running max
  (base 2) and the running sum — D + 2 fp32 per (sequence, head, split) — to a workspace
  of B·H·NUM_SPLITS·(D+2)·4 bytes; ``decode_reduce`` then combines the splits. With
  NUM_SPLITS = 1 the CTA writes the final output: one launch, no workspace. The context is
  cut into whole BLOCK_N tiles spread evenly over the splits. A context shorter than
  NUM_SPLITS tiles runs with fewer splits (the largest power of two not above its tile
  count, as flash-decoding's split heuristics clamp), so a config stays legal as
  contexts grow and shrink during decoding. ``NUM_SPLITS = "auto"`` picks the count the
  way FlashAttention-2 does (``num_splits_heuristic`` in ``csrc/flash_attn/flash_api.cpp``,
  Dao-AILab/flash-attention): one split when the CTAs without splits nearly fill
  ``2 × num_sms`` slots, else the fewest splits whose last wave is at least 85 % as full
  as the best count's, up to 128 — sized to the SMs the kernel is *told* (the plan's
  ``persistent_ctas``: the device's, or a partition's when told ``num_sms``), then
  rounded down to a power of two for the reduce kernel. That sizing is what goes wrong
  on an SM partition when the kernel is told the whole device.
* ``materialize`` — ``decode_scores`` writes the whole scaled score matrix
  S = QK^T / sqrt(D) (B·H·L fp32, a workspace growing linearly with L) with a CTA per
  (sequence, KV head, BLOCK_N tile of the context); ``decode_softmax_pv`` then runs a CTA
  per (sequence, KV head) that reads its rows of S twice (max and sum, then
  P = softmax(S) times V). BLOCK_N is the context tile of both; NUM_SPLITS must be 1 (the
  variant has no splits; other values would be duplicate configs).

``decode_reduce`` is untuned: a CTA per (sequence, head), 4 warps, 1 stage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from ...kernels._common import (
    DTYPES,
    INT32_MAX,
    Buffer,
    Step,
    allocate,
    cdiv,
    config_problem,
    dtype_name,
    make_launch,
    next_pow2,
    run_steps,
    shape_problem,
    sm_count,
    torch_dtype,
    workspace_bytes,
)
from ...requirements import MAX_AUTO_SPLITS, decode_splits, workspace_buffers
from ...kernels.family import ConfigParams, LaunchPlan, Shape, sized_sms

SPACE: dict[str, tuple[Any, ...]] = {
    "VARIANT": ("split", "materialize"),
    "BLOCK_N": (16, 32, 64, 128),
    "NUM_SPLITS": (1, 2, 4, 8, 16, "auto"),
    "num_warps": (4, 2, 8),
    "num_stages": (2, 1, 3),
    # SMs NUM_SPLITS="auto" leaves to other streams when it sizes its split count
    # (FlashAttention-3's sm_margin); optional (family.OPTIONAL_PARAMS): 0 when not named
    "SM_MARGIN": (0, 8, 16, 24, 48),
}

LOG2E = 1.4426950408889634

REDUCE_WARPS, REDUCE_STAGES = 4, 1
#: Nominal softmax operations per score (scale, max, exp, sum).
SOFTMAX_FLOPS = 4


@triton.jit
def _load_queries(q_ptr, pid_bk, H, KV, D: tl.constexpr, BLOCK_H: tl.constexpr):
    """The query rows of one (sequence, KV head) program: the heads of its group (grouped-
    query attention), padded to BLOCK_H and masked; their indices, mask, the head-dim
    offsets and the queries."""
    b = pid_bk // KV
    kvh = pid_bk % KV
    group = H // KV
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D)
    h_mask = offs_h < group
    heads = b * H + kvh * group + offs_h
    q = tl.load(q_ptr + heads[:, None] * D + offs_d[None, :], mask=h_mask[:, None], other=0.0)
    return heads, h_mask, offs_d, q


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, ws_ptr, H, KV, L, qk_scale,
    D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    """One (sequence, KV head, split): online softmax over its context tiles."""
    pid_bk = tl.program_id(0)
    split = tl.program_id(1)
    heads, h_mask, offs_d, q = _load_queries(q_ptr, pid_bk, H, KV, D, BLOCK_H)

    n_tiles = tl.cdiv(L, BLOCK_N)
    t_lo = split * n_tiles // NUM_SPLITS
    t_hi = (split + 1) * n_tiles // NUM_SPLITS
    kv_base = pid_bk * L * D
    m_i = tl.full((BLOCK_H,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, D), dtype=tl.float32)
    for t in range(t_lo, t_hi):
        offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < L
        kv_offs = kv_base + offs_n[:, None] * D + offs_d[None, :]
        k = tl.load(k_ptr + kv_offs, mask=n_mask[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + kv_offs, mask=n_mask[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    if NUM_SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(out_ptr + heads[:, None] * D + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=h_mask[:, None])
    else:
        row = (heads * NUM_SPLITS + split) * (D + 2)
        tl.store(ws_ptr + row[:, None] + offs_d[None, :], acc, mask=h_mask[:, None])
        tl.store(ws_ptr + row + D, m_i, mask=h_mask)
        tl.store(ws_ptr + row + D + 1, l_i, mask=h_mask)


@triton.jit
def _decode_reduce_kernel(ws_ptr, out_ptr, D: tl.constexpr, NUM_SPLITS: tl.constexpr):
    """One (sequence, head): rescale the splits' partials to a common max and normalise."""
    head = tl.program_id(0)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, D)
    row = (head * NUM_SPLITS + offs_s) * (D + 2)
    m = tl.load(ws_ptr + row + D)
    l = tl.load(ws_ptr + row + D + 1)
    acc = tl.load(ws_ptr + row[:, None] + offs_d[None, :])
    w = tl.exp2(m - tl.max(m, 0))
    out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(out_ptr + head * D + offs_d, out.to(out_ptr.dtype.element_ty))


@triton.jit
def _decode_scores_kernel(
    q_ptr, k_ptr, s_ptr, H, KV, L, sm_scale,
    D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """S[b, h, tile] = q · k^T * sm_scale for one (sequence, KV head, context tile)."""
    pid_bk = tl.program_id(0)
    t = tl.program_id(1)
    heads, h_mask, offs_d, q = _load_queries(q_ptr, pid_bk, H, KV, D, BLOCK_H)
    offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < L
    k = tl.load(k_ptr + pid_bk * L * D + offs_n[:, None] * D + offs_d[None, :], mask=n_mask[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k)) * sm_scale
    tl.store(s_ptr + heads[:, None] * L + offs_n[None, :], s, mask=h_mask[:, None] & n_mask[None, :])


@triton.jit
def _decode_softmax_pv_kernel(
    s_ptr, v_ptr, out_ptr, H, KV, L,
    D: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """out = softmax(S) · V for one (sequence, KV head): a pass for max and sum, a pass for P·V."""
    pid_bk = tl.program_id(0)
    b = pid_bk // KV
    kvh = pid_bk % KV
    group = H // KV
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D)
    h_mask = offs_h < group
    heads = b * H + kvh * group + offs_h
    s_rows = s_ptr + heads[:, None] * L
    m_i = tl.full((BLOCK_H,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for start in range(0, L, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        s = tl.load(s_rows + offs_n[None, :], mask=h_mask[:, None] & (offs_n[None, :] < L), other=float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), 1)
        m_i = m_new
    inv_l = 1.0 / tl.maximum(l_i, 1.0e-30)  # padding rows have l = 0 and p = 0
    acc = tl.zeros((BLOCK_H, D), dtype=tl.float32)
    for start in range(0, L, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_mask = offs_n < L
        s = tl.load(s_rows + offs_n[None, :], mask=h_mask[:, None] & n_mask[None, :], other=float("-inf"))
        p = tl.exp(s - m_i[:, None]) * inv_l[:, None]
        v = tl.load(v_ptr + pid_bk * L * D + offs_n[:, None] * D + offs_d[None, :], mask=n_mask[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
    tl.store(out_ptr + heads[:, None] * D + offs_d[None, :], acc.to(out_ptr.dtype.element_ty), mask=h_mask[:, None])


class DecodeAttentionFamily:
    """Flash-decoding over a KV cache — see the module docstring for variants and workspace.

    Args:
        dtype: the element type ``plan`` compiles for (``"bf16"`` or ``"fp16"``); ``run``
            follows its inputs' dtype.
    """

    name = "decode_attention"
    shape_keys = ("B", "H", "KV", "D", "L")
    bucket_key = ("B", "L")  # split-KV pays at small batches and long contexts
    space = SPACE

    def __init__(self, *, dtype: str = "bf16") -> None:
        self.dtype = dtype_name(dtype)

    def __repr__(self) -> str:
        return f"DecodeAttentionFamily(dtype={self.dtype!r})"

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        problem = shape_problem(shape, self.shape_keys) or config_problem(config, self.space)
        if problem:
            return problem
        B, H, KV, D, L = (shape[k] for k in self.shape_keys)
        if H % KV:
            return f"H={H} query heads do not split into KV={KV} groups (H % KV must be 0)"
        if D & (D - 1) or not 16 <= D <= 256:
            return f"D={D} must be a power of two from 16 to 256"
        splits = config["NUM_SPLITS"]
        if config.get("SM_MARGIN", 0) and splits != "auto":
            return f"SM_MARGIN sizes NUM_SPLITS='auto'; with NUM_SPLITS={splits} it changes nothing (use 0)"
        if config["VARIANT"] == "materialize" and splits != 1:
            return f"NUM_SPLITS={splits}: the materialize variant has no splits (NUM_SPLITS must be 1)"
        most = MAX_AUTO_SPLITS if splits == "auto" else splits
        largest = max(B * KV * L * D, B * H * L, B * H * most * (D + 2))
        if largest > INT32_MAX:
            return f"a tensor of {largest} elements needs 64-bit indexing; the kernels index in int32"
        return None

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan:
        """The launches; ``persistent_ctas`` is the SM count ``NUM_SPLITS="auto"`` sizes to."""
        steps = self._steps(config, shape, self.dtype, persistent_ctas)
        workspace = workspace_bytes(self._buffers(config, shape, self.dtype, persistent_ctas))
        return LaunchPlan(tuple(s.launch for s in steps), float(workspace))

    @staticmethod
    def _splits(config: ConfigParams, shape: Shape, num_sms: int) -> int:
        """Splits that run (``tuner.families.formulas.decode_splits``, the one rule)."""
        return decode_splits(config, shape, num_sms)

    def _buffers(self, config: ConfigParams, shape: Shape, dtype: str, num_sms: int) -> dict[str, Buffer]:
        """The output and the workspace ``tuner.requirements`` says the config needs."""
        buffers = {"out": Buffer(shape["B"] * shape["H"] * shape["D"], dtype, workspace=False)}
        for name, numel, kind in workspace_buffers(self.name, {"dtype": dtype}, config, shape, num_sms):
            buffers[name] = Buffer(numel, kind)
        return buffers

    def _steps(self, config: ConfigParams, shape: Shape, dtype: str, num_sms: int) -> list[Step]:
        B, H, KV, D, L = (shape[k] for k in self.shape_keys)
        e = DTYPES[dtype]
        block_n, splits = config["BLOCK_N"], self._splits(config, shape, num_sms)
        block_h = max(16, next_pow2(H // KV))
        warps, stages = config["num_warps"], config["num_stages"]
        q_bytes = out_bytes = e * B * H * D
        kv_bytes = 2 * e * B * KV * L * D
        qk_flops = 2 * B * H * L * D
        softmax_flops = SOFTMAX_FLOPS * B * H * L
        tensors = {"q_ptr": "q", "k_ptr": "k", "v_ptr": "v", "out_ptr": "out", "H": H, "KV": KV, "L": L}
        types = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
                 "H": "i32", "KV": "i32", "L": "i32"}
        scale = 1.0 / math.sqrt(D)

        if config["VARIANT"] == "materialize":
            s_bytes = 4 * B * H * L
            return [
                make_launch(
                    "decode_scores", _decode_scores_kernel,
                    {**types, "s_ptr": "*fp32", "sm_scale": "fp32"},
                    {"D": D, "BLOCK_H": block_h, "BLOCK_N": block_n},
                    num_warps=warps, num_stages=stages, grid_dims=(B * KV, cdiv(L, block_n)),
                    persistent=False, flops=qk_flops + B * H * L,
                    dram_bytes=q_bytes + kv_bytes / 2 + s_bytes,
                    bindings={**tensors, "s_ptr": "scores", "sm_scale": scale}, cost="attention",
                ),
                make_launch(
                    "decode_softmax_pv", _decode_softmax_pv_kernel,
                    {**types, "s_ptr": "*fp32"},
                    {"D": D, "BLOCK_H": block_h, "BLOCK_N": block_n},
                    num_warps=warps, num_stages=stages, grid_dims=(B * KV,),
                    persistent=False, flops=qk_flops + softmax_flops,
                    dram_bytes=s_bytes + kv_bytes / 2 + out_bytes,
                    bindings={**tensors, "s_ptr": "scores"}, cost="attention",
                ),
            ]

        ws_bytes = 4 * B * H * splits * (D + 2)
        steps = [make_launch(
            "decode_split", _decode_split_kernel,
            {**types, "ws_ptr": "*fp32" if splits > 1 else f"*{dtype}", "qk_scale": "fp32"},
            {"D": D, "BLOCK_H": block_h, "BLOCK_N": block_n, "NUM_SPLITS": splits},
            num_warps=warps, num_stages=stages, grid_dims=(B * KV, splits),
            persistent=False, flops=2 * qk_flops + softmax_flops,
            dram_bytes=q_bytes + kv_bytes + (ws_bytes if splits > 1 else out_bytes),
            bindings={**tensors, "ws_ptr": "partials" if splits > 1 else "out", "qk_scale": scale * LOG2E},
            cost="attention",
        )]
        if splits > 1:
            steps.append(make_launch(
                "decode_reduce", _decode_reduce_kernel,
                {"ws_ptr": "*fp32", "out_ptr": f"*{dtype}"},
                {"D": D, "NUM_SPLITS": splits},
                num_warps=REDUCE_WARPS, num_stages=REDUCE_STAGES, grid_dims=(B * H,),
                persistent=False, flops=3 * B * H * splits * D,
                dram_bytes=ws_bytes + out_bytes,
                bindings={"ws_ptr": "partials", "out_ptr": "out"}, cost="memory",
            ))
        return steps

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any = None, device: str = "cpu") -> dict[str, Any]:
        """q [B, H, D], k and v [B, KV, L, D], standard normal."""
        import torch

        dt = torch_dtype(dtype_name(dtype or self.dtype))
        B, H, KV, D, L = (shape[k] for k in self.shape_keys)
        gen = torch.Generator().manual_seed(seed)
        return {
            "q": torch.randn(B, H, D, generator=gen).to(dt).to(device),
            "k": torch.randn(B, KV, L, D, generator=gen).to(dt).to(device),
            "v": torch.randn(B, KV, L, D, generator=gen).to(dt).to(device),
        }

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        import torch

        q, k, v = inputs["q"].float(), inputs["k"].float(), inputs["v"].float()
        group = shape["H"] // shape["KV"]
        k = k.repeat_interleave(group, dim=1)  # [B, H, L, D]
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("bhd,bhld->bhl", q, k) / math.sqrt(shape["D"])
        out = torch.einsum("bhl,bhld->bhd", torch.softmax(scores, dim=-1), v)
        return out.to(inputs["q"].dtype)

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape) -> Any:
        """Launch the config's kernels on ``inputs``; returns the output [B, H, D]."""
        q = inputs["q"]
        dtype = dtype_name(q.dtype)
        num_sms = sized_sms(config, sm_count(q.device))
        tensors = {**allocate(self._buffers(config, shape, dtype, num_sms), q.device),
                   **{k: v.contiguous() for k, v in inputs.items()}}
        run_steps(self._steps(config, shape, dtype, num_sms), tensors)
        return tensors["out"].view(shape["B"], shape["H"], shape["D"])
