"""Co-scheduled physics: what a kernel gets when others hold SMs, DRAM, or a partition.

Every expectation is worked by hand from the rule in :mod:`tuner.sim.gpu`
(``rate = min(1, h / k, B_free / b)``, shares handed out in priority and launch order,
a partition capping what its kernels hold) and :func:`tuner.phases.sm_need`
(``k = min(s, max(s · compute, b · saturating_share))``), never from the code's output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.expr import compile_expr
from tuner.phases import sm_need
from tuner.problem import load_problem, resolve_assignment
from tuner.problem.model import Device, KernelProfile
from tuner.sim import simulate
from tuner.sim.gpu import SharedGPU

MS = 1e-3
H100 = Device("h100", 132, 0.62)


def declared(latency_ms: float, sm: float, dram: float, compute: float | None = None) -> KernelProfile:
    return KernelProfile(latency=compile_expr(latency_ms * MS, set()), workspace=compile_expr(0, set()),
                         sm=sm, dram=dram, compute=compute)


def run(gpu: SharedGPU, kernels: list[tuple[str, KernelProfile, int, int]]) -> dict[str, float]:
    """Launch (tag, profile, priority, partition) at t = 0 on separate streams; finish times."""
    for stream, (tag, profile, priority, partition) in enumerate(kernels):
        gpu.launch(priority, stream, tag, profile.phases({}, H100), 1.0, 0.0, 0.0, partition)
    done = {}
    while (kernel := gpu.run_until(float("inf"))) is not None:
        done[kernel.tag] = gpu.now
    return done


# -- the rule of one phase ---------------------------------------------------------------

def test_sm_need_is_the_larger_of_the_compute_and_the_bandwidth_part() -> None:
    assert sm_need(1.0, 0.8, 0.1, 0.62) == pytest.approx(0.496)   # memory-bound: 0.8 × 0.62
    assert sm_need(1.0, 0.3, 1.0, 0.62) == 1.0                    # compute-bound: all of it
    assert sm_need(0.25, 0.9, 0.1, 0.62) == 0.25                  # never more than it occupies
    # undeclared compute is 1 - dram: a kernel computes whenever it does not stream
    assert declared(1, 1.0, 0.95).phases({}, H100)[0][3] == pytest.approx(max(0.05, 0.95 * 0.62))


# -- the must-hold cases ---------------------------------------------------------------

def test_a_lone_kernel_on_a_partition_it_fits_takes_its_isolated_latency() -> None:
    gpu = SharedGPU(partitions=(1.0, 0.5))
    assert run(gpu, [("small", declared(3, 0.4, 0.2), 0, 1)]) == pytest.approx({"small": 3 * MS}, rel=1e-12)


def test_a_compute_bound_kernel_progresses_in_proportion_to_its_sm_share() -> None:
    gemm = declared(10, 1.0, 0.1, compute=1.0)
    for share in (0.25, 0.3, 0.5, 0.75):
        done = run(SharedGPU(partitions=(1.0, share)), [("gemm", gemm, 0, 1)])
        assert done["gemm"] == pytest.approx(10 * MS / share, rel=1e-12)
    # The same beside a higher-priority neighbour holding 44 % of the SMs for 30 ms.
    done = run(SharedGPU(), [("neighbour", declared(30, 0.44, 0.0, compute=1.0), -1, 0), ("gemm", gemm, 0, 0)])
    assert done["gemm"] == pytest.approx(10 * MS / 0.56, rel=1e-12)


def test_a_memory_bound_kernel_keeps_its_isolated_speed_on_the_share_the_derivation_gives() -> None:
    """sm 1.0, dram 0.8, compute 0.1 on an H100: k = max(0.1, 0.8 × 0.62) = 0.496 of the SMs."""
    attention = declared(4, 1.0, 0.8, compute=0.1)
    need = 0.8 * 0.62
    for share in (0.5, 0.75, need):
        assert run(SharedGPU(partitions=(1.0, share)), [("attn", attention, 0, 1)])["attn"] == pytest.approx(4 * MS)
    for share in (0.25, 0.4):  # below it, the bandwidth its SMs sustain sets the pace
        done = run(SharedGPU(partitions=(1.0, share)), [("attn", attention, 0, 1)])
        assert done["attn"] == pytest.approx(4 * MS * need / share, rel=1e-12)


def test_a_memory_bound_kernel_beside_a_neighbour_holding_44_percent_slows_by_a_few_percent() -> None:
    """The case the linear rule got wrong (1/0.56 = 1.79×). Now: h = 0.56 of the SMs against
    k = max(0.05, 0.95 × 0.62) = 0.589, and 0.95 of the DRAM free for b = 0.95, so the rate
    is 0.56 / 0.589 and it takes 1.052× its 10 ms (measurements on A100-class GPUs: ~1.1×)."""
    done = run(SharedGPU(), [("neighbour", declared(50, 0.44, 0.05, compute=1.0), -1, 0),
                            ("stream", declared(10, 1.0, 0.95), 0, 0)])
    assert done["stream"] == pytest.approx(10 * MS * (0.95 * 0.62) / 0.56, rel=1e-12)
    assert done["stream"] / (10 * MS) == pytest.approx(1.052, abs=0.001)


@pytest.fixture
def gemm_and_attention() -> tuple[KernelProfile, KernelProfile]:
    """A compute-bound GEMM (10 ms, all SMs, 0.3 of DRAM) and a memory-bound decode attention
    (4 ms, a full grid, 0.8 of DRAM, k = 0.496)."""
    return declared(10, 1.0, 0.3, compute=1.0), declared(4, 1.0, 0.8, compute=0.1)


def test_gemm_and_attention_back_to_back_take_the_sum(gemm_and_attention) -> None:
    gemm, attention = gemm_and_attention
    gpu = SharedGPU()
    gpu.launch(0, 0, "gemm", gemm.phases({}, H100) + attention.phases({}, H100), 1.0, 0.0, 0.0)
    gpu.run_until(float("inf"))
    assert gpu.now == pytest.approx(14 * MS)


def test_a_full_grid_attention_given_priority_blocks_the_gemm_without_a_partition(gemm_and_attention) -> None:
    gemm, attention = gemm_and_attention
    done = run(SharedGPU(), [("attn", attention, -1, 0), ("gemm", gemm, 0, 0)])
    assert done == pytest.approx({"attn": 4 * MS, "gemm": 14 * MS})


def test_gemm_and_attention_overlapping_on_a_partition_finish_sooner_by_the_hand_computed_amount(
        gemm_and_attention) -> None:
    """Attention capped at half the SMs (an MPS client at 50 %, priority): it holds 0.5 ≥
    k = 0.496 and draws 0.8 of DRAM at rate 1; the GEMM holds the other 0.5 at rate 0.5
    (its 0.15 of DRAM fits in the 0.2 left). By 4 ms the GEMM has done 2 ms of its work;
    the other 8 run on the whole GPU: 12 ms, 2 ms (14 %) sooner than back to back."""
    gemm, attention = gemm_and_attention
    done = run(SharedGPU(partitions=(1.0, 0.5)), [("attn", attention, -1, 1), ("gemm", gemm, 0, 0)])
    assert done == pytest.approx({"attn": 4 * MS, "gemm": 12 * MS}, rel=1e-12)


def test_a_static_split_that_starves_the_gemm_loses_to_running_back_to_back(gemm_and_attention) -> None:
    """Green contexts of 0.5 each: the GEMM never gets more than half the SMs, 20 ms > 14."""
    gemm, attention = gemm_and_attention
    done = run(SharedGPU(partitions=(0.5, 0.5)), [("attn", attention, -1, 1), ("gemm", gemm, 0, 0)])
    assert done == pytest.approx({"attn": 4 * MS, "gemm": 20 * MS}, rel=1e-12)


def test_oversubscribed_mps_clients_are_bound_by_the_device_as_well() -> None:
    """Caps 0.7 and 0.7 (MPS allows a sum above 1): the first holds 0.7, the second the
    0.3 the device has left, not its 0.7."""
    a, b = declared(7, 1.0, 0.0, compute=1.0), declared(3, 1.0, 0.0, compute=1.0)
    done = run(SharedGPU(partitions=(0.7, 0.7)), [("a", a, 0, 0), ("b", b, 0, 1)])
    # b: 0.3 until a ends at 10 ms (7 ms of work at 0.7): 3 ms done, all of it.
    assert done == pytest.approx({"a": 10 * MS, "b": 10 * MS}, rel=1e-12)


def test_partition_caps_must_be_shares() -> None:
    with pytest.raises(ValueError, match="partition caps"):
        SharedGPU(partitions=(1.0, 1.5))


# -- the service on two lanes ----------------------------------------------------------

LANES = """
name: lanes
device: {{name: generic, sms: 132, saturating_share: 0.62}}
service:
  batching: dynamic
  max_batch: 1
  memory: {{budget: 10 GiB, fixed: 0, per_request: 0}}
  partitions:
    attention_sms: {{share: 0.5, priority: -1}}
  operators:
    - {{name: gemm, family: gemm}}
    - {{name: attention, family: attention{placement}}}
  slo: {{deadline: 1 s}}
families:
  gemm:
    space: {{v: [a]}}
    configs: [{{name: a, params: {{v: a}}, profile: {{latency: 10 ms, sm: 1.0, dram: 0.3, compute: 1.0}}}}]
  attention:
    space: {{v: [a]}}
    configs: [{{name: a, params: {{v: a}}, profile: {{latency: 4 ms, sm: 1.0, dram: 0.8, compute: 0.1}}}}]
regimes:
  one:
    arrivals: {{process: trace, file: one.csv}}
    horizon: 1 s
    warmup: 0
"""


@pytest.mark.parametrize("placement,latency_ms", [("", 14.0), (", partition: attention_sms", 12.0)])
def test_an_operator_on_its_own_partition_runs_beside_the_rest_of_the_batch(
        tmp_path: Path, placement: str, latency_ms: float) -> None:
    """One request at a time: its batch runs the GEMM and the attention back to back (14 ms), or, with
    the attention on a 50 % partition with priority, side by side (12 ms, as worked above)."""
    (tmp_path / "one.csv").write_text("TIMESTAMP\n0.0\n0.5\n")  # two requests, far apart
    path = tmp_path / "lanes.yaml"
    path.write_text(LANES.format(placement=placement))
    problem = load_problem(path)
    result = simulate(problem, resolve_assignment(problem, []), "one")
    assert result.metrics.latency_p50_s == pytest.approx(latency_ms * MS, rel=1e-9)


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace(", partition: attention_sms", ", partition: nope"),
     "service.operators[1].partition: no such partition 'nope' (service.partitions: attention_sms)"),
    (lambda t: t.replace("    warmup: 0\n", "    warmup: 0\n    partitions: {tenant: 0.3}\n"),
     "regimes.one.partitions.tenant: no such partition (service.partitions: attention_sms)"),
    (lambda t: t.replace("{share: 0.5, priority: -1}", "{share: 1.5}"),
     "service.partitions.attention_sms.share"),
])
def test_a_bad_partition_is_one_line_naming_the_key(tmp_path: Path, edit, message: str) -> None:
    from tuner.errors import ProblemError

    (tmp_path / "one.csv").write_text("TIMESTAMP\n0.0\n0.5\n")
    path = tmp_path / "lanes.yaml"
    path.write_text(edit(LANES.format(placement=", partition: attention_sms")))
    with pytest.raises(ProblemError) as raised:
        load_problem(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_partitioned_neighbour_alone_is_judged_on_its_partition() -> None:
    """Its progress ratio is against running alone on its own SMs: a compute-bound
    neighbour capped at 0.6 alone progresses at 0.6 of the device's speed, so a 1 s
    window alone holds 0.6 s of its (10 ms, gapless) kernels' work, not 1 s."""
    from tuner.sim.service import _alone_progress

    phases = declared(10, 1.0, 0.0, compute=1.0).phases({}, H100)
    assert _alone_progress(phases, 0.0, 0.0, 1.0, cap=0.6) == pytest.approx(0.6)
    assert _alone_progress(phases, 0.0, 0.0, 1.0) == pytest.approx(1.0)
    # memory-bound (k = 0.62 × 0.8 = 0.496): a 0.6 cap costs it nothing
    streaming = declared(10, 1.0, 0.8, compute=0.1).phases({}, H100)
    assert _alone_progress(streaming, 0.0, 0.0, 1.0, cap=0.6) == pytest.approx(1.0)


def test_a_trace_names_each_lane_by_its_partition(tmp_path: Path) -> None:
    from tuner.console import stream_names

    (tmp_path / "one.csv").write_text("TIMESTAMP\n0.0\n0.5\n")
    path = tmp_path / "lanes.yaml"
    path.write_text(LANES.format(placement=", partition: attention_sms"))
    assert stream_names(load_problem(path).service) == ["executor 0", "executor 0 on attention_sms"]
