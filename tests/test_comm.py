"""The `comm` family: collectives priced by the interconnect model, holding their channels' SMs.

Expectations are worked by hand from t = α + f(n)·S / min(bus_bw, channels · per_channel_bw)
with the NVLink 4 preset's constants, never from the code's output.
"""

from __future__ import annotations

import pytest

from tuner.errors import ProblemError
from tuner.kernels import get_family
from tuner.errors import KernelError
from tuner.profile.collective import CollectiveProfile, priced_profile
from tuner.profile.devices import PRESETS
from tuner.profile.interconnect import NVLINK4, fit_alpha_beta, wire_factor

H100 = PRESETS["h100"]
MIB = 1 << 20


def profile(channels: int, collective: str = "all_reduce") -> CollectiveProfile:
    return CollectiveProfile(get_family("comm", collective=collective), (("CHANNELS", channels),), H100)


def test_wire_factors_are_nccl_tests_bus_bandwidth_factors() -> None:
    assert wire_factor("all_reduce", 8) == pytest.approx(1.75)
    assert wire_factor("all_gather", 8) == pytest.approx(0.875)
    assert wire_factor("reduce_scatter", 2) == pytest.approx(0.5)


def test_a_large_all_reduce_runs_at_the_bus_bandwidth_with_ample_channels() -> None:
    # 64 MiB of bf16 per rank (M=4096 rows of N=8192): 1.75 x 64 MiB over 443.9 GB/s + 41.4 us
    expected = NVLINK4.latency_s + 1.75 * 64 * MIB / NVLINK4.bus_bw
    assert profile(16).seconds({"M": 4096, "N": 8192}) == pytest.approx(expected)
    assert profile(32).seconds({"M": 4096, "N": 8192}) == pytest.approx(expected)   # link-bound: more CTAs idle


def test_few_channels_cannot_fill_the_link() -> None:
    # 4 channels x 36.7 GB/s = 146.8 GB/s < 443.9
    expected = NVLINK4.latency_s + 1.75 * 64 * MIB / (4 * 36.7e9)
    assert profile(4).seconds({"M": 4096, "N": 8192}) == pytest.approx(expected)


def test_a_collective_holds_its_channels_sms_for_one_wave_and_draws_hbm() -> None:
    ((tag, phases),) = profile(16).launches({"M": 4096, "N": 8192}, H100, "ar")
    ((seconds, s, b, k, waves),) = phases
    assert tag == "ar:all_reduce" and (s, k, waves) == (16 / 132, 16 / 132, 1.0)
    # 3 HBM bytes per wire byte (read own, read incoming, write the sum)
    assert b == pytest.approx(3 * 1.75 * 64 * MIB / seconds / H100.dram_bytes_per_s)
    assert profile(16).workspace_bytes({"M": 4096, "N": 8192}) == 0.0


def test_alpha_beta_fit_recovers_a_known_curve() -> None:
    sizes = [2.0 ** k for k in range(15, 35)]
    times = [20e-6 + 1.75 * s / 400e9 for s in sizes]
    alpha, bus = fit_alpha_beta(sizes, times, 1.75)
    assert alpha == pytest.approx(20e-6) and bus == pytest.approx(400e9)


def test_bad_options_are_refused() -> None:
    with pytest.raises(KernelError, match="collective"):
        get_family("comm", collective="broadcast")
    with pytest.raises(KernelError, match="ranks"):
        get_family("comm", ranks=1)


COMM_PROBLEM = {
    "name": "tp", "device": {"name": "h100"},
    "service": {"batching": "dynamic", "max_batch": 8, "memory": {"budget": "80 GiB"},
                "operators": [{"name": "ar", "family": "allreduce", "shape": {"M": "batch * 64", "N": 8192}}],
                "slo": {"deadline": "1 s"}},
    "families": {"allreduce": {"kernel": "comm", "options": {"collective": "all_reduce", "ranks": 8,
                                                             "interconnect": "nvlink4"},
                               "space": {"CHANNELS": [16, 4]}}},
    "regimes": {"r": {"arrivals": {"process": "poisson", "rate": 10.0}, "horizon": "2 s"}},
}


def test_a_problem_file_declares_and_simulates_a_collective(write_problem) -> None:
    from tuner.problem import resolve_assignment
    from tuner.sim import simulate

    problem = write_problem(COMM_PROBLEM)
    configs = problem.families["allreduce"].configs
    assert [dict(c.params)["CHANNELS"] for c in configs] == [16, 4]
    result = simulate(problem, resolve_assignment(problem, ()), "r", seed=0)
    assert result.metrics.completed > 0


def test_an_unknown_interconnect_names_its_key(write_problem) -> None:
    bad = {**COMM_PROBLEM, "families": {"allreduce": {"kernel": "comm", "options": {"interconnect": "infiniband"}}}}
    with pytest.raises(ProblemError, match=r"families\.allreduce\.options: interconnect 'infiniband' is not a preset"):
        write_problem(bad)


def test_the_preset_carries_the_benchmarks_fit_and_states_its_errors() -> None:
    """NVLINK4's alpha and bus bandwidths are benchmarks/bench_comm.py's fit on its
    calibration points (rounded), so a change to the data or the fit cannot leave them
    stale; and the held-out sources are predicted, not fitted (their errors are reported)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_comm

    result = bench_comm.measure()
    fitted = result["fitted"]
    assert NVLINK4.latency_s == pytest.approx(fitted["latency_s"], abs=0.05e-6)
    assert NVLINK4.bus_bw == pytest.approx(fitted["bus_bw"], abs=0.05e9)
    assert NVLINK4.copy_bus_bw == pytest.approx(fitted["copy_bus_bw"], abs=0.05e9)
    assert result["counts"]["calibration"] == 20 and result["counts"]["validation"] >= 10
    # large 8x H100 all-reduces (held out) within 10 %
    assert result["validation_error_by_source"]["h100-ar-476"] < 10


# --- presets beyond NVLink 4, the family's own profile hook, and the held-out sources ---

def test_nvlink3_carries_the_calibrations_ring_efficiency_and_amperes_channel_cap() -> None:
    from tuner.profile.interconnect import NVLINK3

    # A100: 300 GB/s x 367.2/450 (ring all-reduce at 16 GiB on the 8x H200) = 244.8 GB/s
    assert NVLINK3.bus_bw == pytest.approx(244.8e9)
    assert NVLINK3.copy_bus_bw == pytest.approx(300e9 * 362.15 / 450)
    # 8 channels x 20.0 GB/s (NCCL's Ampere ring LL128 cap) = 160 GB/s binds below 244.8
    a100 = PRESETS["a100"]
    slow = CollectiveProfile(get_family("comm", interconnect="nvlink3"), (("CHANNELS", 8),), a100)
    assert slow.seconds({"M": 4096, "N": 8192}) == pytest.approx(41.4e-6 + 1.75 * 64 * MIB / 160e9)
    ((_, s, _, k, waves),) = slow.phases({"M": 4096, "N": 8192})
    assert (s, k, waves) == (8 / a100.sms, 8 / a100.sms, 1.0)


def test_pcie5_is_link_bound_on_ncclS_two_channels() -> None:
    from tuner.profile.interconnect import PCIE5

    # 2 x 36.7 = 73.4 GB/s > 63 x 0.816 = 51.4 GB/s: the link binds, as NCCL's 2 SMs suffice
    assert PCIE5.bandwidth("all_reduce", 2) == pytest.approx(63e9 * 367.2 / 450)
    p = CollectiveProfile(get_family("comm", interconnect="pcie5"), (("CHANNELS", 2),), H100)
    assert p.seconds({"M": 1024, "N": 8192}) == pytest.approx(41.4e-6 + 1.75 * 16 * MIB / (63e9 * 367.2 / 450))


def test_an_all_gather_moves_seven_eighths_of_its_buffer_at_the_ring_bandwidth() -> None:
    # 64 MiB gathered on 8 ranks: 0.875 x 64 MiB over 362.15 GB/s; HBM: 2 bytes per wire byte
    p = profile(16, "all_gather")
    seconds = 41.4e-6 + 0.875 * 64 * MIB / 362.15e9
    ((t, s, b, k, w),) = p.phases({"M": 4096, "N": 8192})
    assert t == pytest.approx(seconds)
    assert b == pytest.approx(2 * 0.875 * 64 * MIB / seconds / H100.dram_bytes_per_s)


def test_a_huge_fp32_all_reduce_caps_its_hbm_share_at_one_and_shares_stay_whole_device_on_a_partition() -> None:
    from tuner.phases import Partition

    p = CollectiveProfile(get_family("comm", dtype="fp32"), (("CHANNELS", 32),), H100)
    half = Partition("half", 0.5, True)
    ((_, phases),) = p.launches({"M": 4096, "N": 8192}, H100, "ar", half)
    ((_, s, b, k, w),) = phases
    assert (s, k, w) == (32 / 132, 32 / 132, 1.0) and 0 < b <= 1.0


def test_the_family_is_priced_by_the_model_and_unknown_interconnects_are_refused() -> None:
    family = get_family("comm", collective="reduce_scatter", ranks=4, interconnect="nvlink3")
    p = priced_profile(family, {"CHANNELS": 16}, H100)
    assert isinstance(p, CollectiveProfile) and p.source == "modeled" and p.config == {"CHANNELS": 16}
    assert len(p.source_hash) == 16 and p.source_hash != profile(16).source_hash
    assert p.workspace_bytes({"M": 8, "N": 8}) == 0.0
    with pytest.raises(KernelError, match="interconnect 'ib' is not a preset"):
        priced_profile(get_family("comm", interconnect="ib"), {"CHANNELS": 16}, H100)
    assert priced_profile(get_family("matmul"), {}, H100) is None
    with pytest.raises(KernelError, match="modeled, not run"):
        family.run({}, {"CHANNELS": 16}, {"M": 8, "N": 8})


def test_problem_file_configs_take_the_familys_own_profile(write_problem) -> None:
    problem = write_problem(COMM_PROBLEM)
    configs = problem.families["allreduce"].configs
    assert all(isinstance(c.profile, CollectiveProfile) for c in configs)
    assert [c.name for c in configs] == ["c16", "c4"]
    assert problem.families["allreduce"].bucket_key == ("M",)


def test_validation_never_meets_calibration_and_a100_large_messages_hold() -> None:
    import sys
    import time
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_comm

    started = time.perf_counter()
    result = bench_comm.measure()
    assert time.perf_counter() - started < 20
    calibration = {r["id"] for r in result["rows"] if r["split"] == "calibration"}
    validation = {r["id"] for r in result["rows"] if r["split"] == "validation"}
    assert calibration and validation and not calibration & validation
    assert all(i.startswith("h200-ar-torch-") for i in calibration)
    assert {r["interconnect"] for r in result["rows"] if r["id"].startswith("a100-")} == {"nvlink3"}
    # the A100 sweep from 512 MiB (ring at its bus bandwidth), held out: within 10 %
    big = [r for r in result["rows"] if r["id"].startswith("a100-") and r["bytes"] >= 512 * MIB]
    assert len(big) == 6 and all(abs(r["error_pct"]) < 10 for r in big)
    assert {"all_gather", "reduce_scatter", "all_to_all"} <= {r["collective"] for r in result["rows"]}


def test_tuner_profile_prices_a_collective_without_compiling() -> None:
    import json

    from click.testing import CliRunner

    from tuner.cli import main

    result = CliRunner().invoke(main, ["profile", "--family", "comm", "--shape", "M=4096,N=8192",
                                       "--config", "CHANNELS=4", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["latency_s"] == pytest.approx(41.4e-6 + 1.75 * 64 * MIB / (4 * 36.7e9))
    assert answer["phases"][0]["sm_share"] == pytest.approx(4 / 132) and answer["workspace_bytes"] == 0.0
