"""The fluid GPU layer's limit cases (DESIGN §4), checked exactly on hand-worked schedules."""

from __future__ import annotations

import math

import pytest

from tuner.sim.gpu import SharedGPU

MS = 1e-3


def finish_times(gpu: SharedGPU) -> dict[object, float]:
    """Run the GPU dry; return each kernel's finish time by tag."""
    done = {}
    while (kernel := gpu.run_until(math.inf)) is not None:
        done[kernel.tag] = gpu.now
    return done


def launch(gpu: SharedGPU, tag: str, phases, *, stream: int, now: float = 0.0, priority: int = 0, overhead: float = 0.0,
           partition: int = 0):
    """Phases given as ``(seconds, s, b)`` are compute-bound (``k = s``), as every kernel was
    before the GPU layer knew memory-bound ones need fewer SMs."""
    phases = tuple(p if len(p) == 5 else (*p, 0.0) if len(p) == 4 else (*p, p[1], 0.0) for p in phases)
    return gpu.launch(priority, stream, tag, phases, 1.0, overhead, now, partition)


def test_lone_kernel_takes_its_isolated_latency():
    gpu = SharedGPU()
    launch(gpu, "a", [(5 * MS, 0.7, 0.3)], stream=0)
    assert finish_times(gpu) == {"a": 5 * MS}


def test_lone_kernel_with_waves_and_launch_overhead_takes_latency_plus_overhead():
    gpu = SharedGPU()
    launch(gpu, "a", [(2 * MS, 1.0, 0.5), (1 * MS, 0.25, 0.125)], stream=0, overhead=4e-6)
    assert finish_times(gpu)["a"] == pytest.approx(3 * MS + 4e-6, rel=1e-12)


def test_kernels_whose_demands_sum_below_one_do_not_slow_each_other():
    gpu = SharedGPU()
    launch(gpu, "a", [(3 * MS, 0.4, 0.3)], stream=0)
    launch(gpu, "b", [(5 * MS, 0.5, 0.6)], stream=1)
    launch(gpu, "c", [(1 * MS, 0.1, 0.1)], stream=2, now=0.0)
    assert finish_times(gpu) == {"a": 3 * MS, "b": 5 * MS, "c": 1 * MS}


def test_saturating_kernels_share_work_conservingly():
    gpu = SharedGPU()
    launch(gpu, "a", [(3 * MS, 1.0, 0.2)], stream=0)
    launch(gpu, "b", [(5 * MS, 1.0, 0.2)], stream=1)
    times = finish_times(gpu)
    assert times["a"] == pytest.approx(3 * MS, rel=1e-12)
    assert times["b"] == pytest.approx(8 * MS, rel=1e-12)  # the sum of their isolated work


def test_partial_sharing_gives_the_later_kernel_what_is_left():
    # a holds 0.75 of the SMs; b wants 0.5, gets 0.25/0.5 = rate 0.5 until a ends at 4 ms,
    # having done 2 ms of its 6 ms; the remaining 4 ms run at rate 1: b ends at 8 ms.
    gpu = SharedGPU()
    launch(gpu, "a", [(4 * MS, 0.75, 0.0)], stream=0)
    launch(gpu, "b", [(6 * MS, 0.5, 0.0)], stream=1)
    times = finish_times(gpu)
    assert times == pytest.approx({"a": 4 * MS, "b": 8 * MS}, rel=1e-12)


def test_bandwidth_binds_like_sm_slots():
    # b draws 0.8 of DRAM bandwidth; with a drawing 0.6 it gets 0.4/0.8 = rate 0.5.
    gpu = SharedGPU()
    launch(gpu, "a", [(2 * MS, 0.1, 0.6)], stream=0)
    launch(gpu, "b", [(3 * MS, 0.1, 0.8)], stream=1)
    times = finish_times(gpu)
    assert times == pytest.approx({"a": 2 * MS, "b": 4 * MS}, rel=1e-12)  # 1 ms done by 2 ms, 2 ms left


def test_persistent_kernel_delays_a_later_kernel_on_another_stream():
    gpu = SharedGPU()
    launch(gpu, "persistent", [(5 * MS, 1.0, 0.3)], stream=0)
    assert gpu.run_until(1 * MS) is None
    launch(gpu, "small", [(1 * MS, 0.1, 0.05)], stream=1, now=1 * MS)
    assert finish_times(gpu) == pytest.approx({"persistent": 5 * MS, "small": 6 * MS}, rel=1e-12)


def test_cooperative_kernel_lets_a_later_kernel_run_beside_it():
    gpu = SharedGPU()
    launch(gpu, "cooperative", [(5 * MS, 0.5, 0.3)], stream=0)
    gpu.run_until(1 * MS)
    launch(gpu, "small", [(1 * MS, 0.1, 0.05)], stream=1, now=1 * MS)
    assert finish_times(gpu) == pytest.approx({"cooperative": 5 * MS, "small": 2 * MS}, rel=1e-12)


def test_tail_wave_leaves_room_for_a_co_running_kernel():
    # a: two full waves (2 ms at s=1), then a tail wave holding half the SMs (1 ms).
    # b (s=0.5, 1 ms) waits through the full waves, then runs beside the tail.
    gpu = SharedGPU()
    launch(gpu, "a", [(2 * MS, 1.0, 0.0), (1 * MS, 0.5, 0.0)], stream=0)
    launch(gpu, "b", [(1 * MS, 0.5, 0.0)], stream=1)
    assert finish_times(gpu) == pytest.approx({"a": 3 * MS, "b": 3 * MS}, rel=1e-12)


def test_stream_priority_goes_before_launch_order():
    gpu = SharedGPU()
    launch(gpu, "low", [(4 * MS, 1.0, 0.0)], stream=0, priority=1)
    launch(gpu, "high", [(1 * MS, 1.0, 0.0)], stream=1, priority=0)
    assert finish_times(gpu) == pytest.approx({"high": 1 * MS, "low": 5 * MS}, rel=1e-12)


def test_sm_time_integral_and_peak_cover_the_window_only():
    gpu = SharedGPU(window_s=4 * MS)
    launch(gpu, "a", [(6 * MS, 0.5, 0.0)], stream=0)
    launch(gpu, "b", [(2 * MS, 0.25, 0.0)], stream=1)
    finish_times(gpu)
    # R = 0.75 for 2 ms, then 0.5; window ends at 4 ms.
    assert gpu.sm_seconds(10 * MS) == pytest.approx(0.75 * 2 * MS + 0.5 * 2 * MS, rel=1e-12)
    assert gpu.sm_peak == pytest.approx(0.75)
