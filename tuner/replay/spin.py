"""The kernel a GPU replay runs for what has a time and no kernel (a declared profile, a
neighbour, a collective): ``ctas`` CTAs, each spinning on the GPU's ``%globaltimer`` for
the time, so it lasts what the problem says, with as many CTAs as the SMs it says it holds
(its share of the device's SMs), where ``torch.cuda._sleep`` (one thread, cycles at a clock
that varies) takes one SM for a time that drifts with the clock.

Each CTA is one warp without shared memory, so nothing makes the CTAs land one per SM or
keeps other kernels' CTAs off their SMs: the block scheduler spreads them over free SMs
first, and a GEMM's CTAs may sit beside them, as beside a latency-bound kernel. So the
spin holds *at most* its share of the SMs' issue slots; what the GPU does with it beside
the service's kernels is the measurement, not an assumption. The same spin on ``%globaltimer``
held SMs in ``benchmarks/gpu_sharing.py``'s run on an H200
(``benchmarks/data/gpu_sharing_measured.json``).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["duration_ns"])
def _spin_kernel(sink_ptr, duration_ns):
    """Spin until ``duration_ns`` of %globaltimer have passed since the CTA started; store
    the time spun (so nothing is optimised away)."""
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < duration_ns:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                        pack=1)
    tl.store(sink_ptr + tl.program_id(0), now - start)


def spin(sink: Any, ctas: int, seconds: float) -> None:
    """Launch the spin on the current stream: ``ctas`` CTAs (at most ``sink``'s length)
    for ``seconds``."""
    _spin_kernel[(max(1, min(ctas, sink.numel())),)](sink, max(int(seconds * 1e9), 0), num_warps=1, num_stages=1)


def ctas_for(share: float, sms: int) -> int:
    """The CTAs that occupy ``share`` of ``sms`` SMs, one each: at least one."""
    return max(1, min(sms, round(share * sms)))


def spin_launch(ctas: int) -> Any:
    """The spin as a :class:`tuner.kernels.family.KernelLaunch`, so that tests compile it
    for ``sm_90`` without a GPU (``tuner.profile.compiled.compile_launch``)."""
    from ..kernels._common import make_launch

    return make_launch("spin", _spin_kernel, {"sink_ptr": "*i64", "duration_ns": "i64"}, {}, num_warps=1,
                       num_stages=1, grid_dims=(ctas,), persistent=True, flops=0.0, dram_bytes=0.0,
                       bindings={"sink_ptr": "sink", "duration_ns": 1}).launch
