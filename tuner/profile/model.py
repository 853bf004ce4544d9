"""The analytic latency model: what one launch costs alone, and what it demands of the GPU.

``launch_time`` turns a launch (its grid, tile and work), its compiled resources (CTAs per
SM, warps) and a device preset into a :class:`LaunchTiming`: the isolated seconds and
the per-phase demands ``(seconds, s, b)`` the fluid GPU layer consumes (DESIGN §4).

The model is a roofline evaluated per *wave* of resident CTAs, not per kernel, so that

* **wave quantization** is visible: a grid of one wave plus one CTA costs two waves;
* **occupancy** matters: the CTAs an SM holds share its tensor cores, an SM with few
  resident warps cannot keep them busy, and few CTAs cannot keep enough loads in flight
  to cover the memory latency (Little's law);
* **pipelining** matters: ``num_stages - 1`` tiles are in flight per CTA, so one or two
  stages expose the load latency that three to five hide;
* the **tail wave** is timed on its own (fewer CTAs share the DRAM bandwidth), and the
  simulator sees it holding only its share of the SM slots.

A launch says how it is priced (``KernelLaunch.cost``, set by its family; inferred from
its constexprs' names only for a family that does not say: :func:`cost_kind`), and
:data:`COST_PATHS` holds one path per kind. A GEMM launch (``BLOCK_M``/``BLOCK_N``/``BLOCK_K``
among its constexprs as the model reads them; its
``M``/``N``/``K`` from its constexprs or the ``shape`` argument) is timed tile by tile,
with the padded MMA work of partial tiles and the L2 reuse of its swizzled tile order;
every other launch (a split-K reduction, an unfused epilogue, attention, normalisation)
is timed from its ``flops``/``dram_bytes`` spread evenly over its grid, on the tensor
cores if it names a ``BLOCK_H``/``BLOCK_M`` × ``BLOCK_N`` tile, else on the CUDA cores.
A grouped (per-expert) GEMM launch — one with ``expert_blocks``, as ``fused_moe``'s —
takes the GEMM path over its padded rows, its B traffic spread over the experts it
touches and its padding rows loading nothing (``docs/fused-moe.md``).
Each launch of a plan is timed separately; the plan itself lists split-K reductions and
unfused epilogues.

Launch overhead is **not** part of the isolated time: the simulator adds
``service.launch_overhead`` before every launch, so ``device.launch_overhead_s`` is
never added here. What is included is the on-device fixed cost of a launch (CTA ramp-up,
first loads, drain), the fitted ``fixed_s``. The formulas, symbols and fitted values are
in ``docs/analytic-model.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import IllegalConfigError
from ..kernels.family import KernelLaunch, operand_bytes
from ..phases import Phase, sm_need
from .devices import DevicePreset
from .resources import CompiledResources



@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """The model's efficiency factors: what fraction of each datasheet peak is reachable.

    The first four are fitted (``tuner.profile.calibration.calibrate``) to measured
    cuBLAS times of the Llama-2-7B GEMMs on an A100-SXM4-80GB (vidur, TP 1, median of
    each op, 1–4096 tokens): the best modeled config per shape against the measured time,
    minimising the squared log error. The rest are fixed from microbenchmark literature
    and datasheets because those measurements cannot separate them.

    Attributes:
        tensor: e_tc, the fraction of tensor-core peak an MMA loop with large tiles
            sustains (fitted).
        tile_half: h, the tile intensity ``I = BM·BN/(BM+BN)`` (FLOPs per operand byte
            loaded into shared memory, up to a constant) at which a tile reaches half of
            ``tensor``: small tiles spend more of each step on shared-memory traffic and
            address arithmetic (fitted).
        dram: e_dram, the fraction of peak DRAM bandwidth a streaming kernel sustains
            (fitted).
        fixed_s: t0, on-device fixed seconds per launch: CTA ramp-up, first loads, drain
            and the event-timing floor of a measured launch (fitted). Not the host launch
            overhead, which the simulator adds.
        mem_latency_s: L, loaded DRAM latency: a load issued now returns after L. A wave
            pays it once to fill its pipeline; a CTA with d loads in flight streams at
            most d tiles per L (A100 ~0.5 µs idle, more under load; Jia et al. 2021,
            "Dissecting the Ampere GPU architecture via microbenchmarking").
        warp_scale: w0 of the occupancy curve ``1 - exp(-w / w0)`` of resident warps per
            SM: 4 warps (one per tensor sub-core) give 86 %, 8 give 98 % (after Triton's
            old ``matmul_perf_model``, which scaled throughput by min(warps, 4) / 4).
        l2_bytes_per_clock: bytes per SM clock an active SM streams from L2 into shared
            memory: 36 of the 64 the L1/L2 path moves at most on sm_80 and sm_90 (A100:
            ~5.5 TB/s measured over 108 SMs at 1.41 GHz). The clock comes from the
            preset (:func:`sm_clock_hz`), so it scales to H100/H200.
        cuda_core: fraction of the FP32 CUDA-core peak a non-GEMM launch's arithmetic
            reaches.
        bytes_in_flight_per_warp: loads a non-pipelined (non-GEMM) kernel keeps in
            flight per warp: 32 threads × 16-byte vector loads × 4 independent loads.
    """

    # Fitted by benchmarks/bench_model.py (Nelder-Mead, 84 TP-1 shapes, 32 configs).
    tensor: float = 0.891
    tile_half: float = 10.4
    dram: float = 0.807
    fixed_s: float = 4.88e-6
    mem_latency_s: float = 1.0e-6
    warp_scale: float = 2.0
    l2_bytes_per_clock: float = 36.0
    cuda_core: float = 0.5
    bytes_in_flight_per_warp: float = 2048.0

    def __post_init__(self) -> None:
        for name in ("tensor", "dram", "cuda_core"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"Efficiency.{name} must be in (0, 1] but got {value!r}.")
        for name in ("tile_half", "fixed_s", "mem_latency_s"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ValueError(f"Efficiency.{name} must be at least 0 but got {value!r}.")
        for name in ("warp_scale", "l2_bytes_per_clock", "bytes_in_flight_per_warp"):
            value = getattr(self, name)
            if not value > 0.0:
                raise ValueError(f"Efficiency.{name} must be greater than 0 but got {value!r}.")

    def tile_efficiency(self, block_m: int, block_n: int) -> float:
        """Fraction of tensor-core peak a ``block_m × block_n`` tile's MMA loop reaches."""
        intensity = block_m * block_n / (block_m + block_n)
        return self.tensor * intensity / (intensity + self.tile_half)

    def warp_efficiency(self, resident_warps: float) -> float:
        """How well ``resident_warps`` warps per SM keep its tensor cores and ALUs fed."""
        return -math.expm1(-resident_warps / self.warp_scale)


#: Factors fitted on the vidur A100 Llama-2-7B GEMMs (TP 1); see docs/analytic-model.md.
DEFAULT = Efficiency()


@dataclass(frozen=True)
class LaunchTiming:
    """One launch's isolated time and its demands on the GPU (DESIGN §4, GPU layer).

    Attributes:
        latency_s: isolated seconds on an idle GPU (launch overhead excluded).
        waves: waves of resident CTAs (1 for a persistent launch, which loops).
        sm_fraction_full: ``s`` of the full waves: 1.0, unless the grid is one partial
            wave, when it is that wave's share of the SM slots.
        tail_fraction: share of the SM slots the last wave holds (1.0 when it is full).
        dram_fraction: ``b`` over the launch's life: modeled DRAM bytes / latency / peak
            bandwidth, at most 1.
        persistent: the launch's grid holds its slots (``sm_fraction_full``: every slot
            for a grid sized to the device) for its whole life.
        tail_s: seconds of the last wave, when it is partial and not the only one.
        full_dram_fraction, tail_dram_fraction: ``b`` during the full waves and during
            that partial tail wave.
        compute, full_compute, tail_compute: the share of the launch's (of the full
            waves', of the tail wave's) seconds its SMs bound: arithmetic, L2 to shared
            memory, and the latency of the loads its CTAs keep in flight. The rest is
            DRAM streaming and fixed costs, which fewer SMs do not slow
            (:func:`tuner.phases.sm_need`).
    """

    latency_s: float
    waves: int
    sm_fraction_full: float
    tail_fraction: float
    dram_fraction: float
    persistent: bool = False
    tail_s: float = 0.0
    full_dram_fraction: float = 0.0
    tail_dram_fraction: float = 0.0
    compute: float = 1.0
    full_compute: float = 1.0
    tail_compute: float = 1.0

    def scaled(self, ratio: float) -> LaunchTiming:
        """The same launch ``ratio`` times slower (a measurement steering the model):
        seconds scale by ``ratio``, bandwidth fractions by ``1 / ratio`` (same bytes),
        slot fractions and the SM-bound shares stay (what the measurement adds or
        removes is not known to be one or the other)."""
        return dataclasses.replace(
            self, latency_s=self.latency_s * ratio, tail_s=self.tail_s * ratio,
            dram_fraction=min(1.0, self.dram_fraction / ratio),
            full_dram_fraction=min(1.0, self.full_dram_fraction / ratio),
            tail_dram_fraction=min(1.0, self.tail_dram_fraction / ratio),
        )

    def phases(self, saturating_share: float, share: float = 1.0) -> tuple[Phase, ...]:
        """``(isolated seconds, s, b, k, w)`` per phase: the full waves at ``s = 1``, then the
        partial tail wave at its fraction; a single phase when the launch is persistent
        (one wave of its grid), one wave, or all full waves.

        Args:
            saturating_share: the device's DRAM-saturating SM share.
            share: the device's SM share the launch was timed on (a partition's); ``s``
                and ``k`` come back as shares of the whole device, ``b`` of its DRAM.
        """
        saturating = saturating_share / share

        def phase(seconds: float, s: float, b: float, compute: float, waves: int) -> Phase:
            return (seconds, s * share, b, sm_need(s, b, compute, saturating) * share, float(waves))

        if self.persistent:
            return (phase(self.latency_s, self.sm_fraction_full, self.dram_fraction, self.compute, 1),)
        if self.waves == 1 or self.tail_s <= 0.0:
            return (phase(self.latency_s, self.sm_fraction_full, self.dram_fraction, self.compute, self.waves),)
        return (phase(self.latency_s - self.tail_s, 1.0, self.full_dram_fraction, self.full_compute, self.waves - 1),
                phase(self.tail_s, self.tail_fraction, self.tail_dram_fraction, self.tail_compute, 1))


@dataclass(frozen=True)
class GemmGeometry:
    """The tile arithmetic of one GEMM launch: ``C[M, N] = A[M, K] · B[K, N]``."""

    m: int
    n: int
    k: int
    block_m: int
    block_n: int
    block_k: int
    split_k: int
    group_m: int
    in_bytes: int
    out_bytes: int
    b_operands: int = 1
    #: A grouped (per-expert) GEMM: the distinct B matrices its M tiles are split among
    #: (the experts that got rows; 1 for a plain GEMM) and the rows that load and store
    #: (0: all ``m``; the others are padding, which only costs MMA work).
    experts: int = 1
    valid_m: int = 0

    @property
    def tiles_m(self) -> int:
        return -(-self.m // self.block_m)

    @property
    def tiles_n(self) -> int:
        return -(-self.n // self.block_n)

    @property
    def tiles(self) -> int:
        """Work items: output tiles × K splits."""
        return self.tiles_m * self.tiles_n * self.split_k

    @property
    def k_steps(self) -> int:
        """BLOCK_K iterations of one work item's K loop."""
        return max(1, -(-self.k // (self.split_k * self.block_k)))


def cost_kind(launch: KernelLaunch) -> str:
    """How the model prices ``launch``: its family's word (``launch.cost``), else inferred
    from its constexprs for a family that does not say — a grouped GEMM has
    ``expert_blocks``, a tiled GEMM ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``, an attention tile
    ``BLOCK_H`` (or ``BLOCK_M``) × ``BLOCK_N``; everything else moves memory."""
    if launch.cost is not None:
        return launch.cost
    if getattr(launch, "expert_blocks", None) is not None:
        return "grouped_gemm"
    c = launch.modeled_constexprs
    if all(key in c for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K")):
        return "gemm"
    if "BLOCK_N" in c and ("BLOCK_H" in c or "BLOCK_M" in c):
        return "attention"
    return "memory"


def gemm_geometry(launch: KernelLaunch, shape: Mapping[str, int] | None = None) -> GemmGeometry | None:
    """The GEMM tile arithmetic of ``launch``, or None when it is not priced as a GEMM
    (:func:`cost_kind`).

    A tiled GEMM's tile is ``BLOCK_M``/``BLOCK_N``/``BLOCK_K`` of its constexprs as the model
    reads them (``modeled_constexprs``); its problem sizes come from them (``M``, ``N``,
    ``K``) or else ``shape``.

    Raises:
        ValueError: a GEMM launch without its tile, or whose M, N, K are in neither (pass
            the family's shape).
    """
    kind = cost_kind(launch)
    if kind == "grouped_gemm":
        return _grouped_geometry(launch)
    return _tiled_geometry(launch, shape) if kind == "gemm" else None


def _tiled_geometry(launch: KernelLaunch, shape: Mapping[str, int] | None) -> GemmGeometry:
    """:func:`gemm_geometry` of a launch priced as a tiled GEMM."""
    c = launch.modeled_constexprs
    tile = [key for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if key not in c]
    if tile:
        raise ValueError(f"launch {launch.name!r} is priced as a GEMM but its constexprs lack {tile[0]}")
    dims = {}
    for key in ("M", "N", "K"):
        value = c.get(key, shape.get(key) if shape is not None else None)
        if value is None:
            raise ValueError(
                f"launch {launch.name!r} is a tiled GEMM (BLOCK_M/BLOCK_N/BLOCK_K) but its {key} is "
                f"unknown: pass the family's shape to launch_time(..., shape=shape)"
            )
        dims[key] = int(value)
    in_bytes, out_bytes = operand_bytes(launch.signature)
    # A gated GEMM (gate and up projections at once) loads two B tiles and keeps two
    # accumulators per output tile: twice the MMA work and B traffic of its N.
    gated = c.get("EPILOGUE") == "gated_silu"
    return GemmGeometry(
        m=dims["M"], n=dims["N"], k=dims["K"],
        block_m=int(c["BLOCK_M"]), block_n=int(c["BLOCK_N"]), block_k=int(c["BLOCK_K"]),
        split_k=int(c.get("SPLIT_K", 1)), group_m=max(1, int(c.get("GROUP_M", 1))),
        in_bytes=in_bytes, out_bytes=out_bytes * (2 if gated and not c.get("APPLY_EPILOGUE", True) else 1),
        b_operands=2 if gated else 1,
    )


def _grouped_geometry(launch: KernelLaunch) -> GemmGeometry:
    """The tile arithmetic of a grouped GEMM launch (``tuner.families.fused_moe.kernel``'s
    ``GroupedGemmLaunch``): its M is every padded row, ``sum_e blocks_e · BLOCK_SIZE_M``,
    its B one matrix per expert that got rows."""
    c = launch.modeled_constexprs
    block_m = int(c["BLOCK_SIZE_M"])
    blocks = launch.expert_blocks  # type: ignore[attr-defined]
    in_bytes, out_bytes = operand_bytes(launch.signature)
    return GemmGeometry(
        m=max(1, sum(blocks)) * block_m, n=int(launch.gemm_n), k=int(launch.gemm_k),  # type: ignore[attr-defined]
        block_m=block_m, block_n=int(c["BLOCK_SIZE_N"]), block_k=int(c["BLOCK_SIZE_K"]),
        split_k=1, group_m=max(1, int(c.get("GROUP_SIZE_M", 1))), in_bytes=in_bytes, out_bytes=out_bytes,
        b_operands=int(launch.b_operands),  # type: ignore[attr-defined]
        experts=max(1, sum(1 for b in blocks if b > 0)), valid_m=max(1, int(launch.rows)),  # type: ignore[attr-defined]
    )


def launch_time(
    launch: KernelLaunch,
    res: CompiledResources,
    device: DevicePreset,
    factors: Efficiency = DEFAULT,
    *,
    shape: Mapping[str, int] | None = None,
) -> LaunchTiming:
    """Model the isolated time and simulator demands of one launch.

    Args:
        launch: the launch, as a family's plan lists it.
        res: its compiled resources on ``device`` (``ctas_per_sm`` is the occupancy).
        device: the GPU preset.
        factors: the efficiency factors (default: fitted on the A100 GEMMs).
        shape: the family's shape (``M``, ``N``, ``K`` for a GEMM), for the tile
            arithmetic of GEMM launches; ignored by other launches.

    Raises:
        IllegalConfigError: the compiled launch cannot run on the device (no CTA fits an SM).
        ValueError: a GEMM launch whose M, N, K are neither constexprs nor in ``shape``.
    """
    if not res.legal or res.ctas_per_sm < 1:
        raise IllegalConfigError(
            f"launch {launch.name!r} cannot run on {device.name}: {res.reason or 'no CTA fits an SM'}"
        )
    kind = cost_kind(launch)
    path = COST_PATHS.get(kind)
    if path is None:
        raise ValueError(f"launch {launch.name!r}: cost {kind!r} is not one the model prices "
                         f"({', '.join(COST_PATHS)})")
    return path(launch, res, device, factors, shape)


# --- the per-wave roofline ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Wave:
    """One wave's steady-state seconds (without its pipeline fill), DRAM bytes, and the
    seconds of it its SMs bound (arithmetic, L2, load latency: not DRAM, not fills)."""

    seconds: float
    dram_bytes: float
    sm_seconds: float


def _assemble(full: _Wave | None, full_waves: int, tail: _Wave | None, tail_ctas: int, slots: int,
              fills: float, device: DevicePreset, factors: Efficiency, persistent: bool,
              resident: int = 0) -> LaunchTiming:
    """Sum ``full_waves`` full waves and a partial ``tail`` of ``tail_ctas`` CTAs into a
    timing, with ``fills`` exposed pipeline fills (see :func:`_exposed_fills`). A
    persistent launch holds the slots of its ``resident`` CTAs (all, when 0) its whole life.

    ``fixed_s`` and the first fill count in the first phase; the tail wave's phase
    carries its share of the later waves' fills.
    """
    bw = device.dram_bytes_per_s
    fill = factors.mem_latency_s
    full_s = full_waves * full.seconds if full is not None else 0.0
    full_bytes = full_waves * full.dram_bytes if full is not None else 0.0
    tail_s = tail.seconds if tail is not None else 0.0
    tail_bytes = tail.dram_bytes if tail is not None else 0.0
    full_sm = full_waves * full.sm_seconds if full is not None else 0.0
    tail_sm = tail.sm_seconds if tail is not None else 0.0
    latency = factors.fixed_s + fills * fill + full_s + tail_s
    b = min(1.0, (full_bytes + tail_bytes) / latency / bw)
    compute = min(1.0, (full_sm + tail_sm) / latency)
    waves = full_waves + (tail is not None)
    if persistent:
        held = min(1.0, resident / slots) if resident > 0 else 1.0
        return LaunchTiming(latency, 1, held, held, b, persistent=True, full_dram_fraction=b, compute=compute)
    if tail is None:
        return LaunchTiming(latency, waves, 1.0, 1.0, b, full_dram_fraction=b, compute=compute)
    tail_fraction = tail_ctas / slots
    if waves == 1:
        return LaunchTiming(latency, 1, tail_fraction, tail_fraction, b, full_dram_fraction=b, compute=compute)
    tail_phase = tail_s + fill * (fills - 1.0) / (waves - 1)   # a later wave's exposed fill
    head = latency - tail_phase
    return LaunchTiming(
        latency, waves, 1.0, tail_fraction, b,
        tail_s=tail_phase,
        full_dram_fraction=min(1.0, full_bytes / head / bw),
        tail_dram_fraction=min(1.0, tail_bytes / tail_phase / bw),
        compute=compute,
        full_compute=min(1.0, full_sm / head),
        tail_compute=min(1.0, tail_sm / tail_phase),
    )


def _repeated(wave: _Wave, times: int) -> _Wave:
    """``times`` rounds of the same wave, back to back."""
    return _Wave(wave.seconds * times, wave.dram_bytes * times, wave.sm_seconds * times)


def _exposed_fills(waves: int, res: CompiledResources) -> float:
    """Pipeline fills a non-persistent launch exposes: the first wave's in full; after
    that an SM waits for a new CTA's first loads only while its other resident CTAs
    cannot cover them, so each later wave exposes ``1 / ctas_per_sm`` of a fill."""
    return 1.0 + (waves - 1) / res.ctas_per_sm


#: Dense FP16/BF16 tensor-core FLOPs per SM per clock, by compute capability.
TENSOR_FLOPS_PER_CLOCK: dict[int, int] = {80: 2048, 86: 1024, 89: 1024, 90: 4096}


def sm_clock_hz(device: DevicePreset) -> float:
    """The SM clock the preset's tensor-core peak implies (A100: 1.41 GHz, H100: 1.83 GHz)."""
    per_clock = TENSOR_FLOPS_PER_CLOCK.get(device.compute_capability, 2048)
    return device.bf16_flops_per_s / device.sms / per_clock


def _residency(ctas: int, device: DevicePreset) -> tuple[int, float]:
    """Active SMs and mean CTAs per active SM for a wave of ``ctas`` (spread breadth-first)."""
    active = min(device.sms, ctas)
    return active, ctas / active


# --- GEMM launches: tile by tile -----------------------------------------------------------------


def _footprint(items: int, g: GemmGeometry) -> tuple[int, int, int]:
    """(tile rows, tile columns, K splits) covered by ``items`` consecutive work items.

    Items are ordered as the swizzled GEMM walks them: groups of ``GROUP_M`` tile rows,
    column by column within a group (``GROUP_M = 1`` is row-major), and the K split
    outermost. The tiles of one wave share their A rows and B columns through L2.
    """
    tiles_mn = g.tiles_m * g.tiles_n
    if items >= tiles_mn:
        return g.tiles_m, g.tiles_n, min(g.split_k, -(-items // tiles_mn))
    group = min(g.group_m, g.tiles_m)
    if items <= group:
        return items, 1, 1
    cols = -(-items // group)
    if cols <= g.tiles_n:
        return group, cols, 1
    return min(g.tiles_m, -(-items // g.tiles_n)), g.tiles_n, 1


def pipeline_depth(launch: KernelLaunch, res: CompiledResources, g: GemmGeometry) -> int:
    """Tile loads a GEMM CTA keeps in flight while it computes.

    ``num_stages - 1`` is what was asked for; what the compiler built is in its shared
    memory: Triton on sm_80 stages ``num_stages - 1`` operand tiles in shared memory (one
    at ``num_stages`` ≤ 2, which prefetches one tile through registers), and fewer when
    an unaligned operand keeps it from pipelining that load. The depth is the smaller of
    the two, so an unaligned shape's binary is timed as it was compiled.
    """
    asked = launch.num_stages - 1
    if asked <= 1 or res.smem_bytes <= 0:
        return max(0, asked)
    stage = (g.block_m + g.b_operands * g.block_n) * g.block_k * g.in_bytes
    return max(1, min(asked, res.smem_bytes // stage))


def _gemm_wave(items: int, g: GemmGeometry, launch: KernelLaunch, res: CompiledResources,
               device: DevicePreset, factors: Efficiency) -> _Wave:
    """One wave of ``items`` work items resident together (its pipeline fill excluded)."""
    active, per_sm = _residency(items, device)
    rows, cols, splits = _footprint(items, g)
    m_eff = min(g.block_m, g.m)
    n_eff = min(g.block_n, g.n)
    # Tensor cores execute the padded tile; the SM's resident CTAs share them.
    mma_rate = (device.bf16_flops_per_s / device.sms
                * factors.tile_efficiency(g.block_m, g.block_n)
                * factors.warp_efficiency(per_sm * launch.num_warps))
    t_compute = per_sm * 2.0 * g.b_operands * g.block_m * g.block_n * g.block_k / mma_rate
    # DRAM: the wave's distinct A rows and B columns of this K step, shared by all CTAs.
    a_rows = min(rows * g.block_m, g.m)
    b_cols = g.b_operands * min(cols * g.block_n, g.n)
    if g.valid_m:
        # A grouped GEMM's padding rows are masked: they load nothing. Its tile rows run
        # expert by expert, so ``rows`` of them span about rows · experts / tiles_m
        # experts' B matrices (all the touched ones when the wave covers every row).
        a_rows = a_rows * min(1.0, g.valid_m / g.m)
        b_cols *= min(g.experts, rows, -(-rows * g.experts // g.tiles_m))
    step_dram = splits * (a_rows + b_cols) * g.block_k * g.in_bytes
    t_dram = step_dram / (device.dram_bytes_per_s * factors.dram)
    # L2 -> shared memory: every CTA loads its own operands; spilled registers are
    # stored and reloaded through the same path every step.
    step_l2 = per_sm * ((m_eff + g.b_operands * n_eff) * g.block_k * g.in_bytes
                        + 2 * res.spill_bytes * launch.num_warps * device.warp_size)
    t_l2 = step_l2 / (factors.l2_bytes_per_clock * sm_clock_hz(device))
    # Latency: d loads in flight per CTA stream at most d tiles per latency; with none,
    # each step waits for its load, then computes (other resident CTAs fill the wait).
    depth = pipeline_depth(launch, res, g)
    if depth >= 1:
        t_latency = factors.mem_latency_s / depth
    else:
        t_latency = factors.mem_latency_s + t_compute / per_sm
    # Each SM sustains a bounded number of outstanding loads (Little's law): the wave's
    # DRAM traffic cannot stream faster than its active SMs together sustain.
    t_sm_dram = step_dram / (active * device.sm_dram_bytes_per_s)
    t_sm = max(t_compute, t_l2, t_latency, t_sm_dram)
    t_step = max(t_sm, t_dram)
    store = items * m_eff * n_eff * g.out_bytes
    if g.valid_m:
        store *= min(1.0, g.valid_m / g.m)   # padding rows store nothing
    t_store = store / (device.dram_bytes_per_s * factors.dram)
    return _Wave(g.k_steps * t_step + t_store, g.k_steps * step_dram + store, g.k_steps * t_sm)


def _gemm_timing(launch: KernelLaunch, res: CompiledResources, device: DevicePreset,
                 factors: Efficiency, g: GemmGeometry) -> LaunchTiming:
    slots = res.ctas_per_sm * device.sms
    if launch.persistent and launch.grid > slots:
        # Sized to more SMs than it runs on (told the device, run on a partition): each CTA
        # still strides over its ceil(items / grid) items, and the CTAs beyond the slots
        # wait for a slot — CTA waves of that many rounds each, the last wave partial.
        per_cta = -(-g.tiles // launch.grid)
        waves, rest = divmod(launch.grid, slots)
        full = _gemm_wave(slots, g, launch, res, device, factors)
        tail = _repeated(_gemm_wave(rest, g, launch, res, device, factors), per_cta) if rest else None
        return _assemble(full, waves * per_cta, tail, rest, slots, waves + (rest > 0), device, factors,
                         persistent=True)
    if launch.persistent:
        # The grid loops over the work items in rounds of its size; one pipeline fill,
        # because a round's first loads are issued while the previous tile finishes.
        ctas = max(1, launch.grid)
        rounds, rest = divmod(g.tiles, ctas)
        full = _gemm_wave(ctas, g, launch, res, device, factors) if rounds else None
        tail = _gemm_wave(rest, g, launch, res, device, factors) if rest else None
        return _assemble(full, rounds, tail, rest, slots, 1, device, factors, persistent=True, resident=ctas)
    # Every full wave covers the same footprint: time one and repeat it.
    waves, rest = divmod(max(1, launch.grid), slots)
    full = _gemm_wave(slots, g, launch, res, device, factors) if waves else None
    tail = _gemm_wave(rest, g, launch, res, device, factors) if rest else None
    return _assemble(full, waves, tail, rest, slots, _exposed_fills(waves + (rest > 0), res), device, factors,
                     persistent=False)


# --- every other launch: its work spread evenly over the grid ------------------------------------


def _generic_wave(ctas: int, flops: float, bytes_: float, launch: KernelLaunch,
                  device: DevicePreset, factors: Efficiency, tile: tuple[int, int] | None) -> _Wave:
    """A wave of ``ctas`` CTAs doing ``flops`` and moving ``bytes_`` each (fill excluded),
    on the tensor cores at ``tile`` (rows × columns), else on the CUDA cores."""
    active, per_sm = _residency(ctas, device)
    if tile is None:
        peak = device.fp32_flops_per_s / device.sms * factors.cuda_core
    else:
        peak = device.bf16_flops_per_s / device.sms * factors.tile_efficiency(*tile)
    rate = peak * factors.warp_efficiency(per_sm * launch.num_warps)
    t_compute = per_sm * flops / rate
    t_dram = ctas * bytes_ / (device.dram_bytes_per_s * factors.dram)
    # Without a software pipeline a CTA has only its warps' independent loads in flight:
    # it needs bytes / in_flight round trips of the memory latency.
    in_flight = launch.num_warps * factors.bytes_in_flight_per_warp * max(1, launch.num_stages - 1)
    t_latency = factors.mem_latency_s * bytes_ / in_flight
    t_sm_dram = per_sm * bytes_ / device.sm_dram_bytes_per_s   # the SM's outstanding-load bound
    t_sm = max(t_compute, t_latency, t_sm_dram)
    return _Wave(max(t_sm, t_dram), ctas * bytes_, t_sm)


def _dot_tile(launch: KernelLaunch) -> tuple[int, int] | None:
    """The tensor-core tile of an attention launch: ``BLOCK_H`` (or ``BLOCK_M``) ×
    ``BLOCK_N`` rows and columns (QK^T over a context tile), when it has at least the 16
    rows an MMA takes; None (the CUDA cores) otherwise."""
    c = launch.modeled_constexprs
    rows = c.get("BLOCK_H", c.get("BLOCK_M"))
    cols = c.get("BLOCK_N")
    if isinstance(rows, int) and isinstance(cols, int) and rows >= 16:
        return rows, cols
    return None


def _generic_timing(launch: KernelLaunch, res: CompiledResources, device: DevicePreset,
                    factors: Efficiency, tile: tuple[int, int] | None) -> LaunchTiming:
    slots = res.ctas_per_sm * device.sms
    grid = max(1, launch.grid)
    if launch.persistent:
        ctas = min(grid, slots)
        wave = _generic_wave(ctas, launch.flops / ctas, launch.dram_bytes / ctas, launch, device, factors, tile)
        return _assemble(wave, 1, None, 0, slots, 1, device, factors, persistent=True, resident=ctas)
    flops, bytes_ = launch.flops / grid, launch.dram_bytes / grid
    waves, rest = divmod(grid, slots)
    full = _generic_wave(slots, flops, bytes_, launch, device, factors, tile) if waves else None
    tail = _generic_wave(rest, flops, bytes_, launch, device, factors, tile) if rest else None
    return _assemble(full, waves, tail, rest, slots, _exposed_fills(waves + (rest > 0), res), device, factors,
                     persistent=False)


#: How each cost kind of a launch is priced (``KernelLaunch.cost``, :func:`cost_kind`):
#: a tiled or grouped GEMM tile by tile, attention on the tensor cores at its tile,
#: memory-bound launches (elementwise, reductions, normalisation) on the CUDA cores.
COST_PATHS: Mapping[str, Callable[..., LaunchTiming]] = MappingProxyType({
    "gemm": lambda launch, res, device, factors, shape: _gemm_timing(launch, res, device, factors,
                                                                     _tiled_geometry(launch, shape)),
    "grouped_gemm": lambda launch, res, device, factors, _shape: _gemm_timing(launch, res, device, factors,
                                                                              _grouped_geometry(launch)),
    "attention": lambda launch, res, device, factors, _shape: _generic_timing(launch, res, device, factors,
                                                                               _dot_tile(launch)),
    "memory": lambda launch, res, device, factors, _shape: _generic_timing(launch, res, device, factors, None),
})


def plan_seconds(launches: tuple[KernelLaunch, ...], resources: tuple[CompiledResources, ...],
                 device: DevicePreset, factors: Efficiency = DEFAULT, *,
                 shape: Mapping[str, int] | None = None) -> float:
    """Isolated seconds of a plan's launches back to back (no launch overhead); ``inf``
    when one cannot run — a config that cannot run is scored infinite, not fatal."""
    total = 0.0
    for launch, res in zip(launches, resources, strict=True):
        if not res.legal or res.ctas_per_sm < 1:
            return math.inf
        total += launch_time(launch, res, device, factors, shape=shape).latency_s
    return total
