"""The ``matmul`` family: C[M, N] = epilogue(A[M, K] · B[K, N]) with fp32 accumulation.

Epilogues: ``none``, ``bias`` (adds a [N] vector), ``silu``, ``gelu`` (the exact, erf
form, as ``torch.nn.functional.gelu``) and ``gated_silu`` — the gate and up projections of
a gated MLP in one GEMM: B is [K, 2N], the N gate columns then the N up columns, and
C = silu(A·B_gate) * (A·B_up). Inputs and output are bf16 or fp16, row-major and
contiguous; accumulation is fp32.

What a config launches (``NW`` is the width of B: N, or 2N for ``gated_silu``):

=============  ========  ======================================================
FUSE_EPILOGUE  SPLIT_K   launches
=============  ========  ======================================================
True           1         ``matmul`` (epilogue applied in registers)
True           > 1       ``matmul_partial`` → ``splitk_reduce`` (sums, applies)
False          1         ``matmul`` (pre-activation) → ``epilogue``
False          > 1       ``matmul_partial`` → ``splitk_reduce`` → ``epilogue``
=============  ========  ======================================================

Workspace: split-K partials are fp32, [SPLIT_K, M, NW] (4·SPLIT_K·M·NW bytes); the unfused
intermediate holds the pre-activation [M, NW] in the input dtype, as an unfused framework
would (2·M·NW bytes). Both are live together in the last row of the table.

Decisions a caller relies on:

* PERSISTENT and SPLIT_K combine: the work items are (K slice, tile) pairs, split-major,
  and a persistent grid of ``min(persistent_ctas, items)`` CTAs strides over them (a CTA
  per item when not persistent). Both forms are one binary: the kernel always loops over
  ``range(pid, items, num_programs)``, once per CTA when the grid covers every item, so a
  persistent config compiles to the same code as its non-persistent twin.
* K slices are whole BLOCK_K tiles spread evenly; a config is illegal when a slice would
  be empty (SPLIT_K > ceil(K / BLOCK_K)). A K smaller than BLOCK_K is legal (masked).
* FUSE_EPILOGUE=False with epilogue ``none`` is illegal: it would be the fused config
  again, a duplicate point for the search.
* Tensors whose element count reaches 2**31 are illegal: the kernels index in int32.
* The ``splitk_reduce`` and ``epilogue`` launches are untuned elementwise kernels: a flat
  1024-element block, 4 warps, 1 stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import triton
import triton.language as tl

from ...kernels._common import (
    DTYPES,
    INT32_MAX,
    Buffer,
    Step,
    allocate,
    cdiv,
    check_choice,
    config_problem,
    dtype_name,
    make_launch,
    run_steps,
    shape_problem,
    sm_count,
    torch_dtype,
    workspace_bytes,
)
from ...requirements import matmul_items, workspace_buffers
from ...kernels.family import ConfigParams, LaunchPlan, Shape, sized_sms

Epilogue = Literal["none", "bias", "silu", "gelu", "gated_silu"]
EPILOGUES: tuple[str, ...] = ("none", "bias", "silu", "gelu", "gated_silu")

#: Nominal floating-point operations per output element of each epilogue.
EPILOGUE_FLOPS: dict[str, int] = {"none": 0, "bias": 1, "silu": 4, "gelu": 8, "gated_silu": 5}

#: The elementwise launches' fixed block, warps and stages.
EW_BLOCK, EW_WARPS, EW_STAGES = 1024, 4, 1

SPACE: dict[str, tuple[Any, ...]] = {
    "BLOCK_M": (16, 32, 64, 128),
    "BLOCK_N": (32, 64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "GROUP_M": (8, 1),
    "num_warps": (4, 8, 2),
    "num_stages": (3, 2, 4, 5),
    "SPLIT_K": (1, 2, 4, 8),
    "PERSISTENT": (False, True),
    # SMs a persistent grid leaves free (sized to the SMs it is told less these): 16 is
    # NCCL's channel count for NVLS on sm_90, 20-24 what DeepSeek-V3 and DeepEP give
    # communication beside the GEMMs, 48 about a 35% partition of another stream (NanoFlow's
    # decode attention beside the GEMMs); optional (family.OPTIONAL_PARAMS): 0 when not named
    "SM_MARGIN": (0, 8, 16, 24, 48),
    "FUSE_EPILOGUE": (True, False),
}


@triton.jit
def _epilogue(x, other, EPILOGUE: tl.constexpr):
    """The epilogue on fp32 pre-activations; ``other`` is the bias (broadcastable) for
    ``bias``, the up projection for ``gated_silu``, unused otherwise."""
    if EPILOGUE == "bias":
        x = x + other
    elif EPILOGUE == "silu":
        x = x * tl.sigmoid(x)
    elif EPILOGUE == "gelu":
        x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif EPILOGUE == "gated_silu":
        x = x * tl.sigmoid(x) * other
    return x


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, EPILOGUE: tl.constexpr, APPLY_EPILOGUE: tl.constexpr,
):
    """Tiles of A·B over (K slice, tile) work items. With APPLY_EPILOGUE the tile goes
    through the epilogue into C [M, N]; otherwise the raw accumulators (both halves when
    gated) go to C [SPLIT_K, M, NW] at the work item's K slice."""
    GATED: tl.constexpr = EPILOGUE == "gated_silu"
    ldb = N
    if GATED:
        ldb = 2 * N
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for work in range(tl.program_id(0), tiles * SPLIT_K, tl.num_programs(0)):
        split = work // tiles
        tile = work % tiles
        width = GROUP_M * num_pid_n
        first_m = (tile // width) * GROUP_M
        group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % group_size
        pid_n = (tile % width) // group_size

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        rows = offs_m % M  # loads stay in bounds; the store masks the wrapped rows
        cols = offs_n % N
        k_lo = split * k_tiles // SPLIT_K
        k_hi = (split + 1) * k_tiles // SPLIT_K
        a_ptrs = a_ptr + rows[:, None] * K + (k_lo * BLOCK_K + offs_k)[None, :]
        b_ptrs = b_ptr + (k_lo * BLOCK_K + offs_k)[:, None] * ldb + cols[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if GATED:
            acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_lo, k_hi):
            k_left = K - kt * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            if GATED:
                b_up = tl.load(b_ptrs + N, mask=offs_k[:, None] < k_left, other=0.0)
                acc_up = tl.dot(a, b_up, acc_up)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * ldb

        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        if APPLY_EPILOGUE:
            if EPILOGUE == "bias":
                bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
                acc = _epilogue(acc, bias, EPILOGUE)
            elif GATED:
                acc = _epilogue(acc, acc_up, EPILOGUE)
            else:
                acc = _epilogue(acc, acc, EPILOGUE)
            c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
        else:
            c_ptrs = c_ptr + split * M * ldb + offs_m[:, None] * ldb + offs_n[None, :]
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
            if GATED:
                tl.store(c_ptrs + N, acc_up.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _epilogue_kernel(
    src_ptr, bias_ptr, dst_ptr, M, N,
    SPLITS: tl.constexpr, EPILOGUE: tl.constexpr, APPLY_EPILOGUE: tl.constexpr, BLOCK: tl.constexpr,
):
    """Sum SPLITS slices of src [SPLITS, M, NW] (one slice: a plain read), then either
    apply the epilogue into dst [M, N] or write the sum to dst [M, NW]."""
    GATED: tl.constexpr = EPILOGUE == "gated_silu"
    ldb = N
    if GATED:
        ldb = 2 * N
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    row = offs // N
    col = offs % N
    src = src_ptr + row * ldb + col
    x = tl.zeros((BLOCK,), dtype=tl.float32)
    if GATED:
        up = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        x += tl.load(src + s * M * ldb, mask=mask, other=0.0).to(tl.float32)
        if GATED:
            up += tl.load(src + s * M * ldb + N, mask=mask, other=0.0).to(tl.float32)
    if APPLY_EPILOGUE:
        if EPILOGUE == "bias":
            x = _epilogue(x, tl.load(bias_ptr + col, mask=mask, other=0.0).to(tl.float32), EPILOGUE)
        elif GATED:
            x = _epilogue(x, up, EPILOGUE)
        else:
            x = _epilogue(x, x, EPILOGUE)
        tl.store(dst_ptr + offs, x.to(dst_ptr.dtype.element_ty), mask=mask)
    else:
        dst = dst_ptr + row * ldb + col
        tl.store(dst, x.to(dst_ptr.dtype.element_ty), mask=mask)
        if GATED:
            tl.store(dst + N, up.to(dst_ptr.dtype.element_ty), mask=mask)


class MatmulFamily:
    """C = epilogue(A · B) — see the module docstring for launches and workspace.

    Args:
        epilogue: what follows the product (``"none"``, ``"bias"``, ``"silu"``,
            ``"gelu"``, ``"gated_silu"``).
        dtype: the element type ``plan`` compiles for (``"bf16"`` or ``"fp16"``); ``run``
            follows its inputs' dtype.
    """

    name = "matmul"
    shape_keys = ("M", "N", "K")
    bucket_key = ("M",)  # tile and split-K choices follow M, as vLLM's M-keyed tables do
    space = SPACE

    def __init__(self, epilogue: Epilogue = "none", *, dtype: str = "bf16") -> None:
        check_choice("epilogue", epilogue, EPILOGUES)
        self.epilogue = epilogue
        self.dtype = dtype_name(dtype)

    def __repr__(self) -> str:
        return f"MatmulFamily(epilogue={self.epilogue!r}, dtype={self.dtype!r})"

    @property
    def _gated(self) -> bool:
        return self.epilogue == "gated_silu"

    def _kernel_epilogue(self, apply: bool) -> str:
        """The EPILOGUE constexpr: a launch that does not apply the epilogue only needs to
        know whether it is gated, so those launches of every other epilogue share one binary."""
        if apply or self._gated:
            return self.epilogue
        return "none"

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        problem = shape_problem(shape, self.shape_keys) or config_problem(config, self.space)
        if problem:
            return problem
        M, N, K = shape["M"], shape["N"], shape["K"]
        split, block_k = config["SPLIT_K"], config["BLOCK_K"]
        if not config["FUSE_EPILOGUE"] and self.epilogue == "none":
            return "FUSE_EPILOGUE=False needs an epilogue to unfuse; with epilogue 'none' it is the fused config"
        if config.get("SM_MARGIN", 0) and not config["PERSISTENT"]:
            return "SM_MARGIN sizes a persistent grid; with PERSISTENT=False it changes nothing (use 0)"
        if split > cdiv(K, block_k):
            return (f"SPLIT_K={split} needs at least {split} K tiles but K={K} has "
                    f"{cdiv(K, block_k)} of BLOCK_K={block_k}: a K slice would be empty")
        nw = 2 * N if self._gated else N
        largest = max(M * K, K * nw, split * M * nw)
        if largest > INT32_MAX:
            return f"a tensor of {largest} elements needs 64-bit indexing; the kernels index in int32"
        return None

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan:
        steps = self._steps(config, shape, persistent_ctas, self.dtype)
        workspace = workspace_bytes(self._buffers(config, shape, self.dtype))
        return LaunchPlan(tuple(s.launch for s in steps), float(workspace))

    def _buffers(self, config: ConfigParams, shape: Shape, dtype: str) -> dict[str, Buffer]:
        """The output and the workspace ``tuner.requirements`` says the config needs (the
        one rule: what the runtime reserves is what runs)."""
        buffers = {"out": Buffer(shape["M"] * shape["N"], dtype, workspace=False)}
        for name, numel, kind in workspace_buffers(self.name, {"epilogue": self.epilogue, "dtype": dtype},
                                                   config, shape, 0):
            buffers[name] = Buffer(numel, kind)
        return buffers

    def _steps(self, config: ConfigParams, shape: Shape, persistent_ctas: int, dtype: str) -> list[Step]:
        M, N, K = shape["M"], shape["N"], shape["K"]
        e = DTYPES[dtype]
        split, fused, epi = config["SPLIT_K"], config["FUSE_EPILOGUE"], self.epilogue
        nw = 2 * N if self._gated else N
        bias_bytes = e * N if epi == "bias" else 0
        epi_flops = EPILOGUE_FLOPS[epi] * M * N
        items = matmul_items(config, shape)
        persistent = bool(config["PERSISTENT"])
        grid = min(persistent_ctas, items) if persistent else items
        bias = "bias" if epi == "bias" else "a"

        gemm_writes_final = fused and split == 1
        gemm_out = "out" if gemm_writes_final else ("partials" if split > 1 else "mid")
        out_type = "fp32" if gemm_out == "partials" else dtype
        out_bytes = {"out": e * M * N, "partials": 4 * split * M * nw, "mid": e * M * nw}[gemm_out]
        steps = [make_launch(
            "matmul" if split == 1 else "matmul_partial", _matmul_kernel,
            {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": f"*{out_type}", "bias_ptr": f"*{dtype}",
             "M": "i32", "N": "i32", "K": "i32"},
            {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "BLOCK_K": config["BLOCK_K"],
             "GROUP_M": config["GROUP_M"], "SPLIT_K": split, "EPILOGUE": self._kernel_epilogue(gemm_writes_final),
             "APPLY_EPILOGUE": gemm_writes_final},
            num_warps=config["num_warps"], num_stages=config["num_stages"], grid_dims=(grid,),
            persistent=persistent,
            flops=2 * M * nw * K + (epi_flops if gemm_writes_final else 0),
            dram_bytes=e * (M * K + K * nw) + out_bytes + (bias_bytes if gemm_writes_final else 0),
            bindings={"a_ptr": "a", "b_ptr": "b", "c_ptr": gemm_out, "bias_ptr": bias, "M": M, "N": N, "K": K},
            cost="gemm",
        )]

        def elementwise(name: str, src: str, dst: str, splits: int, apply: bool) -> Step:
            src_bytes = (4 * splits if src == "partials" else e) * M * nw
            dst_bytes = e * M * N if apply else e * M * nw
            return make_launch(
                name, _epilogue_kernel,
                {"src_ptr": f"*{'fp32' if src == 'partials' else dtype}", "bias_ptr": f"*{dtype}",
                 "dst_ptr": f"*{dtype}", "M": "i32", "N": "i32"},
                {"SPLITS": splits, "EPILOGUE": self._kernel_epilogue(apply), "APPLY_EPILOGUE": apply,
                 "BLOCK": EW_BLOCK},
                num_warps=EW_WARPS, num_stages=EW_STAGES, grid_dims=(cdiv(M * N, EW_BLOCK),),
                persistent=False,
                flops=(splits - 1) * M * nw + (epi_flops if apply else 0),
                dram_bytes=src_bytes + dst_bytes + (bias_bytes if apply else 0),
                bindings={"src_ptr": src, "bias_ptr": bias, "dst_ptr": dst, "M": M, "N": N}, cost="memory",
            )

        if split > 1:
            steps.append(elementwise("splitk_reduce", "partials", "out" if fused else "mid", split, fused))
        if not fused:
            steps.append(elementwise("epilogue", "mid", "out", 1, True))
        return steps

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any = None, device: str = "cpu") -> dict[str, Any]:
        """A [M, K] and B [K, NW] scaled so C is of order one; a [N] bias for ``bias``."""
        import torch

        dt = torch_dtype(dtype_name(dtype or self.dtype))
        M, N, K = shape["M"], shape["N"], shape["K"]
        nw = 2 * N if self._gated else N
        gen = torch.Generator().manual_seed(seed)
        inputs = {
            "a": torch.randn(M, K, generator=gen).to(dt).to(device),
            "b": (torch.randn(K, nw, generator=gen) / K**0.5).to(dt).to(device),
        }
        if self.epilogue == "bias":
            inputs["bias"] = torch.randn(N, generator=gen).to(dt).to(device)
        return inputs

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        import torch

        a, b = inputs["a"], inputs["b"]
        acc = a.float() @ b.float()
        N = shape["N"]
        if self.epilogue == "bias":
            acc = acc + inputs["bias"].float()
        elif self.epilogue == "silu":
            acc = torch.nn.functional.silu(acc)
        elif self.epilogue == "gelu":
            acc = torch.nn.functional.gelu(acc)
        elif self.epilogue == "gated_silu":
            acc = torch.nn.functional.silu(acc[:, :N]) * acc[:, N:]
        return acc.to(a.dtype)

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape, *,
            persistent_ctas: int | None = None) -> Any:
        """Launch the config's kernels on ``inputs``; returns C [M, N].

        ``persistent_ctas`` defaults to the GPU's SM count (4 on the CPU interpreter).
        """
        a = inputs["a"]
        dtype = dtype_name(a.dtype)
        if persistent_ctas is None:
            persistent_ctas = sized_sms(config, sm_count(a.device))
        buffers = self._buffers(config, shape, dtype)
        tensors = {**allocate(buffers, a.device), **{k: v.contiguous() for k, v in inputs.items()}}
        run_steps(self._steps(config, shape, persistent_ctas, dtype), tensors)
        return tensors["out"].view(shape["M"], shape["N"])
