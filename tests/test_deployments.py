"""The two deployment problems built from published numbers (search_spaces/llm_overlap.yaml,
search_spaces/llm_colocated.yaml): they load, a short simulation of each completes
requests, and one behaviour of each that follows from an argument independent of the
simulator's code:

* overlap: a stream alone on the GPU runs every kernel at its isolated speed, so an
  iteration with decode attention moved off its partition (one stream) takes exactly
  the sum of its kernels' isolated times and launch overheads (back to back); with the
  partition, no lane can finish before its own kernels' isolated times add up.
* co-location: MPS caps of 0.4 (LLM) and 0.6 (tenant) sum to 1, so the LLM's kernels
  never take SMs the tenant's cap allows it; at an LLM cap of 1.0 the LLM's earlier
  launches can take all of them. The tenant's progress ratio must drop.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tuner.problem import load_problem, resolve_assignment
from tuner.sim import simulate
from tuner.sim.gpu import SharedGPU
from tuner.sim.program import bind

ROOT = Path(__file__).resolve().parent.parent
OVERLAP = ROOT / "search_spaces" / "llm_overlap.yaml"
COLOCATED = ROOT / "search_spaces" / "llm_colocated.yaml"


@pytest.fixture(scope="module")
def overlap():
    return load_problem(OVERLAP)


@pytest.fixture(scope="module")
def colocated():
    return load_problem(COLOCATED)


def test_both_files_load_with_their_partitions(overlap, colocated) -> None:
    lanes = overlap.service.lanes()
    assert [p.name for p in lanes] == ["device", "attention_sms"]
    assert lanes[1].share == pytest.approx(0.35) and not lanes[1].sized_to_partition
    assert dict(overlap.regimes["heavy_wide"].partition_shares) == {"attention_sms": 0.79}
    assert colocated.service.partition.name == "llm_sms" and colocated.service.partition.sized_to_partition
    assert [n.name for n in colocated.service.neighbors] == ["embedder"]
    assert dict(colocated.regimes["heavy_k8s"].partition_shares) == {"llm_sms": 0.5, "tenant_sms": 0.5}


@pytest.mark.parametrize("which,regime", [("overlap", "heavy"), ("colocated", "heavy")])
def test_a_short_simulation_completes_requests(which, regime, overlap, colocated) -> None:
    problem = {"overlap": overlap, "colocated": colocated}[which]
    result = simulate(problem, resolve_assignment(problem, []), regime, horizon_s=2.0)
    metrics = result.metrics
    assert metrics.arrivals > 10
    assert metrics.completed == metrics.arrivals   # the window's requests are followed to their end
    assert metrics.kernels > 0


# -- overlap: one iteration through the GPU layer, lane by lane ----------------------------

def _iteration_seconds(problem, service, variables) -> tuple[float, list[float]]:
    """Run one iteration's program: each lane a stream launching its kernels one after
    another (launch overhead before each), all lanes starting at 0. Returns the time the
    last lane ends, and each lane's back-to-back time (its kernels' isolated seconds plus
    overheads)."""
    bound = bind(service, resolve_assignment(problem, []), problem.size_fields, allow_merge=False)
    program = bound.program(variables)
    partitions = service.partitions()
    gpu = SharedGPU(partitions=tuple(p.exact_share(service.device) for p in partitions))
    lanes = service.lanes()
    overhead = service.launch_overhead_s
    position = [0] * len(program.lanes)

    def launch(lane: int, now: float) -> None:
        tag, phases = program.lanes[lane][position[lane]]
        gpu.launch(service.priority + lanes[lane].priority, lane, lane, phases, 1.0, overhead, now,
                   partitions.index(lanes[lane]))

    for lane, launches in enumerate(program.lanes):
        if launches:
            launch(lane, 0.0)
    end = 0.0
    while (kernel := gpu.run_until(float("inf"))) is not None:
        lane = kernel.tag
        position[lane] += 1
        end = gpu.now
        if position[lane] < len(program.lanes[lane]):
            launch(lane, gpu.now)
    alone = [sum(overhead + sum(p[0] for p in phases) for _, phases in launches) for launches in program.lanes]
    return end, alone


# A decode-only iteration of 64 sequences at ~1.3k tokens of context, and a mixed one
# (960 prefill tokens beside 64 decodes), as the heavy regime runs them.
ITERATIONS = {
    "decode": {"batch": 64, "tokens": 64, "prefill_tokens": 0, "decode_seqs": 64,
               "context": 64 * 1300, "max_context": 2048},
    "mixed": {"batch": 65, "tokens": 1024, "prefill_tokens": 960, "decode_seqs": 64,
              "context": 64 * 1300 + 960, "max_context": 2048},
}


@pytest.mark.parametrize("iteration", sorted(ITERATIONS))
def test_decode_attention_off_its_partition_runs_back_to_back(overlap, iteration) -> None:
    service = overlap.service_for("heavy")
    variables = ITERATIONS[iteration]
    # Decode attention moved off its partition: one stream, kernels strictly in turn.
    off = dataclasses.replace(service, operators=tuple(dataclasses.replace(op, partition=None)
                                                       for op in service.operators))
    assert len(off.lanes()) == 1
    seconds_off, (back_to_back,) = _iteration_seconds(overlap, off, variables)
    assert seconds_off == pytest.approx(back_to_back, rel=1e-9)
    # On its partition the attention lane runs beside the rest: neither lane can end
    # before its own kernels' isolated times (plus overheads) add up.
    seconds_on, lanes_alone = _iteration_seconds(overlap, service, variables)
    assert len(lanes_alone) == 2 and all(t > 0 for t in lanes_alone)
    assert seconds_on >= max(lanes_alone) * (1 - 1e-9)
    # The attention lane, timed on its 35% partition (sized to the device), is no faster
    # than the same kernels timed on the whole device.
    attention_alone_whole = back_to_back - lanes_alone[0]
    assert lanes_alone[1] >= attention_alone_whole * (1 - 1e-9)


# -- co-location: the tenant's progress against the LLM's MPS cap ----------------------------

def _with_llm_share(problem, share: float):
    heavy = problem.regimes["heavy"]
    regime = dataclasses.replace(heavy, name="probe", partition_shares=(("llm_sms", share),))
    return dataclasses.replace(problem, regimes={**problem.regimes, "probe": regime})


def test_the_tenant_progresses_less_when_the_llm_cap_grows(colocated) -> None:
    ratios = {}
    for share in (0.4, 1.0):
        problem = _with_llm_share(colocated, share)
        assert problem.service_for("probe").partition.share == share
        result = simulate(problem, resolve_assignment(problem, []), "probe", horizon_s=2.0)
        ratios[share] = result.metrics.neighbor_progress_ratio
    assert 0.0 < ratios[1.0] < ratios[0.4] <= 1.0 + 1e-9  # alone on its partition: 1


# -- tensor parallel: all-reduces on a communication stream beside the GEMMs ---------------

TP = ROOT / "search_spaces" / "llm_tp_overlap.yaml"


def test_the_tensor_parallel_file_puts_two_all_reduces_a_layer_on_the_comm_stream() -> None:
    problem = load_problem(TP)
    lanes = problem.service.lanes()
    assert [p.name for p in lanes] == ["device", "comm_stream"] and lanes[1].share == 1.0
    bound = bind(problem.service, resolve_assignment(problem, []), problem.size_fields, allow_merge=False)
    program = bound.program(ITERATIONS["decode"])
    compute, comm = program.lanes
    assert len(comm) == 2 * 80 and all(tag.endswith(":all_reduce") for tag, _ in comm)
    # NCCL's 16 channels hold 16 of 132 SMs for one wave each
    assert {phases[0][1] for _, phases in comm} == {16 / 132} and {phases[0][4] for _, phases in comm} == {1.0}


def test_nccl_channels_hold_every_all_reduce_to_its_count_at_start_up() -> None:
    """The knob pins each all-reduce's channels whatever its config: at 8 it holds 8 of
    132 SMs and runs as the link model prices 8 channels, 8 x 36.7 GB/s = 294 GB/s below
    the 367 GB/s ring bus bandwidth (tuner.profile.interconnect), so it is slower than at
    NCCL's own 16, which fill the link."""
    from tuner.profile.interconnect import NVLINK4

    problem = load_problem(TP)
    assert problem.service.collective_channels is None and "nccl_channels" in problem.knobs.names
    times = {}
    for channels in (None, 8):
        variant = problem.with_knobs({"nccl_channels": channels}) if channels else problem
        bound = bind(variant.service, resolve_assignment(problem, []), problem.size_fields, allow_merge=False)
        _, comm = bound.program(ITERATIONS["decode"]).lanes
        assert {phases[0][1] for _, phases in comm} == {(channels or 16) / 132}
        times[channels] = comm[0][1][0][0]
    tokens = ITERATIONS["decode"]["tokens"]
    nbytes = tokens * 8192 * 2
    assert times[8] == pytest.approx(NVLINK4.latency_s + NVLINK4.latency_per_peer_s * 7 + 2 * 7 / 8 * nbytes / (8 * 36.7e9), rel=1e-9)
    assert times[None] == pytest.approx(NVLINK4.seconds("all_reduce", nbytes, 8, 16), rel=1e-9)
    assert times[8] > times[None]


def test_a_persistent_gemm_sized_to_every_sm_loses_a_round_beside_the_all_reduce() -> None:
    # The down projection of a 1024-token iteration (M=1024, N=8192, K=3584) as one
    # persistent grid sized to all 132 SMs (two CTAs per SM, its compiled occupancy: 264),
    # launched while an all-reduce holds 16 SMs: on 116 free SMs (232 slots) its CTAs take two rounds,
    # so it takes up to twice its time alone (less only by the share of its time that is
    # not SM-bound, k/s < 1, which fewer rounds do not slow); sized to 132 - 16 it keeps
    # its own isolated time.
    problem = load_problem(TP)
    configs = {c.name: c for c in problem.families["gemm"].configs}
    full = next(c for n, c in configs.items() if "_p1_sm0_" in n and "bm128" in n)
    margin = next(c for n, c in configs.items() if "_p1_sm16_" in n and "bm128" in n)
    comm = problem.families["allreduce"].configs[0]
    shape = {"M": 1024, "N": 8192, "K": 3584}
    device = problem.service.device

    def beside_collective(config) -> tuple[float, float]:
        ((_, gemm),) = config.profile.launches(shape, device, "down")
        ((_, ar),) = comm.profile.launches({"M": 100_000, "N": 8192}, device, "ar")   # outlasts the GEMM
        gpu = SharedGPU(sms=device.sms)
        gpu.launch(-1, 0, "ar", ar, 1.0, 0.0, 0.0)
        gpu.launch(0, 1, "gemm", gemm, 1.0, 0.0, 0.0)
        while (kernel := gpu.run_until(float("inf"))) is not None:
            if kernel.tag == "gemm":
                return gpu.now, sum(p[0] for p in gemm)
        raise AssertionError

    with_full, alone_full = beside_collective(full)
    with_margin, alone_margin = beside_collective(margin)
    assert full.profile.at(shape).plan.launches[0].grid == 2 * 132
    assert 1.6 * alone_full <= with_full <= 2.0 * alone_full * (1 + 1e-9)
    assert with_margin == pytest.approx(alone_margin, rel=1e-9)
    assert with_margin < with_full


def test_the_mechanism_line_names_the_round_a_full_device_grid_loses_beside_the_all_reduce() -> None:
    # As above: down's 1024-token bucket as a persistent grid sized to all 132 SMs runs
    # 2 rounds beside the 16 SMs NCCL's channels hold, sized to 132 - 16 one; alone one each.
    from tuner.search.summary import mechanism
    from tuner.search.space import JointSpace

    problem = load_problem(TP)
    configs = {c.name: c for c in problem.families["gemm"].configs}
    full = next(c for n, c in configs.items() if "_p1_sm0_" in n and "bm128" in n)
    margin = next(c for n, c in configs.items() if "_p1_sm16_" in n and "bm128" in n)
    default = resolve_assignment(problem, [])
    base, tuned = (default.replace({("down", 1): c}) for c in (full, margin))
    line = mechanism(JointSpace.of(problem), tuned, base)
    assert "waves: down[1] beside 16 SMs runs its CTAs in rounds: baseline 2, tuned 1 (alone: 1, 1)" in line
