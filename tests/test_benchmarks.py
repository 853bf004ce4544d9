"""The simulator benchmark runs, its two M/D/c models agree, and the docs quote only
what the benchmarks recorded.

No timing is asserted here: throughput targets belong to ``benchmarks/``, whose numbers
depend on the machine. What is checked is that the benchmark completes in ``--quick``
mode and that its comparison is apples to apples (tuner and SimPy simulate the same
queue on the same arrivals, so they must report the same waits); and, without running
any benchmark, that every figure README.md and docs/ mark is what the last record in
``benchmarks/results/`` gives, and that no benchmark-looking number sits outside markers
(``benchmarks/figures.py --check``).
"""

from __future__ import annotations

import heapq
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("simpy")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_simulator.py"
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their shared `recorded`

import figures  # noqa: E402
import recorded  # noqa: E402


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_simulator", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_simulator", module)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


@pytest.fixture(scope="module")
def quick_report() -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def test_quick_run_completes_every_case(quick_report: dict) -> None:
    cases = {c["name"]: c for c in quick_report["cases"]}
    assert set(cases) == {"M/D/c tuner", "M/D/c SimPy", "dynamic tuner", "continuous tuner"}
    for case in cases.values():
        assert case["completions"] > 0
        assert case["wall_s_best"] > 0.0
        assert case["per_s"] == pytest.approx(case["completions"] / case["wall_s_best"])
    assert cases["M/D/c tuner"]["ratio_vs_simpy"] > 0.0
    # continuous batching: 160 kernels per iteration plus the neighbour's
    assert cases["continuous tuner"]["completions"] > 160 * cases["continuous tuner"]["extra"]["completed"]


def test_tuner_and_simpy_mean_waits_agree(quick_report: dict) -> None:
    cross = quick_report["cross_check"]
    assert cross["agree"]
    waits = cross["wait_mean_s"]
    assert waits["tuner"] > 0.0  # at ρ = 0.9 requests do queue
    assert waits["tuner"] == pytest.approx(waits["simpy"], rel=0.03)
    assert cross["completions"]["tuner"] == cross["completions"]["simpy"]
    assert cross["goodput_rps"]["tuner"] == pytest.approx(cross["goodput_rps"]["simpy"], rel=0.03)


def test_table_renders(quick_report: dict) -> None:
    text = bench.table(quick_report)
    for name in ("M/D/c tuner", "M/D/c SimPy", "dynamic tuner", "continuous tuner", "mean wait", "completions/s"):
        assert name in text


def test_seed_example_heavy_lean_is_md8() -> None:
    problem = bench.load_problem(bench.SEARCH_SPACES / bench.MDC_FILE)
    queue = bench.mdc_of(problem, bench.resolve_assignment(problem, bench.MDC_ASSIGN), bench.MDC_REGIME)
    assert (queue.rate, queue.servers) == (720.0, 8)
    assert queue.service_s == pytest.approx(0.010)
    assert queue.rho == pytest.approx(0.9)


def test_continuous_problem_is_not_taken_for_mdc() -> None:
    problem = bench.load_problem(bench.SEARCH_SPACES / bench.LLM_FILE)
    with pytest.raises(ValueError, match="not an M/D/c queue"):
        bench.mdc_of(problem, bench.Assignment.default(problem), bench.LLM_REGIME)


def test_simpy_baseline_by_hand() -> None:
    # two servers, S = 1: the third simultaneous arrival waits one service time
    result = bench.simpy_mdc([0.0, 0.0, 0.0, 2.5], servers=2, service_s=1.0, deadline_s=1.5, horizon_s=4.0)
    assert result.wait_s == [0.0, 0.0, 1.0, 0.0]
    assert result.sojourn_s == [1.0, 1.0, 2.0, 1.0]
    assert result.completions == 4
    assert result.goodput_rps == pytest.approx(3 / 4.0)


def test_simpy_baseline_matches_fifo_recurrence() -> None:
    # FIFO M/D/c: each request starts when it arrives or the earliest server frees up.
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(1 / 700.0, 3000)).tolist()
    free = [0.0] * 8
    expected = []
    for t in arrivals:
        start = max(t, free[0])
        expected.append(start - t)
        heapq.heapreplace(free, start + 0.010)
    result = bench.simpy_mdc(arrivals, servers=8, service_s=0.010, deadline_s=None, horizon_s=arrivals[-1])
    assert result.wait_s == pytest.approx(expected, abs=1e-9)


def test_cosmetatos_approximation_sanity() -> None:
    # c = 1 reduces to Pollaczek–Khinchine for M/D/1: W = ρ S / (2 (1 − ρ))
    queue = bench.MDc(rate=80.0, servers=1, service_s=0.01, deadline_s=None)
    assert queue.wait_approx_s() == pytest.approx(0.8 * 0.01 / (2 * 0.2))


# -- the figures in README.md and docs/ ---------------------------------------------------

def test_every_marked_figure_is_the_recorded_one() -> None:
    problems = figures.check()
    assert not problems, "run .venv/bin/python benchmarks/figures.py:\n" + "\n".join(map(str, problems))


def test_every_record_says_when_where_and_on_which_code() -> None:
    records = sorted(recorded.RESULTS.glob("*.json"))
    assert records
    for path in records:
        envelope = recorded.load(path.stem)
        assert envelope["benchmark"] == path.stem
        meta = envelope["recorded"]
        assert meta["date"] and len(meta["commit"]) == 40, path.name
        assert {"cores", "python"} <= set(meta["machine"]), path.name
        # which build ran: "simulator_core" since the compiled core, "compiled" (False) before
        assert {"simulator_core", "compiled"} & set(meta["machine"]), path.name
        assert "report" in envelope


README = ROOT / "README.md"
DOC = ROOT / "docs" / "runtime.md"


def test_a_figure_the_record_does_not_hold_is_reported_and_rewritten() -> None:
    wall = figures.inline("bench_tune/wall_s|.0f")
    wrong = f"tuning took <!--fig bench_tune/wall_s|.0f-->{int(wall) + 17}<!--/fig--> s\n"
    (problem,) = figures.differences(DOC, wrong)
    assert "bench_tune/wall_s" in problem.what and problem.line == 1
    fixed = figures.regenerate(wrong)
    assert fixed == f"tuning took <!--fig bench_tune/wall_s|.0f-->{wall}<!--/fig--> s\n"
    assert not figures.differences(DOC, fixed)


def test_a_block_the_record_does_not_hold_is_reported() -> None:
    block = "text\n<!-- figures:bench_policy -->\n| a pasted table |\n<!-- /figures -->\n"
    (problem,) = figures.differences(DOC, block)
    assert "bench_policy" in problem.what and problem.line == 2
    assert not figures.differences(DOC, figures.regenerate(block))


def test_unknown_records_paths_and_broken_markers_are_reported_not_ignored() -> None:
    text = ("<!--fig bench_nothing/x|g-->1<!--/fig--> <!--fig bench_tune/no_such_key|g-->1<!--/fig-->\n"
            "<!--fig bench_tune/wall_s|.0f-->173 s, never closed\n<!-- figures:bench_policy -->\n| open |\n")
    assert [p.line for p in figures.differences(DOC, text)] == [2, 3, 1, 1]
    assert figures.regenerate(text) == text


@pytest.mark.parametrize("text", [
    "the simulator runs 164k/s for one kernel per request",
    "1.6× SimPy on the M/D/c queue",
    "a bucketed lookup takes 113 ns",
    "`import tuner.runtime` takes 292 ms in a fresh interpreter",
])
def test_benchmark_numbers_outside_markers_are_flagged(text: str) -> None:
    assert figures.strays(DOC, text + "\n")


@pytest.mark.parametrize("text", [
    "tunes the default problem (about 2 minutes on a 2-core machine)",
    "runs the test suite (about a minute)",
    "runs the test suite (816 tests; 404 s on the same machine)",
    "the tune took 151–164 s",
])
def test_set_up_tune_and_test_times_in_the_readme_opening_are_flagged(text: str) -> None:
    opening = f"# tuner\n\n{text}\n\n## Why\n\nabout 2 minutes later, 816 tests\n"
    found = figures.strays(README, opening)
    assert found and all(p.line == 3 for p in found)  # below the first heading they are prose


def test_marked_numbers_and_targets_are_not_flagged() -> None:
    text = ("lookup <!--fig bench_runtime/import_ms|.0f-->32<!--/fig--> ns, "
            "`import tuner.runtime` <!--fig bench_runtime/import_ms|.0f-->32<!--/fig--> ms (< 150 ms), "
            "<!--fig bench_simulator/summary/mdc_per_s|k-->195k<!--/fig-->/s\n")
    assert not figures.strays(DOC, text)
