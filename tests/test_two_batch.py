"""Two-batch overlap (``service.overlap: two_batch``) on hand-worked schedules.

Sequence A (prompt 1, output 2) and B (prompt 1, output 1) arrive together; A's prefill
runs alone (the executor is idle when it arrives), as one micro-batch that cannot overlap
itself: 10 + c + 10 + c. The next iteration (A's decode token, B's prompt token) splits
into micro-batches A and B of one token each, and ends both requests. One layer: gemm1, all-reduce 1 (on the communication stream), gemm2, all-reduce 2.
A GEMM takes 10 ms per token and holds 0.6 of the SMs, an all-reduce ``c`` ms per token
and 0.1: they never contend, so every kernel runs at its isolated speed and the schedule
is the dependencies' alone (times from the second iteration's start):

c = 4 ms (communication hidden):
    compute  A.gemm1 [0,10]  B.gemm1 [10,20]  A.gemm2 [20,30] (A.ar1 ended at 14)  B.gemm2 [30,40]
    comm     A.ar1 [10,14]   B.ar1 [20,24]    A.ar2 [30,34]   B.ar2 [40,44]      -> 44 ms
c = 15 ms (communication-bound):
    compute  A.gemm1 [0,10]  B.gemm1 [10,20]  A.gemm2 [25,35] (waits A.ar1)  B.gemm2 [40,50] (waits B.ar1)
    comm     A.ar1 [10,25]   B.ar1 [25,40]    A.ar2 [40,55]   B.ar2 [55,70]      -> 70 ms

Without the split (``independent``) the lanes run side by side with no dependency, the
batch ending at the later: the first iteration max(20, 2c), the second (two tokens)
max(40, 4c).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_service import trace_file
from tuner.errors import ProblemError
from tuner.problem.assignment import Assignment
from tuner.sim import simulate

MS = 1e-3


def overlapped(trace: str, comm_ms: float, overlap: str | None = "two_batch") -> dict:
    service = {
        "batching": "continuous", "max_batch": 2, "max_tokens": 8, "max_context": 64,
        "memory": {"budget": "10 GiB", "fixed": "1 GiB", "per_request": "MiB * (prompt + output)"},
        "partitions": {"comm_stream": {"share": 1.0, "sized_to": "device", "priority": -1}},
        "operators": [
            {"name": "gemm1", "family": "gemm", "shape": {"T": "tokens"}},
            {"name": "ar1", "family": "comm", "shape": {"T": "tokens"}, "partition": "comm_stream"},
            {"name": "gemm2", "family": "gemm", "shape": {"T": "tokens"}},
            {"name": "ar2", "family": "comm", "shape": {"T": "tokens"}, "partition": "comm_stream"},
        ],
        "slo": {"ttft": "1 s", "tpot": "1 s"},
    }
    if overlap is not None:
        service["overlap"] = overlap
    return {
        "name": "tbo",
        "service": service,
        "families": {
            "gemm": {"space": {"v": [1]}, "configs": [
                {"name": "g", "params": {"v": 1}, "profile": {"latency": "10 ms * T", "sm": 0.6, "dram": 0.0}}]},
            "comm": {"space": {"v": [1]}, "configs": [
                {"name": "c", "params": {"v": 1}, "profile": {"latency": f"{comm_ms} ms * T", "sm": 0.1, "dram": 0.0}}]},
        },
        "regimes": {"replay": {
            "arrivals": {"process": "trace", "file": trace, "offset": 0, "time_column": "t",
                         "columns": {"prompt": "prompt", "output": "output"}},
            "horizon": "20 s", "warmup": 0}},
    }


def two_at_once(tmp_path: Path) -> str:
    """A and B of the module's docstring, arriving together (and a far third: traces cycle)."""
    return trace_file(tmp_path, [(0, 1, 2), (0, 1, 1), (100, 1, 1)], "t,prompt,output")


@pytest.mark.parametrize("comm_ms,overlap,latency_ms", [
    (4.0, "two_batch", 28.0 + 44.0), (15.0, "two_batch", 50.0 + 70.0),
    (4.0, None, 20.0 + 40.0), (15.0, None, 30.0 + 60.0),
])
def test_the_iteration_ends_where_the_hand_worked_schedule_does(tmp_path, write_problem, comm_ms, overlap,
                                                                 latency_ms) -> None:
    problem = write_problem(overlapped(two_at_once(tmp_path), comm_ms, overlap))
    m = simulate(problem, Assignment.default(problem), "replay").metrics
    assert m.completed == 2
    assert m.latency_p50_s == pytest.approx(latency_ms * MS, rel=1e-9)
    assert m.kernels == (12 if overlap else 8)


def test_each_kernel_starts_when_its_dependency_and_its_stream_allow(tmp_path, write_problem) -> None:
    problem = write_problem(overlapped(two_at_once(tmp_path), 15.0))
    recording = simulate(problem, Assignment.default(problem), "replay", record=True).recording
    second = 50.0   # the first iteration: 10 + 15 + 10 + 15
    slices = sorted((stream, round(start / MS - second, 6), round(end / MS - second, 6))
                    for stream, _, start, end in recording.slices if start >= second * MS)
    assert slices == [(0, 0.0, 10.0), (0, 10.0, 20.0), (0, 25.0, 35.0), (0, 40.0, 50.0),
                      (1, 10.0, 25.0), (1, 25.0, 40.0), (1, 40.0, 55.0), (1, 55.0, 70.0)]


def test_a_lone_sequence_runs_its_one_micro_batch_in_series(tmp_path, write_problem) -> None:
    trace = trace_file(tmp_path, [(0, 1, 1), (100, 1, 1)], "t,prompt,output")   # only A's prefill
    problem = write_problem(overlapped(trace, 4.0))
    m = simulate(problem, Assignment.default(problem), "replay").metrics
    assert m.latency_p50_s == pytest.approx((10 + 4 + 10 + 4) * MS, rel=1e-9)


def test_the_split_balances_tokens_without_splitting_a_sequence() -> None:
    from tuner.sim.batching import _balanced_cut

    assert _balanced_cut([(0, 1), (1, 1), (2, 1), (3, 1)]) == 2
    assert _balanced_cut([(0, 1), (1, 1), (2, 6)]) == 2          # 2 | 6: the best cut
    assert _balanced_cut([(0, 100), (1, 1)]) == 1                 # a sequence each


def dynamic(document: dict) -> None:
    service = document["service"]
    service.update(batching="dynamic", slo={"deadline": "1 s"})
    del service["max_tokens"], service["max_context"]
    for op in service["operators"]:
        op["shape"] = {"T": "batch"}


@pytest.mark.parametrize("edit,message", [
    (dynamic, "service.overlap: two_batch splits a continuous-batching iteration's sequences"),
    (lambda d: [op.pop("partition", None) for op in d["service"]["operators"]],
     "service.overlap: two_batch overlaps operators on another partition"),
])
def test_two_batch_without_what_it_needs_is_one_line(tmp_path, write_problem, edit, message) -> None:
    document = overlapped(two_at_once(tmp_path), 4.0)
    edit(document)
    with pytest.raises(ProblemError) as raised:
        write_problem(document)
    assert message in str(raised.value) and "\n" not in str(raised.value)
