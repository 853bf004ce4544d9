"""The ``fused_moe`` family: the expert GEMMs of a sparse mixture-of-experts MLP, grouped
as vLLM's and SGLang's Triton ``fused_moe`` runs them.

Each of ``M`` tokens is routed to ``top_k`` distinct experts of ``experts`` (E) with a
weight each. The block computes, per token ``m``::

    out[m] = sum_j  w[m, j] · ( silu(x[m] · W1g[e]ᵀ) * (x[m] · W1u[e]ᵀ) ) · W2[e]ᵀ,   e = ids[m, j]

with ``x`` [M, K] (K the hidden size), ``W1`` [E, 2N, K] (the N gate rows, then the N
up rows; N the intermediate size per expert) and ``W2`` [E, K, N] — vLLM's weight layout.

How it runs (vLLM's ``fused_experts``, mirrored in structure; the kernels are this
project's own):

1. **align** (``moe_align_block_size``, here in torch on the host): the ``M·top_k``
   (token, slot) pairs are sorted by expert and each expert's run is padded up to a
   multiple of ``BLOCK_SIZE_M`` with a sentinel id (``M·top_k``). Expert ``e`` with
   ``m_e`` pairs takes ``ceil(m_e / BLOCK_SIZE_M)`` blocks (none when ``m_e = 0``); every
   block has one expert (``expert_ids``).
2. **gate_up** (``fused_moe_gate_up``): one CTA per (M block, N tile); it gathers its
   block's token rows of ``x``, multiplies them by its expert's gate and up tiles and
   applies SiLU-and-mul in registers (vLLM runs ``silu_and_mul`` as a separate op; here
   it is fused, as ``matmul``'s ``gated_silu`` epilogue is), writing the intermediate
   [M·top_k, N] at each pair's row.
3. **down** (``fused_moe_down``): the same grouped GEMM over the intermediate (N → K)
   with ``MUL_ROUTED_WEIGHT``: each row is scaled by its routing weight, written to
   [M·top_k, K] (or straight to the output when ``top_k = 1``).
4. **moe_sum** (only when ``top_k > 1``): the sum over each token's ``top_k`` rows into
   the output [M, K] (vLLM's ``moe_sum``); an untuned elementwise kernel.

What a config costs therefore depends on the routing, through the per-expert pair counts
``m_e`` (``sum_e m_e = M·top_k``): the grouped GEMMs launch ``padded_blocks × N tiles``
CTAs, do the MMA work of every padded row, and read the weights of the experts that got
a pair. ``plan`` takes the counts (``expert_counts``, one per expert); without them it
assumes the pairs spread evenly (:func:`uniform_counts`). The analytic model prices the
two grouped launches from :class:`GroupedGemmLaunch`'s per-expert blocks
(``tuner.profile.model``).

Decisions a caller relies on:

* The launch grid is the exact ``padded_blocks × cdiv(N_out, BLOCK_SIZE_N)``: the host
  knows the counts after the align step. (vLLM launches an upper bound and lets the
  surplus CTAs exit at once, to avoid a device-to-host copy.)
* Workspace: the intermediate [M·top_k, N] and, when ``top_k > 1``, the down output
  [M·top_k, K] in the input dtype, and the align step's arrays (int32) at vLLM's bound
  ``M·top_k + E·(BLOCK_SIZE_M - 1)`` rows — so the workspace does not depend on the
  routing.
* ``BLOCK_SIZE_M × BLOCK_SIZE_N`` above 64 × 256 is illegal: the gated GEMM keeps two
  fp32 accumulators of that size, more than half the 256 KiB register file of an SM.
* Tensors whose element count reaches 2**31 are illegal: the kernels index in int32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    run_steps,
    shape_problem,
    torch_dtype,
)
from ...errors import KernelError
from ...requirements import ELEMENT_BYTES, uniform_counts, workspace_buffers
from ...kernels.family import ConfigParams, KernelLaunch, LaunchPlan, Shape

#: The moe_sum launch's fixed block, warps and stages (untuned, elementwise).
SUM_BLOCK, SUM_WARPS, SUM_STAGES = 1024, 4, 1

#: vLLM's parameter names. The first values are vLLM's default config for a batch of
#: more tokens than experts (``get_default_config``: 64 × 64 × 32, GROUP_SIZE_M 8); the
#: rest span what vLLM's tuned per-GPU tables (``configs/E=..,N=..,device_name=...json``)
#: pick, from 16-row blocks for decode to 128-row blocks for prefill.
SPACE: dict[str, tuple[Any, ...]] = {
    "BLOCK_SIZE_M": (64, 16, 32, 128),
    "BLOCK_SIZE_N": (64, 32, 128, 256),
    "BLOCK_SIZE_K": (32, 64, 128),
    "GROUP_SIZE_M": (8, 1, 16),
    "num_warps": (4, 8),
    "num_stages": (3, 2, 4),
}

#: Largest BLOCK_SIZE_M × BLOCK_SIZE_N: two fp32 accumulators of it fill 128 KiB of registers.
MAX_TILE = 64 * 256


def padded_blocks(counts: Sequence[int], block_m: int) -> int:
    """M blocks the align step makes: ``sum_e ceil(m_e / block_m)`` (an expert without
    pairs takes none)."""
    return sum(-(-int(c) // block_m) for c in counts)


@dataclass(frozen=True)
class GroupedGemmLaunch(KernelLaunch):
    """A grouped (per-expert) GEMM launch: one B matrix per expert, M rows in blocks.

    Attributes (besides :class:`KernelLaunch`'s; none is part of the compile key):
        expert_blocks: ``BLOCK_SIZE_M`` blocks per expert, in expert order (0: untouched).
        rows: valid rows (the (token, slot) pairs); the blocks' other rows are padding,
            which costs MMA work but loads and stores nothing.
        gemm_n: output columns per row (N for gate_up, K for down).
        gemm_k: the reduction length (K for gate_up, N for down).
        b_operands: B tiles per K step (2 for gate_up: gate and up; 1 for down).
    """

    expert_blocks: tuple[int, ...] = ()
    rows: int = 0
    gemm_n: int = 0
    gemm_k: int = 0
    b_operands: int = 1

    @property
    def blocks(self) -> int:
        return sum(self.expert_blocks)

    @property
    def experts_touched(self) -> int:
        return sum(1 for b in self.expert_blocks if b > 0)


@triton.jit
def _fused_moe_kernel(
    a_ptr, b_ptr, c_ptr, topk_weights_ptr, sorted_token_ids_ptr, expert_ids_ptr,
    N, K, EM, num_valid_tokens,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, GATED: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, top_k: tl.constexpr,
):
    """One (M block, N tile) of a grouped GEMM over the expert-sorted rows.

    Row ``t`` of the sorted order (``sorted_token_ids``, ``EM`` of them, padded per
    expert) is a (token, slot) pair; ids ``>= num_valid_tokens`` are padding. A row reads
    A row ``t // top_k`` ([·, K]) and writes C row ``t`` ([·, N]). B is [E, NB, K] with
    NB = 2N when GATED (gate rows, then up rows: C = silu(gate) * up), else N.
    """
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(EM, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    width = GROUP_SIZE_M * num_pid_n
    first_m = (pid // width) * GROUP_SIZE_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % width) % group_size
    pid_n = (pid % width) // group_size

    offs_token = tl.load(sorted_token_ids_ptr + pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M))
    token_mask = offs_token < num_valid_tokens
    a_rows = tl.where(token_mask, offs_token // top_k, 0)  # padding loads nothing (masked)
    expert = tl.load(expert_ids_ptr + pid_m)
    nb = N
    if GATED:
        nb = 2 * N

    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    cols = offs_n % N  # loads stay in bounds; the store masks the wrapped columns
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + a_rows[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + expert * nb * K + cols[None, :] * K + offs_k[:, None]
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    if GATED:
        acc_up = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - kt * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        if GATED:
            b_up = tl.load(b_ptrs + N * K, mask=offs_k[:, None] < k_left, other=0.0)
            acc_up = tl.dot(a, b_up, acc_up)
        a_ptrs += BLOCK_SIZE_K
        b_ptrs += BLOCK_SIZE_K

    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    if MUL_ROUTED_WEIGHT:
        weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0.0)
        acc = acc * weight[:, None]
    c_ptrs = c_ptr + offs_token[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=token_mask[:, None] & (offs_n[None, :] < N))


@triton.jit
def _moe_sum_kernel(src_ptr, out_ptr, M, K, top_k: tl.constexpr, BLOCK: tl.constexpr):
    """out [M, K] = the sum of src [M, top_k, K] over its middle axis, in fp32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * K
    row = offs // K
    col = offs % K
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in tl.static_range(top_k):
        acc += tl.load(src_ptr + (row * top_k + j) * K + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def moe_align_block_size(topk_ids: Any, block_m: int, experts: int) -> tuple[Any, Any, tuple[int, ...]]:
    """The align step, in torch: ``(sorted_token_ids, expert_ids, counts)``.

    ``sorted_token_ids`` (int32, ``padded_blocks · block_m``) lists the flat (token,
    slot) indices of ``topk_ids`` [M, top_k] grouped by expert, each expert's run padded
    to whole blocks with the sentinel ``M·top_k``; ``expert_ids`` (int32) names each
    block's expert; ``counts`` are the pairs per expert.
    """
    import torch

    flat = topk_ids.reshape(-1).to(torch.int64).cpu()
    numel = flat.numel()
    counts = tuple(int(c) for c in torch.bincount(flat, minlength=experts).tolist())
    if len(counts) > experts:
        raise KernelError(f"topk_ids names expert {len(counts) - 1} but there are {experts}.")
    order = torch.argsort(flat, stable=True)
    blocks = [cdiv(c, block_m) for c in counts]
    sorted_ids = torch.full((sum(blocks) * block_m,), numel, dtype=torch.int32)
    expert_ids = torch.empty(sum(blocks), dtype=torch.int32)
    block = start = 0
    for e, (count, n_blocks) in enumerate(zip(counts, blocks)):
        sorted_ids[block * block_m: block * block_m + count] = order[start:start + count].to(torch.int32)
        expert_ids[block: block + n_blocks] = e
        block += n_blocks
        start += count
    device = topk_ids.device
    return sorted_ids.to(device), expert_ids.to(device), counts


class FusedMoeFamily:
    """The grouped expert GEMMs of a top-k MoE MLP — see the module docstring.

    Args:
        experts: E, the experts of the layer (on this GPU).
        top_k: experts per token (distinct), at most ``experts``.
        dtype: the element type ``plan`` compiles for (``"bf16"`` or ``"fp16"``); ``run``
            follows its inputs' dtype.
    """

    name = "fused_moe"
    shape_keys = ("M", "N", "K")   # tokens, intermediate size per expert, hidden size
    bucket_key = ("M",)            # vLLM's tuned tables are keyed by the token count
    space = SPACE
    #: Batch variables ``plan`` reads besides the shape (``tuner.profile.modeled``).
    batch_variables = ("expert_counts",)

    def __init__(self, experts: int = 8, top_k: int = 2, *, dtype: str = "bf16") -> None:
        for label, value in (("experts", experts), ("top_k", top_k)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise KernelError(f"{label} must be a positive integer but got {value!r}.")
        if top_k > experts:
            raise KernelError(f"top_k={top_k} needs at least {top_k} experts but there are {experts}.")
        self.experts = experts
        self.top_k = top_k
        self.dtype = dtype_name(dtype)

    def __repr__(self) -> str:
        return f"FusedMoeFamily(experts={self.experts}, top_k={self.top_k}, dtype={self.dtype!r})"

    # --- legality ------------------------------------------------------------------------

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        problem = shape_problem(shape, self.shape_keys) or config_problem(config, self.space)
        if problem:
            return problem
        M, N, K = shape["M"], shape["N"], shape["K"]
        bm, bn = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]
        if bm * bn > MAX_TILE:
            return (f"BLOCK_SIZE_M={bm} x BLOCK_SIZE_N={bn} keeps two fp32 accumulators of "
                    f"{bm * bn} elements (gate and up): more than half an SM's register file")
        pairs = M * self.top_k
        largest = max(self.experts * 2 * N * K, M * K, pairs * max(N, K))
        if largest > INT32_MAX:
            return f"a tensor of {largest} elements needs 64-bit indexing; the kernels index in int32"
        return None

    def counts(self, shape: Shape, expert_counts: Sequence[int] | None = None) -> tuple[int, ...]:
        """The per-expert pair counts a plan uses: ``expert_counts`` checked, or the even
        spread of ``M · top_k`` pairs.

        Raises:
            KernelError: counts of the wrong length, negative, or not summing to M · top_k.
        """
        pairs = shape["M"] * self.top_k
        if expert_counts is None:
            return uniform_counts(shape["M"], self.experts, self.top_k)
        counts = tuple(int(c) for c in expert_counts)
        if len(counts) != self.experts:
            raise KernelError(f"expert_counts has {len(counts)} entries but the family has {self.experts} experts.")
        if any(c < 0 for c in counts):
            raise KernelError(f"expert_counts must not be negative but got {counts}.")
        if sum(counts) != pairs:
            raise KernelError(f"expert_counts sum to {sum(counts)} but M={shape['M']} tokens x "
                              f"top_k={self.top_k} make {pairs} (token, expert) pairs.")
        return counts

    # --- plans -----------------------------------------------------------------------------

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int,
             expert_counts: Sequence[int] | None = None) -> LaunchPlan:
        """Its launches at ``shape`` for the routing ``expert_counts`` (pairs per expert;
        None: :func:`uniform_counts`). ``persistent_ctas`` is unused: no config is persistent."""
        counts = self.counts(shape, expert_counts)
        steps = self._steps(config, shape, counts, self.dtype)
        return LaunchPlan(tuple(s.launch for s in steps), float(self._workspace(config, shape, self.dtype)))

    def _options(self, dtype: str) -> dict[str, Any]:
        return {"experts": self.experts, "top_k": self.top_k, "dtype": dtype}

    def _buffers(self, config: ConfigParams, shape: Shape, dtype: str) -> dict[str, Buffer]:
        """The output and the intermediates ``tuner.requirements`` counts as workspace (the
        align step's int32 arrays, also counted there, are made by :func:`align`)."""
        buffers = {"out": Buffer(shape["M"] * shape["K"], dtype, workspace=False)}
        for name, numel, kind in workspace_buffers(self.name, self._options(dtype), config, shape, 0):
            if kind != "i32":
                buffers[name] = Buffer(numel, kind)
        return buffers

    def _workspace(self, config: ConfigParams, shape: Shape, dtype: str) -> int:
        """The intermediates, and the align step's int32 arrays at vLLM's bound
        (``tuner.requirements``, the one rule)."""
        return sum(numel * ELEMENT_BYTES[kind]
                   for _, numel, kind in workspace_buffers(self.name, self._options(dtype), config, shape, 0))

    def _steps(self, config: ConfigParams, shape: Shape, counts: tuple[int, ...], dtype: str) -> list[Step]:
        M, N, K = shape["M"], shape["N"], shape["K"]
        e = DTYPES[dtype]
        top_k = self.top_k
        pairs = M * top_k
        bm = config["BLOCK_SIZE_M"]
        expert_blocks = tuple(cdiv(c, bm) for c in counts)
        blocks = sum(expert_blocks)
        touched = sum(1 for c in counts if c > 0)
        em = blocks * bm
        routing_bytes = 4 * (em + blocks)  # sorted_token_ids and expert_ids, read at least once
        down_out = "cache3" if top_k > 1 else "out"

        def gemm(name: str, a: str, b: str, c: str, n_out: int, k_red: int, gated: bool, weighted: bool,
                 top: int, flops: float, dram: float) -> Step:
            step = make_launch(
                name, _fused_moe_kernel,
                {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": f"*{dtype}", "topk_weights_ptr": "*fp32",
                 "sorted_token_ids_ptr": "*i32", "expert_ids_ptr": "*i32",
                 "N": "i32", "K": "i32", "EM": "i32", "num_valid_tokens": "i32"},
                {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": config["BLOCK_SIZE_N"], "BLOCK_SIZE_K": config["BLOCK_SIZE_K"],
                 "GROUP_SIZE_M": config["GROUP_SIZE_M"], "GATED": gated, "MUL_ROUTED_WEIGHT": weighted,
                 "top_k": top},
                num_warps=config["num_warps"], num_stages=config["num_stages"],
                grid_dims=(blocks * cdiv(n_out, config["BLOCK_SIZE_N"]),), persistent=False,
                flops=flops, dram_bytes=dram,
                bindings={"a_ptr": a, "b_ptr": b, "c_ptr": c, "topk_weights_ptr": "topk_weights",
                          "sorted_token_ids_ptr": "sorted_token_ids", "expert_ids_ptr": "expert_ids",
                          "N": n_out, "K": k_red, "EM": em, "num_valid_tokens": pairs},
                cost="grouped_gemm",
            )
            fields = {f.name: getattr(step.launch, f.name) for f in dataclasses.fields(KernelLaunch)}
            launch = GroupedGemmLaunch(**fields, expert_blocks=expert_blocks, rows=pairs, gemm_n=n_out,
                                       gemm_k=k_red, b_operands=2 if gated else 1)
            return Step(launch, step.grid_dims, step.args)

        steps = [
            gemm("fused_moe_gate_up", "a", "w1", "cache1", N, K, True, False, top_k,
                 flops=2 * pairs * 2 * N * K + 5 * pairs * N,
                 dram=e * (M * K + touched * 2 * N * K + pairs * N) + routing_bytes),
            gemm("fused_moe_down", "cache1", "w2", down_out, K, N, False, True, 1,
                 flops=2 * pairs * K * N + pairs * K,
                 dram=e * (pairs * N + touched * K * N + pairs * K) + routing_bytes + 4 * pairs),
        ]
        if top_k > 1:
            steps.append(make_launch(
                "moe_sum", _moe_sum_kernel,
                {"src_ptr": f"*{dtype}", "out_ptr": f"*{dtype}", "M": "i32", "K": "i32"},
                {"top_k": top_k, "BLOCK": SUM_BLOCK},
                num_warps=SUM_WARPS, num_stages=SUM_STAGES, grid_dims=(cdiv(M * K, SUM_BLOCK),), persistent=False,
                flops=(top_k - 1) * M * K, dram_bytes=e * (pairs * K + M * K),
                bindings={"src_ptr": "cache3", "out_ptr": "out", "M": M, "K": K}, cost="memory",
            ))
        return steps

    # --- running ---------------------------------------------------------------------------

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any = None, device: str = "cpu",
                    expert_counts: Sequence[int] | None = None) -> dict[str, Any]:
        """x [M, K], W1 [E, 2N, K], W2 [E, K, N] scaled so every stage is of order one;
        ``topk_ids`` [M, top_k] (distinct experts per token, at random) and
        ``topk_weights`` [M, top_k] (fp32, a softmax over the chosen experts' logits).

        With ``expert_counts`` the routing has exactly those pairs per expert (dealt
        round-robin over tokens, so a token's experts stay distinct when each count is at
        most M).
        """
        import torch

        dt = torch_dtype(dtype_name(dtype or self.dtype))
        M, N, K = shape["M"], shape["N"], shape["K"]
        E, top_k = self.experts, self.top_k
        gen = torch.Generator().manual_seed(seed)
        if expert_counts is None:
            ids = torch.rand(M, E, generator=gen).argsort(dim=1)[:, :top_k]
        else:
            counts = self.counts(shape, expert_counts)
            flat = torch.tensor([e for e, c in enumerate(counts) for _ in range(c)], dtype=torch.int64)
            # the i-th pair of the expert-sorted list goes to token i mod M, slot i div M
            ids = flat.reshape(top_k, M).t().contiguous()
            if any(len(set(row)) < top_k for row in ids.tolist()):
                raise KernelError(f"expert_counts {counts} cannot give every token {top_k} distinct experts.")
        weights = torch.softmax(torch.randn(M, top_k, generator=gen), dim=1)
        return {
            "a": torch.randn(M, K, generator=gen).to(dt).to(device),
            "w1": (torch.randn(E, 2 * N, K, generator=gen) / K**0.5).to(dt).to(device),
            "w2": (torch.randn(E, K, N, generator=gen) / N**0.5).to(dt).to(device),
            "topk_ids": ids.to(torch.int32).to(device),
            "topk_weights": weights.to(torch.float32).to(device),
        }

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        """The block in fp32, token by token, rounding where the kernels store (the
        intermediate, and each expert's weighted output when ``top_k > 1``)."""
        import torch

        x, w1, w2 = inputs["a"], inputs["w1"], inputs["w2"]
        ids, weights = inputs["topk_ids"].long(), inputs["topk_weights"].float()
        N = shape["N"]
        out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
        for j in range(self.top_k):
            e = ids[:, j]
            h = torch.einsum("mk,mnk->mn", x.float(), w1[e].float())
            act = (torch.nn.functional.silu(h[:, :N]) * h[:, N:]).to(x.dtype).float()
            y = torch.einsum("mn,mkn->mk", act, w2[e].float()) * weights[:, j:j + 1]
            out += y.to(x.dtype).float() if self.top_k > 1 else y
        return out.to(x.dtype)

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape, *,
            persistent_ctas: int | None = None) -> Any:
        """Align, then launch the config's kernels on ``inputs``; returns out [M, K].

        Inputs made for more tokens than ``shape``'s M serve too: the first M tokens'
        routing is used (a replay makes an operator's inputs once, at its largest shape)."""
        a = inputs["a"]
        dtype = dtype_name(a.dtype)
        sorted_ids, expert_ids, counts = moe_align_block_size(inputs["topk_ids"][: shape["M"]],
                                                              config["BLOCK_SIZE_M"], self.experts)
        counts = self.counts(shape, counts)
        tensors = {**allocate(self._buffers(config, shape, dtype), a.device),
                   **{k: v.contiguous() for k, v in inputs.items() if k != "topk_ids"},
                   "sorted_token_ids": sorted_ids, "expert_ids": expert_ids}
        tensors["topk_weights"] = tensors["topk_weights"].float().contiguous()
        run_steps(self._steps(config, shape, counts, dtype), tensors)
        return tensors["out"].view(shape["M"], shape["K"])
