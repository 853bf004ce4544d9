"""A kernel family from outside tuner: ``out = alpha · x + y`` over an M × N matrix.

It is the whole of what a new family needs (``docs/kernel-families.md``): a Triton kernel,
a family class (space, legality, plan, inputs, reference, run) and a :class:`FamilySpec`
(requirements, cost kind, runtime names). ``tests/test_family_registry.py`` registers it
— in its own process with :func:`tuner.families.register`, and in tuner's CLI and a
serving process through a ``tuner.families`` entry point — and tunes, serves and exports
it without any file of tuner naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import triton
import triton.language as tl

from tuner.families import FamilySpec
from tuner.kernels import LaunchPlan, Step, make_launch, run_steps

ALPHA = 0.5
SPACE: dict[str, tuple[Any, ...]] = {"BLOCK": (1024, 256), "num_warps": (4, 2)}


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, M, N, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < M * N
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def grid_of(config: Mapping[str, Any], shape: Mapping[str, int]) -> int:
    return -(-shape["M"] * shape["N"] // config["BLOCK"])


class AxpyFamily:
    name = "axpy"
    shape_keys = ("M", "N")
    bucket_key = ("M",)
    space = SPACE

    def illegal(self, config: Mapping[str, Any], shape: Mapping[str, int]) -> str | None:
        return "more than 2**31 elements" if shape["M"] * shape["N"] >= 2**31 else None

    def _step(self, config: Mapping[str, Any], shape: Mapping[str, int]) -> Step:
        M, N = shape["M"], shape["N"]
        return make_launch(
            "axpy", axpy_kernel,
            {"x_ptr": "*fp16", "y_ptr": "*fp16", "out_ptr": "*fp16", "alpha": "fp32", "M": "i32", "N": "i32"},
            {"BLOCK_SIZE": config["BLOCK"]},
            num_warps=config["num_warps"], num_stages=1, grid_dims=(grid_of(config, shape),), persistent=False,
            flops=2 * M * N, dram_bytes=3 * 2 * M * N,
            bindings={"x_ptr": "x", "y_ptr": "y", "out_ptr": "out", "alpha": ALPHA, "M": M, "N": N},
            cost="memory",
        )

    def plan(self, config: Mapping[str, Any], shape: Mapping[str, int], persistent_ctas: int) -> LaunchPlan:
        return LaunchPlan((self._step(config, shape).launch,), 0.0)

    def make_inputs(self, shape: Mapping[str, int], *, seed: int, dtype: Any = None, device: str = "cpu") -> dict:
        import torch

        gen = torch.Generator().manual_seed(seed)
        return {k: torch.randn(shape["M"], shape["N"], generator=gen).half().to(device) for k in ("x", "y")}

    def reference(self, inputs: Mapping[str, Any], shape: Mapping[str, int]) -> Any:
        return (ALPHA * inputs["x"].float() + inputs["y"].float()).half()

    def run(self, inputs: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int]) -> Any:
        import torch

        out = torch.empty_like(inputs["x"])
        run_steps([self._step(config, shape)], {**inputs, "out": out})
        return out


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple:
    return ()


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple:
    return (("axpy", grid_of(config, shape), False),)


SPEC = FamilySpec(name="axpy", kernel=AxpyFamily, cost="memory", workspace=workspace, launches=launches,
                  runtime_names={"BLOCK": "BLOCK_SIZE"})
