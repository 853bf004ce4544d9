"""CUDA occupancy: how many CTAs of a kernel one SM holds at once, and what stops more.

The rules are those of the CUDA Occupancy Calculator (``cuda_occupancy.h``, which
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` implements) for compute capability
8.x and 9.x, with the default shared-memory carveout (the whole of ``smem_per_sm``):

* **warps** — at most ``warps_per_sm`` resident warps: ``warps_per_sm // num_warps``.
* **blocks** — at most ``ctas_per_sm_max`` resident CTAs.
* **registers** — registers are allocated per warp, ``regs × warp_size`` rounded up to
  ``reg_alloc_unit``, out of four SM sub-partitions of ``regs_per_sm / 4`` each; a warp
  lives in one sub-partition, so the SM holds ``4 × (regs_per_sm/4 // regs_per_warp)``
  warps' worth, and ``that // num_warps`` CTAs.
* **shared memory** — each CTA takes its own shared memory plus the system's
  ``smem_reserved_per_cta`` (1 KB), rounded up to ``smem_alloc_unit``; the SM holds
  ``smem_per_sm // that`` CTAs.

A launch is illegal (occupancy 0) when a single CTA cannot run at all: more than 1024
threads, more than ``regs_per_thread_max`` registers per thread, more registers per CTA
than one SM has (the hardware check rounds the CTA's warps up to a multiple of the four
sub-partitions), or more shared memory than ``smem_per_cta_max``.
"""

from __future__ import annotations

from tuner.profile.devices import DevicePreset

MAX_THREADS_PER_CTA = 1024
"""Threads per CTA, every compute capability since 2.0."""

SUB_PARTITIONS = 4
"""Register-file sub-partitions (SM processing blocks) per SM, Volta to Hopper."""

LIMITERS = ("warps", "blocks", "registers", "shared memory")
"""Limit names in tie-break order: when several limits allow the same CTA count, the
structural ones (warps, blocks) are named first, because using fewer registers or less
shared memory would not raise occupancy past them."""


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(
    device: DevicePreset, regs_per_thread: int, smem_bytes: int, num_warps: int
) -> tuple[int, str, str | None]:
    """CTAs of one launch resident per SM on ``device``.

    Args:
        device: the GPU whose limits apply.
        regs_per_thread: registers per thread of the compiled kernel (ptxas's count).
        smem_bytes: shared memory per CTA, static plus dynamic, without the system's
            per-CTA reservation (which this function adds).
        num_warps: warps per CTA.

    Returns:
        ``(ctas_per_sm, limiter, reason)``: ``limiter`` is one of :data:`LIMITERS`, the
        limit that binds (or, when ``ctas_per_sm`` is 0, the one that is broken) and
        ``reason`` is None for a legal launch, else a sentence naming the broken limit.
    """
    arch = device.arch
    threads = num_warps * device.warp_size
    if num_warps < 1 or threads > MAX_THREADS_PER_CTA:
        return 0, "warps", (
            f"{num_warps} warps ({threads} threads) per CTA; a CTA has 1 to "
            f"{MAX_THREADS_PER_CTA // device.warp_size} warps"
        )
    if regs_per_thread > device.regs_per_thread_max:
        return 0, "registers", (
            f"{regs_per_thread} registers per thread exceed the {device.regs_per_thread_max} "
            f"allowed on {arch}"
        )
    regs_per_warp = _round_up(regs_per_thread * device.warp_size, device.reg_alloc_unit)
    regs_checked = regs_per_warp * _round_up(num_warps, SUB_PARTITIONS)
    if regs_checked > device.regs_per_sm:
        return 0, "registers", (
            f"{num_warps} warps × {regs_per_thread} registers per thread need "
            f"{regs_checked} registers per CTA; an SM of {arch} has {device.regs_per_sm}"
        )
    if smem_bytes > device.smem_per_cta_max:
        return 0, "shared memory", (
            f"{smem_bytes} bytes of shared memory per CTA exceed the {device.smem_per_cta_max} "
            f"a CTA may use on {device.name} ({arch})"
        )

    smem_per_cta = _round_up(smem_bytes + device.smem_reserved_per_cta, device.smem_alloc_unit)
    if regs_per_warp:
        regs_per_partition = device.regs_per_sm // SUB_PARTITIONS
        warps_by_regs = SUB_PARTITIONS * (regs_per_partition // regs_per_warp)
        ctas_by_regs = warps_by_regs // num_warps
    else:
        ctas_by_regs = device.ctas_per_sm_max
    limits = {
        "warps": device.warps_per_sm // num_warps,
        "blocks": device.ctas_per_sm_max,
        "registers": ctas_by_regs,
        "shared memory": device.smem_per_sm // smem_per_cta,
    }
    ctas = min(limits.values())
    limiter = next(name for name in LIMITERS if limits[name] == ctas)
    return ctas, limiter, None
