"""The launch memo: an operator's launches are recomputed only when the variables its
shape reads change, shared across simulations, and never change a result."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tuner.problem import KernelProfile, load_problem
from tuner.problem.assignment import Assignment
from tuner.sim import BUILD, program, simulate

LLM_DECODE = Path(__file__).parent.parent / "tuner" / "search_spaces" / "llm_decode.yaml"


def two_operator_service(trace: str) -> dict:
    """A GEMM whose shape reads ``tokens`` only and an attention whose shape reads
    ``max_context`` only, under continuous batching (max_context grows every iteration)."""
    return {
        "name": "memo",
        "service": {
            "batching": "continuous", "max_batch": 4, "max_tokens": 4, "max_context": 256,
            "memory": {"budget": "10 GiB", "fixed": "1 GiB", "per_request": "MiB * (prompt + output)"},
            "operators": [{"name": "gemm", "family": "f", "shape": {"M": "tokens"}},
                          {"name": "attn", "family": "f", "shape": {"C": "max_context"}}],
            "slo": {"ttft": "1 s", "tpot": "1 s"},
        },
        "families": {"f": {"space": {"v": [1]}, "configs": [
            {"name": "one", "params": {"v": 1}, "profile": {"latency": "1 ms", "sm": 0.5}}]}},
        "regimes": {"replay": {
            "arrivals": {"process": "trace", "file": trace, "offset": 0, "time_column": "t",
                         "columns": {"prompt": "prompt", "output": "output"}},
            "horizon": "20 s", "warmup": 0}},
    }


@pytest.fixture
def counted(monkeypatch) -> Counter:
    """Calls to the launch builder, by operator."""
    calls: Counter = Counter()
    original = KernelProfile.launches

    def launches(self, variables, device, tag, *args):
        calls[tag] += 1
        return original(self, variables, device, tag, *args)

    monkeypatch.setattr(KernelProfile, "launches", launches)
    return calls


def test_a_shape_that_does_not_read_a_variable_reuses_its_launches(tmp_path, write_problem, counted):
    # Two requests decoding side by side, once (the trace spans the horizon): nearly every
    # iteration has a new max_context, but the token budget allows only 4 token counts.
    (tmp_path / "requests.csv").write_text("t,prompt,output\n0,1,40\n0.0001,1,20\n20,1,1\n")
    problem = write_problem(two_operator_service("requests.csv"))
    result = simulate(problem, Assignment.default(problem), "replay")
    assert result.metrics.completed == 2
    iterations = result.metrics.kernels // 2
    assert iterations > 30
    assert counted["gemm"] <= 4  # one per token count, whatever the context
    assert counted["attn"] >= 30  # a new max_context nearly every iteration


def test_a_second_simulation_builds_no_launch_and_matches_the_first(tmp_path, write_problem, counted):
    (tmp_path / "requests.csv").write_text("t,prompt,output\n0,3,30\n0.002,5,12\n20,1,1\n")
    problem = write_problem(two_operator_service("requests.csv"))
    first = simulate(problem, Assignment.default(problem), "replay")
    built = sum(counted.values())
    second = simulate(problem, Assignment.default(problem), "replay")
    assert sum(counted.values()) == built  # every launch from the shared memo
    assert second.metrics == first.metrics
    assert second.visited == first.visited


@pytest.mark.skipif(BUILD.compiled, reason="compiled code calls program() directly, past the patch; "
                                           "tests/test_native.py reruns this file on pure Python")
def test_memoised_results_equal_an_unmemoised_run(monkeypatch):
    """Every bit of the metrics and the visited cells, against a run that forgets every
    memo (shared by operator, and per program) before each iteration."""
    problem = load_problem(LLM_DECODE)
    assignment = Assignment.default(problem)
    memoised = simulate(problem, assignment, "heavy", horizon_s=2.0)

    original = program.BoundService.program

    def forgetful(self, variables):
        for ops, _ in self.blocks:
            for op in ops:
                op.shared.by_vars.clear()
                op.shared.entries.clear()
        self._cache.clear()
        return original(self, variables)

    monkeypatch.setattr(program.BoundService, "program", forgetful)
    unmemoised = simulate(problem, assignment, "heavy", horizon_s=2.0)
    assert unmemoised.metrics.kernels > 10_000
    assert repr(unmemoised.metrics) == repr(memoised.metrics)
    assert unmemoised.visited == memoised.visited


def test_the_memos_are_the_problems_and_its_knob_variants_share_them(tmp_path, write_problem, counted):
    """The memos live with the problem whose profiles they memoise: a knob variant (the
    same configs) shares them, another load of the file starts its own."""
    (tmp_path / "requests.csv").write_text("t,prompt,output\n0,3,30\n0.002,5,12\n20,1,1\n")
    spec = two_operator_service("requests.csv")
    spec["service"]["knobs"] = {"max_num_seqs": [4, 2]}
    problem = write_problem(spec)
    variant = problem.with_knobs({"max_num_seqs": 2})
    assert variant.service != problem.service
    assert program.launch_memos(variant) is program.launch_memos(problem)
    simulate(problem, Assignment.default(problem), "replay")
    built = sum(counted.values())
    simulate(variant, Assignment.default(variant), "replay")
    assert sum(counted.values()) == built  # the variant's launches came from the problem's memos
    again = load_problem(problem.path)
    assert program.launch_memos(again) is not program.launch_memos(problem)
    simulate(again, Assignment.default(again), "replay")
    assert sum(counted.values()) > built  # another problem: its own launches
