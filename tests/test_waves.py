"""Discrete waves and resident CTAs (issue 24): hand-worked schedules on a 132-SM H100.

Every expectation is counted by hand from CTAs, SMs and waves, never from the code's
output: a grid of G one-per-SM CTAs on f free SMs runs ceil(G / f) waves; a persistent grid
holds its SMs until it ends; a kernel waiting behind a many-wave grid gets SMs at that
grid's next wave boundary, whatever its priority.
"""

from __future__ import annotations

import math

import pytest

from tuner.phases import wave_phases
from tuner.sim.gpu import SharedGPU, wave_rate

MS = 1e-3
SMS = 132


def compute_bound(latency_s: float, ctas: int, persistent: bool = False):
    """A compute-bound kernel of ``ctas`` one-per-SM CTAs (its need k = s)."""
    return wave_phases(latency_s, ctas, SMS, 0.0, persistent, compute=1.0)


def holder(latency_s: float, sms: int):
    """A kernel that holds ``sms`` SMs for its whole life (a NCCL-like collective: one CTA
    per channel, one wave)."""
    return compute_bound(latency_s, sms, persistent=True)


def run(launches: list[tuple[str, tuple, int, float]]) -> dict[str, float]:
    """Launch (tag, phases, priority, at) on separate streams of a 132-SM GPU; finish
    times by tag (a 1 ms collective that ends at t started at t - 1 ms: once it holds
    its SMs nothing slows it)."""
    gpu = SharedGPU(sms=SMS)
    done: dict[str, float] = {}
    pending = sorted(enumerate(launches), key=lambda item: item[1][3])
    for stream, (tag, phases, priority, at) in pending:
        while gpu.next_time <= at:
            finished = gpu.run_until(at)
            if finished is not None:
                done[finished.tag] = gpu.now
        gpu.launch(priority, stream, tag, phases, 1.0, 0.0, at)
    while (finished := gpu.run_until(math.inf)) is not None:
        done[finished.tag] = gpu.now
    return done


def test_phases_count_waves() -> None:
    # 2048 CTAs on 132 SMs: 15 full waves of 132 and a tail of 68, 1 ms each
    assert [(p[1], p[4]) for p in compute_bound(16 * MS, 2048)] == [(1.0, 15.0), (68 / SMS, 1.0)]
    assert [(p[1], p[4]) for p in compute_bound(MS, 116, persistent=True)] == [(116 / SMS, 1.0)]


def test_alone_every_kernel_takes_its_isolated_latency() -> None:
    done = run([("waves", compute_bound(16 * MS, 2048), 0, 0.0)])
    assert done["waves"] == pytest.approx(16 * MS, rel=1e-12)
    done = run([("persistent", compute_bound(10 * MS, SMS, persistent=True), 0, 0.0)])
    assert done["persistent"] == pytest.approx(10 * MS, rel=1e-12)


def test_2048_ctas_take_16_waves_on_132_sms_and_18_on_119() -> None:
    # ceil(2048 / 132) = 16 waves of 1 ms alone; beside a kernel holding 13 SMs,
    # ceil(2048 / 119) = 18 (a fluid GPU would say 16 × 132/119 = 17.7 ms)
    done = run([("nccl", holder(100 * MS, 13), 0, 0.0), ("gemm", compute_bound(16 * MS, 2048), 0, 0.0)])
    assert done["gemm"] == pytest.approx(18 * MS, rel=1e-9)


def test_a_persistent_grid_sized_to_every_sm_takes_two_rounds_on_119() -> None:
    # 132 CTAs, one per SM, meet 119 free SMs: 13 wait a whole round (PyTorch #144974:
    # "wave quantization can double the latency")
    done = run([("nccl", holder(100 * MS, 13), 0, 0.0),
                   ("gemm", compute_bound(10 * MS, SMS, persistent=True), 0, 0.0)])
    assert done["gemm"] == pytest.approx(20 * MS, rel=1e-9)


def test_the_same_grid_with_a_margin_of_16_takes_one_round() -> None:
    # sized to 132 - 16 = 116 SMs it fits in the 119 free ones: its own isolated time
    # (longer alone than the full grid's, which the kernel's model prices), no second round
    done = run([("nccl", holder(100 * MS, 13), 0, 0.0),
                   ("gemm", compute_bound(11 * MS, 116, persistent=True), 0, 0.0)])
    assert done["gemm"] == pytest.approx(11 * MS, rel=1e-12)


def test_a_waiting_kernel_starts_when_it_first_runs() -> None:
    gpu = SharedGPU(sms=SMS)
    gpu.launch(0, 0, "gemm", compute_bound(10 * MS, SMS, persistent=True), 1.0, 0.0, 0.0)
    gpu.run_until(2 * MS)
    nccl = gpu.launch(-1, 1, "nccl", holder(1 * MS, 13), 1.0, 0.0, 2 * MS)
    while gpu.run_until(math.inf) is not None:
        pass
    assert nccl.started == pytest.approx(10 * MS, rel=1e-12)   # launched at 2 ms, ran from 10 ms


def test_a_priority_kernel_behind_a_persistent_grid_starts_when_it_ends() -> None:
    # resident CTAs are not preempted: the higher-priority (lower number) collective
    # launched at 2 ms waits for the persistent grid's end at 10 ms
    done = run([("gemm", compute_bound(10 * MS, SMS, persistent=True), 0, 0.0),
                         ("nccl", holder(1 * MS, 13), -1, 2 * MS)])
    assert done == pytest.approx({"gemm": 10 * MS, "nccl": 11 * MS}, rel=1e-12)


def test_a_priority_kernel_behind_a_many_wave_grid_starts_at_its_next_wave_boundary() -> None:
    # 16 full waves of 1 ms; the collective launched at 2.5 ms gets its 13 SMs when the
    # third wave's CTAs end, at 3 ms, and runs its 1 ms there
    done = run([("gemm", compute_bound(16 * MS, 16 * SMS), 0, 0.0),
                         ("nccl", holder(1 * MS, 13), -1, 2.5 * MS)])
    assert done["nccl"] == pytest.approx(4 * MS, rel=1e-12)
    # the grid lost 13 SMs for 1 ms: at least 13 SM·ms of work later than alone, at most
    # the whole wave it could not start (13 waves left ran 15 rounds on 119 SMs until 4 ms)
    assert 16 * MS + 13 / SMS * MS - 1e-12 <= done["gemm"] <= 17 * MS + 1e-12


def test_a_same_priority_kernel_launched_later_waits_for_the_grids_tail() -> None:
    # launch order decides among equal priorities: the grid's pending CTAs go first, so
    # the later kernel starts when the grid's full waves are done and its tail (68 of 132
    # SMs) leaves room: 15 ms, ending with the tail at 16 ms
    done = run([("gemm", compute_bound(16 * MS, 2048), 0, 0.0), ("nccl", holder(1 * MS, 13), 0, 2.5 * MS)])
    assert done == pytest.approx({"gemm": 16 * MS, "nccl": 16 * MS}, rel=1e-12)


def test_wave_rate_is_the_rounds_ratio() -> None:
    assert wave_rate(1.0, 1.0, 119 / SMS, 16, SMS) == pytest.approx(16 / 18)
    assert wave_rate(1.0, 1.0, 119 / SMS, 1, SMS) == pytest.approx(1 / 2)
    assert wave_rate(1.0, 1.0, 1.0, 1, SMS) == 1.0
    assert wave_rate(1.0, 1.0, 0.5 / SMS, 1, SMS) == 0.0   # not one whole SM
    # a memory-bound phase (k = 0.3) keeps its speed while its rounds leave it 1/2 ≥ 0.3
    assert wave_rate(1.0, 0.3, 119 / SMS, 1, SMS) == 1.0
