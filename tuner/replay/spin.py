"""The kernel a GPU replay runs for what has a time and no kernel (a declared profile, a
neighbour, a collective): ``ctas`` CTAs, each spinning on the GPU's ``%globaltimer`` for
the time, so it lasts what the problem says and occupies as many SMs as it says it holds
(its share of the device's SMs, one CTA on each), where ``torch.cuda._sleep`` (one thread,
cycles at a clock that varies) occupies one SM for a time that drifts with the clock.

Each CTA is one warp without shared memory: it takes an SM's issue slots but leaves room
for other kernels' CTAs beside it on the same SM, as a latency-bound kernel does; what a
GEMM's CTAs then do beside it is the measurement. The same spin on ``%globaltimer``
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
