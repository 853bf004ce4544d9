"""The ``rmsnorm`` family's kernel: y = x / sqrt(mean(x²) + eps) · w over rows of length N, with an
optional residual added first (h = x + r becomes the new residual and is normalised).

Shapes: M rows, N hidden. Layouts, contiguous: x and r [M, N], w [N]; outputs y and h
[M, N] in x's dtype; statistics in fp32. With a residual, ``run`` returns ``(y, h)``.

Configs:

* FUSE_RESIDUAL — True: one ``rmsnorm`` launch reads x and r, writes h and y. False: an
  ``add`` launch writes h, then the ``rmsnorm`` launch reads h back (a second launch and
  M·N more elements of traffic). Without a residual (``residual=False``) only True is
  legal; False would be the same config again.
* BLOCK_N — a CTA normalises one row in BLOCK_N-wide blocks. When BLOCK_N ≥ N the row
  stays in registers (one pass, the ``ONE_PASS`` constexpr); otherwise the kernel loops
  twice over the row (sum of squares, then normalise), re-reading x (and r) — from L2 in
  practice, so the compulsory traffic is still one read. Every BLOCK_N is legal for
  every N; a BLOCK_N far above N only wastes lanes.
* The ``add`` launch is flat over M·N elements in BLOCK_N blocks with the config's warps.
"""

from __future__ import annotations

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
    run_steps,
    shape_problem,
    torch_dtype,
)
from ...errors import KernelError
from ...kernels.family import ConfigParams, LaunchPlan, Shape
from . import workspace as rmsnorm_workspace

SPACE: dict[str, tuple[Any, ...]] = {
    "FUSE_RESIDUAL": (True, False),
    "BLOCK_N": (1024, 2048, 4096, 8192, 512, 256),
    "num_warps": (4, 8, 16, 2, 1),
}

#: Nominal flops per element: square, accumulate, scale by the inverse rms, scale by w.
NORM_FLOPS = 4


@triton.jit
def _add_kernel(x_ptr, r_ptr, h_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask).to(tl.float32)
    tl.store(h_ptr + offs, (x + r).to(h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_row(x_row, r_row, h_row, offs, mask, RESIDUAL: tl.constexpr):
    """A tile of the row to normalise, in fp32: x, or with RESIDUAL h = x + r rounded to
    the output dtype (as the unfused path stores it), which is also written out."""
    h = tl.load(x_row + offs, mask=mask, other=0.0)
    if RESIDUAL:
        h = (h.to(tl.float32) + tl.load(r_row + offs, mask=mask, other=0.0).to(tl.float32)).to(h.dtype)
        tl.store(h_row + offs, h, mask=mask)
    return h.to(tl.float32)


@triton.jit
def _rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, N, eps,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr, RESIDUAL: tl.constexpr,
):
    """One row. With RESIDUAL, h = x + r (rounded to the output dtype, as the unfused
    path stores it) is written out and normalised; otherwise x is."""
    row = tl.program_id(0)
    x_row = x_ptr + row * N
    r_row = r_ptr + row * N
    h_row = h_ptr + row * N
    y_row = y_ptr + row * N
    if ONE_PASS:
        offs = tl.arange(0, BLOCK_N)
        mask = offs < N
        h = _load_row(x_row, r_row, h_row, offs, mask, RESIDUAL)
        inv_rms = 1.0 / tl.sqrt(tl.sum(h * h, 0) / N + eps)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (h * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        sq = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            offs = start + tl.arange(0, BLOCK_N)
            mask = offs < N
            h = _load_row(x_row, r_row, h_row, offs, mask, RESIDUAL)
            sq += h * h
        inv_rms = 1.0 / tl.sqrt(tl.sum(sq, 0) / N + eps)
        for start in range(0, N, BLOCK_N):
            offs = start + tl.arange(0, BLOCK_N)
            mask = offs < N
            h = tl.load(x_row + offs, mask=mask, other=0.0)
            if RESIDUAL:  # recomputed, not read back: no ordering between the passes needed
                h = (h.to(tl.float32) + tl.load(r_row + offs, mask=mask, other=0.0).to(tl.float32)).to(h.dtype)
            h = h.to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + offs, (h * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


class RmsNormFamily:
    """RMSNorm with an optional residual — see the module docstring.

    Args:
        residual: whether a residual is added before the norm (and returned).
        eps: added to the mean square.
        dtype: the element type ``plan`` compiles for (``"bf16"`` or ``"fp16"``); ``run``
            follows its inputs' dtype.
    """

    name = "rmsnorm"
    shape_keys = ("M", "N")
    bucket_key = ("M",)  # rows to normalise
    space = SPACE

    def __init__(self, *, residual: bool = True, eps: float = 1e-6, dtype: str = "bf16") -> None:
        if not eps > 0:
            raise KernelError(f"eps must be positive but got {eps!r}.")
        self.residual = bool(residual)
        self.eps = float(eps)
        self.dtype = dtype_name(dtype)

    def __repr__(self) -> str:
        return f"RmsNormFamily(residual={self.residual}, eps={self.eps}, dtype={self.dtype!r})"

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        problem = shape_problem(shape, self.shape_keys) or config_problem(config, self.space)
        if problem:
            return problem
        if not self.residual and not config["FUSE_RESIDUAL"]:
            return "FUSE_RESIDUAL=False needs a residual to add separately; without one it is the fused config"
        if shape["M"] * shape["N"] > INT32_MAX:
            return f"a tensor of {shape['M'] * shape['N']} elements needs 64-bit indexing; the kernels index in int32"
        return None

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan:
        """The launches; no workspace (h is an output), as the family's spec says."""
        workspace = sum(n for _, n, _ in rmsnorm_workspace({}, config, shape, persistent_ctas))
        return LaunchPlan(tuple(s.launch for s in self._steps(config, shape, self.dtype)), float(workspace))

    def _buffers(self, shape: Shape, dtype: str) -> dict[str, Buffer]:
        buffers = {"y": Buffer(shape["M"] * shape["N"], dtype, workspace=False)}
        if self.residual:
            buffers["h"] = Buffer(shape["M"] * shape["N"], dtype, workspace=False)
        return buffers

    def _steps(self, config: ConfigParams, shape: Shape, dtype: str) -> list[Step]:
        M, N = shape["M"], shape["N"]
        e = DTYPES[dtype]
        block, warps = config["BLOCK_N"], config["num_warps"]
        fused_add = self.residual and config["FUSE_RESIDUAL"]
        steps = []
        if self.residual and not fused_add:
            steps.append(make_launch(
                "add", _add_kernel,
                {"x_ptr": f"*{dtype}", "r_ptr": f"*{dtype}", "h_ptr": f"*{dtype}", "numel": "i32"},
                {"BLOCK": block},
                num_warps=warps, num_stages=1, grid_dims=(cdiv(M * N, block),), persistent=False,
                flops=M * N, dram_bytes=3 * e * M * N,
                bindings={"x_ptr": "x", "r_ptr": "r", "h_ptr": "h", "numel": M * N}, cost="memory",
            ))
        source = "h" if self.residual and not fused_add else "x"
        steps.append(make_launch(
            "rmsnorm", _rmsnorm_kernel,
            {"x_ptr": f"*{dtype}", "r_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "y_ptr": f"*{dtype}",
             "h_ptr": f"*{dtype}", "N": "i32", "eps": "fp32"},
            {"BLOCK_N": block, "ONE_PASS": block >= N, "RESIDUAL": fused_add},
            num_warps=warps, num_stages=1, grid_dims=(M,), persistent=False,
            flops=NORM_FLOPS * M * N + (M * N if fused_add else 0),
            dram_bytes=e * ((4 if fused_add else 2) * M * N + N),
            bindings={"x_ptr": source, "r_ptr": "r" if fused_add else source, "w_ptr": "w", "y_ptr": "y",
                      "h_ptr": "h" if fused_add else "y", "N": N, "eps": self.eps},
            cost="memory",
        ))
        return steps

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any = None, device: str = "cpu") -> dict[str, Any]:
        """x (and r) [M, N] standard normal, w [N] around one."""
        import torch

        dt = torch_dtype(dtype_name(dtype or self.dtype))
        M, N = shape["M"], shape["N"]
        gen = torch.Generator().manual_seed(seed)
        inputs = {"x": torch.randn(M, N, generator=gen).to(dt).to(device)}
        if self.residual:
            inputs["r"] = torch.randn(M, N, generator=gen).to(dt).to(device)
        inputs["w"] = (1.0 + 0.1 * torch.randn(N, generator=gen)).to(dt).to(device)
        return inputs

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        import torch

        x = inputs["x"]
        h = x + inputs["r"] if self.residual else x
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps) * inputs["w"].float()
        return (y.to(x.dtype), h) if self.residual else y.to(x.dtype)

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape) -> Any:
        """Launch the config's kernels; returns y, or (y, h) with a residual."""
        x = inputs["x"]
        dtype = dtype_name(x.dtype)
        tensors = {**allocate(self._buffers(shape, dtype), x.device),
                   **{k: v.contiguous() for k, v in inputs.items()}}
        run_steps(self._steps(config, shape, dtype), tensors)
        y = tensors["y"].view(shape["M"], shape["N"])
        return (y, tensors["h"].view(shape["M"], shape["N"])) if self.residual else y
