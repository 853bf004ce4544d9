"""The `comm` family: collectives priced by the interconnect model, holding their channels' SMs.

Expectations are worked by hand from t = α + f(n)·S / min(bus_bw, channels · per_channel_bw)
with the NVLink 4 preset's constants, never from the code's output.
"""

from __future__ import annotations

import pytest

from tuner.errors import ProblemError
from tuner.kernels import get_family
from tuner.kernels._common import KernelError
from tuner.profile.collective import CollectiveProfile
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
    with pytest.raises(ProblemError, match="options.interconnect"):
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
