"""The analytic latency model: the directions it must get right, the demands it hands the
simulator, and its error against measured A100 GEMM times.

Nothing here compiles a kernel. Direction tests build launches and compiled resources by
hand, so each states the numbers it relies on; the A100 test uses the real matmul plans
with the shared memory and registers that ptxas gave the calibration configs for sm_80
(recorded below from ``benchmarks/bench_model.py``'s compile cache) and the occupancy
rules of ``tuner.profile.occupancy``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tuner.errors import IllegalConfigError
from tuner.kernels.family import KernelLaunch
from tuner.profile import calibration as cal
from tuner.profile.devices import A100, H100, H200
from tuner.profile.model import DEFAULT, Efficiency, LaunchTiming, gemm_geometry, launch_time, plan_seconds
from tuner.profile.resources import CompiledResources

ROOT = Path(__file__).resolve().parents[1]
VIDUR = ROOT / "benchmarks" / "data" / "a100_llama2_7b_ops_vidur.csv"
GEMM_SIGNATURE = (("a_ptr", "*fp16"), ("b_ptr", "*fp16"), ("c_ptr", "*fp16"), ("M", "i32"), ("N", "i32"), ("K", "i32"))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gemm(m: int, n: int, k: int, bm: int = 128, bn: int = 128, bk: int = 32, *, warps: int = 4, stages: int = 4,
         split_k: int = 1, group_m: int = 8, persistent: bool = False, grid: int | None = None,
         dims: bool = True) -> KernelLaunch:
    """A GEMM launch built by hand; with ``dims`` its M, N, K ride in its constexprs, so
    the model needs no shape."""
    tiles = cdiv(m, bm) * cdiv(n, bn) * split_k
    out = "*fp32" if split_k > 1 else "*fp16"
    constexprs = (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group_m), ("SPLIT_K", split_k))
    if dims:
        constexprs += (("M", m), ("N", n), ("K", k))
    return KernelLaunch(
        name="matmul" if split_k == 1 else "matmul_partial", fn=None,
        signature=GEMM_SIGNATURE[:2] + (("c_ptr", out),) + GEMM_SIGNATURE[3:],
        constexprs=constexprs, num_warps=warps, num_stages=stages, grid=tiles if grid is None else grid,
        persistent=persistent, flops=2.0 * m * n * k,
        dram_bytes=2.0 * (m * k + k * n) + (4 * split_k if split_k > 1 else 2) * m * n,
    )





def reduce_launch(m: int, n: int, splits: int) -> KernelLaunch:
    return KernelLaunch(
        name="splitk_reduce", fn=None, signature=(("src_ptr", "*fp32"), ("dst_ptr", "*fp16")),
        constexprs=(("SPLITS", splits), ("BLOCK", 1024)), num_warps=4, num_stages=1, grid=cdiv(m * n, 1024),
        persistent=False, flops=(splits - 1) * m * n, dram_bytes=(4 * splits + 2) * m * n,
    )


def resources(ctas_per_sm: int, *, warps: int = 4, smem: int = 0, regs: int = 128, spill: int = 0) -> CompiledResources:
    return CompiledResources("sm_80", smem, regs, warps, ctas_per_sm, "registers", None, spill)


def timed(launch: KernelLaunch, ctas_per_sm: int = 1, *, factors: Efficiency = DEFAULT, device=A100,
          smem: int = 0) -> LaunchTiming:
    return launch_time(launch, resources(ctas_per_sm, warps=launch.num_warps, smem=smem), device, factors)


# --- directions ---------------------------------------------------------------------------------------


def test_small_m_is_memory_bound_and_flat() -> None:
    times = [timed(gemm(m, 4096, 11008, 32, 64, 128, stages=3), 2) for m in (1, 4, 16, 32, 64)]
    latencies = [t.latency_s for t in times]
    assert max(latencies) / min(latencies) < 1.10
    # The weights are read once at most of the DRAM bandwidth.
    assert all(t.dram_fraction > 0.6 for t in times)
    assert latencies[0] == pytest.approx(2 * 4096 * 11008 / (A100.dram_bytes_per_s * DEFAULT.dram), rel=0.2)


def test_time_grows_with_m_when_compute_bound() -> None:
    t = {m: timed(gemm(m, 12288, 4096), 1) for m in (1024, 2048, 4096)}
    assert 1.8 < t[2048].latency_s / t[1024].latency_s < 2.2
    assert 1.8 < t[4096].latency_s / t[2048].latency_s < 2.2
    # Compute-bound: far from the DRAM roof.
    assert t[4096].dram_fraction < 0.3


def test_one_more_cta_than_a_wave_costs_a_second_wave_when_compute_bound() -> None:
    one = timed(gemm(128 * 108, 128, 16384), 1)   # 108 tiles: one full wave on 108 SMs
    two = timed(gemm(128 * 109, 128, 16384), 1)   # 109 tiles: a second wave of one CTA
    assert (one.waves, two.waves) == (1, 2)
    assert 1.85 < two.latency_s / one.latency_s < 2.05
    (head_s, head_sm, _, _, _), (tail_s, tail_sm, _, _, _) = two.phases(A100.saturating_share)
    assert head_sm == 1.0 and tail_sm == pytest.approx(1 / 108)
    assert tail_s == pytest.approx(head_s - DEFAULT.fixed_s, rel=0.05)


def test_memory_bound_tail_wave_is_short_and_draws_less_bandwidth() -> None:
    timing = timed(reduce_launch(1024, 34660, 4), 16)  # 34,660 CTAs: 20 full waves of 1,728 and 100 more
    (head_s, head_sm, head_b, _, _), (tail_s, tail_sm, tail_b, _, _) = timing.phases(A100.saturating_share)
    assert timing.waves > 2 and tail_sm < 0.5
    assert tail_s < head_s / (timing.waves - 1)
    assert tail_b < head_b


@pytest.mark.parametrize("m", [1, 64, 512, 4096])
def test_more_stages_are_never_slower_at_equal_occupancy(m: int) -> None:
    latencies = [timed(gemm(m, 4096, 4096, 64, 64, 64, stages=s), 2).latency_s for s in (1, 2, 3, 4, 5)]
    assert all(a >= b for a, b in zip(latencies, latencies[1:]))


def test_one_stage_exposes_load_latency_that_four_hide() -> None:
    one = timed(gemm(16, 4096, 4096, 16, 64, 64, stages=1), 1).latency_s
    four = timed(gemm(16, 4096, 4096, 16, 64, 64, stages=4), 1).latency_s
    assert one > 1.5 * four


def test_compiled_shared_memory_caps_the_pipeline() -> None:
    """A binary whose shared memory holds one stage (an unaligned operand kept the
    pipeliner from staging it) is timed as the shallower pipeline it is."""
    launch = gemm(16, 4096, 4096, 16, 64, 64, stages=4)
    stage = (16 + 64) * 64 * 2
    deep = timed(launch, 1, smem=3 * stage).latency_s
    shallow = timed(launch, 1, smem=stage).latency_s
    assert shallow > deep


def test_low_occupancy_cannot_hide_memory_latency() -> None:
    """Same grid, same binary: four resident CTAs per SM beat one."""
    launch = gemm(64, 4096 * 4, 4096, 16, 64, 64, stages=2)
    assert timed(launch, 4).latency_s < 0.7 * timed(launch, 1).latency_s


def test_split_k_helps_a_small_m_large_k_gemm() -> None:
    m, n, k = 16, 1024, 16384
    plain = timed(gemm(m, n, k, 16, 64, 128, stages=4), 2).latency_s
    partial = gemm(m, n, k, 16, 64, 128, stages=4, split_k=8)
    split = (timed(partial, 2).latency_s + A100.launch_overhead_s + timed(reduce_launch(m, n, 8), 16).latency_s)
    assert split < 0.8 * plain


def test_persistent_holds_its_grids_slots_for_its_whole_life() -> None:
    tiles = gemm(4096, 4096, 4096)
    persistent = gemm(4096, 4096, 4096, persistent=True, grid=2 * A100.sms)
    t = timed(persistent, 2)
    assert t.waves == 1 and t.persistent
    assert [p[:3] for p in t.phases(A100.saturating_share)] == [(t.latency_s, 1.0, t.dram_fraction)]
    # Same work, same rounds: within a few percent of the launched-in-waves twin.
    assert t.latency_s == pytest.approx(timed(tiles, 2).latency_s, rel=0.05)
    # A persistent grid smaller than the GPU holds only its CTAs' slots: one CTA of
    # 2 per SM on 108 SMs is 1/216 of them, the rest free for other streams.
    small = timed(gemm(64, 128, 4096, persistent=True, grid=1), 2)
    assert small.phases(A100.saturating_share)[0][1] == pytest.approx(1 / 216)


def test_one_partial_wave_holds_its_share_of_the_slots() -> None:
    t = timed(gemm(128, 128 * 54, 4096), 2)   # 54 CTAs on 216 slots
    assert t.waves == 1 and t.sm_fraction_full == pytest.approx(54 / 216)
    assert [p[:3] for p in t.phases(A100.saturating_share)] == [(t.latency_s, 54 / 216, t.dram_fraction)]


@pytest.mark.parametrize("launch,ctas", [
    (gemm(1, 12288, 4096, 16, 64, 128), 2), (gemm(3000, 5000, 4096), 1), (gemm(4096, 4096, 4096, 64, 64, 64), 3),
    (reduce_launch(4096, 11008, 2), 16),
])
def test_phases_partition_the_latency(launch: KernelLaunch, ctas: int) -> None:
    t = timed(launch, ctas)
    phases = t.phases(A100.saturating_share)
    assert sum(p[0] for p in phases) == pytest.approx(t.latency_s)
    assert all(0 < s <= 1 and 0 <= b <= 1 and 0 < k <= s and seconds > 0 for seconds, s, b, k, _ in phases)
    # every modeled phase is discrete: its waves add up to the launch's
    assert sum(p[4] for p in phases) == t.waves and all(p[4] >= 1 for p in phases)
    assert 0 < t.dram_fraction <= 1


def test_launch_overhead_is_left_to_the_simulator() -> None:
    launch = gemm(64, 4096, 4096, 32, 64, 128)
    slow_host = dataclasses.replace(A100, launch_overhead_s=1.0)
    assert timed(launch, 2, device=slow_host).latency_s == timed(launch, 2).latency_s


def test_an_unfused_epilogue_is_timed_as_memory_bound() -> None:
    m, n = 4096, 11008
    epilogue = KernelLaunch("epilogue", None, (("src_ptr", "*fp16"), ("dst_ptr", "*fp16")),
                            (("BLOCK", 1024),), 4, 1, cdiv(m * n, 1024), False, 4.0 * m * n, 4.0 * m * n)
    t = timed(epilogue, 16)
    assert t.dram_fraction > 0.6
    assert t.latency_s == pytest.approx(4 * m * n / (A100.dram_bytes_per_s * DEFAULT.dram), rel=0.25)


def test_faster_device_is_faster() -> None:
    launch = gemm(4096, 4096, 4096)
    assert timed(launch, 2, device=H100).latency_s < 0.6 * timed(launch, 2).latency_s
    weights = gemm(1, 12288, 4096, 16, 64, 128)  # memory-bound: H200's HBM3e beats H100's HBM3
    assert timed(weights, 2, device=H200).latency_s < 0.85 * timed(weights, 2, device=H100).latency_s


def test_a_launch_that_cannot_run_raises_and_scores_infinite() -> None:
    launch = gemm(64, 4096, 4096)
    broken = CompiledResources("sm_80", 200_000, 128, 4, 0, "shared memory", "too much shared memory")
    with pytest.raises(IllegalConfigError, match="too much shared memory"):
        launch_time(launch, broken, A100)
    assert plan_seconds((launch,), (broken,), A100) == math.inf


def test_a_gemm_takes_its_sizes_from_the_shape_when_its_constexprs_lack_them() -> None:
    launch = gemm(4096, 4096, 4096, dims=False)
    shape = {"M": 4096, "N": 4096, "K": 4096}
    assert gemm_geometry(launch, shape).tiles == 32 * 32
    assert launch_time(launch, resources(2), A100, shape=shape) == timed(gemm(4096, 4096, 4096), 2)
    with pytest.raises(ValueError, match="pass the family's shape"):
        launch_time(launch, resources(2), A100)


def test_efficiency_rejects_impossible_factors() -> None:
    with pytest.raises(ValueError, match=r"Efficiency.tensor must be in \(0, 1\] but got 1.5"):
        Efficiency(tensor=1.5)
    with pytest.raises(ValueError, match="Efficiency.fixed_s must be at least 0"):
        Efficiency(fixed_s=-1.0)


# --- calibration ---------------------------------------------------------------------------------------


def test_load_vidur_builds_the_llama_gemm_shapes() -> None:
    rows = cal.load_vidur(VIDUR, tps=(1, 8))
    by_key = {(m.op, m.tokens, m.tp): m for m in rows}
    assert len(rows) == 4 * 259 * 2
    qkv = by_key[("qkv", 1, 1)]
    assert (qkv.m, qkv.n, qkv.k) == (1, 12288, 4096) and qkv.seconds == pytest.approx(65e-6)
    down = by_key[("down", 4096, 8)]
    assert (down.m, down.n, down.k) == (4096, 4096, 1376)
    # Duplicate rows (4096 tokens appears twice at TP 1) give the median of their medians.
    assert by_key[("qkv", 4096, 1)].seconds == pytest.approx((1.911 + 1.8865) / 2 * 1e-3)


def test_calibrate_recovers_factors_it_generated() -> None:
    truth = dataclasses.replace(DEFAULT, tensor=0.7, dram=0.9, fixed_s=3e-6, tile_half=6.0)
    cases = []
    for m, n, k in [(1, 4096, 4096), (16, 11008, 4096), (256, 4096, 4096), (1024, 4096, 11008), (4096, 12288, 4096),
                    (2048, 4096, 4096), (64, 22016, 4096), (512, 12288, 4096)]:
        cands = [cal.Candidate((("BLOCK_M", bm), ("BLOCK_N", bn)), (gemm(m, n, k, bm, bn, bk, stages=4),),
                               (resources(c),))
                 for bm, bn, bk, c in [(16, 64, 128, 2), (64, 64, 64, 3), (128, 128, 32, 1), (128, 256, 32, 1)]]
        shape = {"M": m, "N": n, "K": k}
        seconds, _ = cal.best_config(cands, shape, A100, truth)
        cases.append((cal.GemmMeasurement("x", m, 1, m, n, k, seconds), cands))
    fitted = cal.calibrate(cases, A100, max_evaluations=250)
    assert cal.log_loss(cases, A100, fitted) < 1e-6
    # The memory-bound shapes pin the DRAM factor and the fixed cost; tensor and tile_half
    # trade off against each other over four tile sizes, so only their product is pinned.
    assert fitted.dram == pytest.approx(0.9, rel=0.01)
    assert fitted.fixed_s == pytest.approx(3e-6, rel=0.01)


def test_calibrate_names_unknown_factors() -> None:
    with pytest.raises(ValueError, match="fit must name Efficiency fields"):
        cal.calibrate([], A100, fit=("speed",))


# --- the A100 target: best config within ±35 % of cuBLAS for most shapes --------------------------------

#: (launch, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K) -> (shared memory bytes,
#: registers per thread, spill bytes per thread) ptxas gave each calibration binary for sm_80
#: (Triton 3.9, fp16, aligned operands), from benchmarks/data/compile_cache.db.
SM80_USAGE: dict[tuple, tuple[int, int, int]] = {
    ("matmul", 128, 128, 32, 4, 4, 1): (49152, 255, 8), ("matmul", 128, 128, 32, 8, 2, 1): (32768, 180, 0),
    ("matmul", 128, 128, 64, 8, 3, 1): (65536, 200, 0), ("matmul", 128, 256, 32, 8, 3, 1): (49152, 242, 0),
    ("matmul", 128, 256, 64, 8, 3, 1): (98304, 255, 0), ("matmul", 128, 32, 32, 4, 4, 1): (30720, 120, 0),
    ("matmul", 128, 64, 32, 4, 4, 1): (36864, 198, 0), ("matmul", 16, 128, 128, 4, 3, 1): (73728, 154, 0),
    ("matmul", 16, 256, 64, 4, 3, 1): (69632, 164, 0), ("matmul", 16, 32, 128, 2, 4, 1): (36864, 94, 0),
    ("matmul", 16, 64, 128, 4, 4, 1): (61440, 96, 0), ("matmul", 32, 128, 64, 4, 4, 1): (61440, 154, 0),
    ("matmul", 32, 32, 64, 2, 5, 1): (32768, 94, 0), ("matmul", 32, 64, 128, 4, 3, 1): (49152, 120, 0),
    ("matmul", 32, 64, 32, 2, 5, 1): (24576, 128, 0), ("matmul", 64, 128, 32, 4, 2, 1): (12288, 168, 0),
    ("matmul", 64, 128, 32, 4, 4, 1): (36864, 168, 0), ("matmul", 64, 128, 64, 4, 3, 1): (49152, 218, 0),
    ("matmul", 64, 256, 32, 4, 4, 1): (61440, 250, 0), ("matmul", 64, 32, 32, 2, 5, 1): (24576, 124, 0),
    ("matmul", 64, 64, 64, 4, 4, 1): (49152, 124, 0),
    ("matmul_partial", 128, 128, 32, 4, 4, 2): (49152, 255, 16),
    ("matmul_partial", 16, 64, 128, 4, 4, 2): (61440, 95, 0), ("matmul_partial", 16, 64, 128, 4, 4, 4): (61440, 95, 0),
    ("matmul_partial", 16, 64, 64, 4, 4, 8): (30720, 79, 0), ("matmul_partial", 32, 64, 64, 4, 4, 4): (36864, 96, 0),
    ("matmul_partial", 64, 128, 32, 4, 4, 2): (36864, 207, 0), ("matmul_partial", 64, 64, 64, 4, 4, 2): (49152, 128, 0),
    ("splitk_reduce", 2): (0, 28, 0), ("splitk_reduce", 4): (0, 32, 0), ("splitk_reduce", 8): (0, 34, 0),
}


class RecordedUsage:
    """Compiled resources from :data:`SM80_USAGE` and the occupancy rules: no compiler."""

    def get_or_compile(self, launch: KernelLaunch, device) -> CompiledResources:
        from tuner.profile.occupancy import occupancy

        c = dict(launch.constexprs)
        if launch.name == "splitk_reduce":
            key: tuple = (launch.name, c["SPLITS"])
        else:
            key = (launch.name, c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], launch.num_warps, launch.num_stages,
                   c["SPLIT_K"])
        smem, regs, spill = SM80_USAGE[key]
        ctas, limiter, reason = occupancy(device, regs, smem, launch.num_warps)
        return CompiledResources(device.arch, smem, regs, launch.num_warps, ctas, limiter, reason, spill)


def test_a100_best_config_is_within_35_percent_of_cublas_for_most_shapes() -> None:
    matmul = pytest.importorskip("tuner.families.matmul.kernel")
    family = matmul.MatmulFamily(dtype="fp16")
    picked = {1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096}
    measured = [m for m in cal.load_vidur(VIDUR, tps=(1, 8)) if m.tokens in picked]
    source = RecordedUsage()
    cases = [(m, cal.candidates(family, cal.CALIBRATION_CONFIGS, m.shape, A100, source)) for m in measured]
    comparisons = cal.compare(cases, A100, DEFAULT)
    fit_tp = cal.summarize([c.relative_error for c in comparisons if c.measurement.tp == 1])
    held_out = cal.summarize([c.relative_error for c in comparisons if c.measurement.tp == 8])
    assert fit_tp.count == 40 and fit_tp.within >= 0.9 and fit_tp.median <= 0.10
    assert held_out.within >= 0.8 and held_out.median <= 0.20
    # The picks are the configs an autotuner would pick: thin tiles at decode sizes, big tiles at prefill.
    best = {(c.measurement.op, c.measurement.tokens): dict(c.best.config) for c in comparisons if c.measurement.tp == 1}
    assert best[("qkv", 1)]["BLOCK_M"] <= 128 and best[("o", 1)]["BLOCK_M"] <= 32
    assert best[("up", 4096)]["BLOCK_M"] * best[("up", 4096)]["BLOCK_N"] >= 128 * 128


def decode(batch_kv: int, context: int, splits: int, *, head_dim: int = 128) -> KernelLaunch:
    """A split-KV decode launch as the generic path sees it: K and V of each (sequence,
    KV head) read once, the context cut into ``splits`` CTAs."""
    kv_bytes = 2 * 2 * batch_kv * context * head_dim
    return KernelLaunch("decode_split", None, (("q_ptr", "*fp16"), ("k_ptr", "*fp16")),
                        (("BLOCK_H", 16), ("BLOCK_N", 64), ("NUM_SPLITS", splits)), 4, 3, batch_kv * splits,
                        False, 4.0 * batch_kv * context * head_dim, kv_bytes)


def test_split_kv_helps_when_few_sequences_read_a_long_context() -> None:
    """32 CTAs cannot keep enough loads in flight to stream the KV cache; 128 can."""
    alone = timed(decode(32, 8192, 1), 2).latency_s
    reduce = KernelLaunch("decode_reduce", None, (("ws_ptr", "*fp32"),), (("BLOCK", 128),), 4, 1, 32,
                          False, 4 * 32 * 130, 4 * 4 * 32 * 130 + 2 * 32 * 128)
    split = timed(decode(32, 8192, 4), 2).latency_s + A100.launch_overhead_s + timed(reduce, 16).latency_s
    assert split < 0.7 * alone
    # Plenty of sequences already fill the GPU: splitting only adds a launch.
    busy = timed(decode(1024, 8192, 1), 2).latency_s
    assert timed(decode(1024, 8192, 4), 2).latency_s == pytest.approx(busy, rel=0.1)


def test_a_steered_timing_keeps_its_bytes() -> None:
    t = timed(gemm(3000, 5000, 4096), 1)
    slow = t.scaled(2.0)
    assert slow.latency_s == pytest.approx(2 * t.latency_s)
    assert slow.dram_fraction == pytest.approx(t.dram_fraction / 2)
    assert [p[1] for p in slow.phases(A100.saturating_share)] == [p[1] for p in t.phases(A100.saturating_share)]
    assert sum(p[0] for p in slow.phases(A100.saturating_share)) == pytest.approx(slow.latency_s)


def test_a_persistent_grid_sized_to_the_device_runs_its_extra_ctas_in_a_second_round() -> None:
    """On 46 of an H100's 132 SMs (a 35 % partition), one CTA per SM: a persistent GEMM told
    the partition launches 46 CTAs that share the 1024 tiles (23 rounds, the last of 12);
    told the device, it launches 132 CTAs of 8 tiles each (⌈1024/132⌉), of which 46 run at
    a time: 3 CTA waves (46, 46, 40) of 8 rounds = 24 rounds. Same work, one round more,
    and a pipeline fill per CTA wave: slower, never faster."""
    partition = dataclasses.replace(H100, sms=46)
    told_partition = timed(gemm(4096, 4096, 4096, persistent=True, grid=46), 1, device=partition)
    told_device = timed(gemm(4096, 4096, 4096, persistent=True, grid=132), 1, device=partition)
    assert told_device.latency_s > told_partition.latency_s
    assert told_device.latency_s / told_partition.latency_s == pytest.approx(24 / 23, rel=0.03)
    assert told_device.persistent and told_device.phases(0.62)[0][1] == 1.0
