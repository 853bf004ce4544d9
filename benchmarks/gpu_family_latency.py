"""Step (a) of the GPU check: the bundled kernel families measured at the shapes of the
shipped problems, beside the latency the simulator gives the same config at the same
shape.

Why: every figure tuner prints rests on each kernel's modeled latency; this is the check
of that layer alone, cell by cell, before the service built on it (steps (b) and (c)).

What is measured: for each shipped problem in :data:`PROBLEMS` (in that order, until the
time budget is spent), each ``(operator, bucket)`` cell the service reaches, at the
bucket's representative shape, two configs: the per-bucket isolated-fastest by the model
(what the baseline runs) and the family's first config (its default). Timing as
FlashInfer's and TensorRT-LLM's autotuners now time: every launch of the config captured
in a CUDA graph and replayed (no host launch cost), over enough copies of the inputs to
exceed twice the L2 (rotating buffers: each launch finds its operands cold, as a layer's
weights are in a service; at most :data:`MAX_COPIES`, so a kernel whose operands are a
few KiB is timed warm, as it runs beside its producer). The mean per launch over
``--reps`` replays between two CUDA events, after ``--warmup``.

Modeled: the problem's own profile (its device preset, its fitted kernel factors where it
has them), the figure the simulator uses (:func:`tuner.search.space.cell_cost`). Nothing
here is fitted to the measurements.

Usage::

    python benchmarks/gpu_family_latency.py --out FILE.json [--budget-s 100] [--problems a,b] [--per-problem N]

Without a CUDA GPU it prints one line and exits 0 (``benchmarks/cuda_standin.py`` runs it
on the CPU for the dry run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

#: The shipped problems measured, most telling first: the calibrated H100 deployments
#: (GEMM, attention, norm; the MoE one's fused_moe), then the examples.
PROBLEMS = ("h100_llama2_7b_tp1", "h100_mixtral8x7b_tp2", "llm_decode", "embedding_instances")
#: The most input copies a case rotates through (see the module docstring).
MAX_COPIES = 64


@dataclass(frozen=True)
class Case:
    """One config of one cell, at the bucket's representative shape."""

    problem: str
    operator: str
    bucket: int
    role: str  # "isolated-fastest" or "default"
    config: Any
    kernel: Any
    shape: dict[str, int]
    modeled_s: float
    device: str

    def key(self) -> tuple:
        return (self.kernel.name, getattr(self.kernel, "epilogue", None), tuple(sorted(self.shape.items())),
                self.config.params)


def cases(problem: Any) -> list[Case]:
    """The problem's measurable cases (cells the service reaches, configs with a kernel),
    the isolated-fastest ones first, then bucket by bucket across the operators, so that a
    budget cut short still covers every operator."""
    found = list(_cells(problem))
    order = [op.name for op in problem.service.operators]
    return sorted(found, key=lambda c: (c.role != "isolated-fastest", c.bucket, order.index(c.operator)))


def _cells(problem: Any) -> Iterator[Case]:
    from tuner.replay.kernels import kernel_of
    from tuner.search.space import JointSpace, fastest_in_cell

    space = JointSpace.of(problem)
    largest = problem.service.largest_batch_variables(problem.size_fields)
    for index, (name, bucket) in enumerate(space.cells):
        if not space.reached(index):
            continue
        operator = problem.operator(name)
        variables = operator.bucket_variables(largest, bucket)
        shape = {dim: int(math.ceil(variables[dim])) for dim, _ in operator.shape}
        for role, cost in (("isolated-fastest", fastest_in_cell(space, index)), ("default", space.costs[index][0])):
            kernel = kernel_of(cost.config)
            if kernel is not None and cost.latency_s is not None:
                yield Case(problem.name, name, bucket, role, cost.config, kernel, shape, cost.latency_s,
                           problem.service.device.name)


def nbytes(inputs: dict[str, Any]) -> int:
    return sum(int(getattr(value, "nbytes", 0)) for value in inputs.values())


def copies_for(l2_bytes: int, input_bytes: int) -> int:
    """How many input copies make the launches' operands exceed twice the L2."""
    return max(1, min(MAX_COPIES, math.ceil(2 * l2_bytes / max(input_bytes, 1))))


def graph_seconds(cuda: Any, launch: Callable[[Any], Any], copies: list[Any], warmup: int, reps: int) -> float:
    """Mean seconds per launch of ``launch`` over ``copies``, captured once in a CUDA graph
    (each copy launched once per replay) and replayed ``reps`` times between events."""
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for inputs in copies:
            launch(inputs)  # compiled and warmed outside the capture
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        for inputs in copies:
            launch(inputs)
    for _ in range(warmup):
        graph.replay()
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    cuda.synchronize()
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / (reps * len(copies))


def eager_seconds(cuda: Any, launch: Callable[[Any], Any], copies: list[Any], warmup: int, reps: int) -> float:
    """Mean seconds per launch of ``launch`` over ``copies``, launched one by one between
    two events (host launch cost included): for a family whose ``run`` cannot be captured
    in a graph (fused_moe aligns its routing on the host)."""
    for _ in range(warmup):
        for inputs in copies:
            launch(inputs)
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    cuda.synchronize()
    start.record()
    for _ in range(reps):
        for inputs in copies:
            launch(inputs)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / (reps * len(copies))


def measure_case(cuda: Any, case: Case, l2_bytes: int, warmup: int, reps: int) -> dict[str, Any]:
    """The case timed in a CUDA graph; where capturing fails, eagerly (``timing`` says
    which, and why)."""
    first = case.kernel.make_inputs(case.shape, seed=0, device="cuda")
    copies = [first] + [case.kernel.make_inputs(case.shape, seed=seed, device="cuda")
                        for seed in range(1, copies_for(l2_bytes, nbytes(first)))]
    params = case.config.param_dict
    launch = lambda inputs: case.kernel.run(inputs, params, case.shape)  # noqa: E731
    try:
        seconds, timing = graph_seconds(cuda, launch, copies, warmup, reps), "graph"
    except Exception as exc:  # noqa: BLE001 - a run that cannot be captured is timed eagerly
        cuda.synchronize()
        seconds = eager_seconds(cuda, launch, copies, warmup, reps)
        timing = f"eager (capture failed: {type(exc).__name__}: {exc})".splitlines()[0][:200]
    return {"measured_us": seconds * 1e6, "copies": len(copies), "ratio": seconds / case.modeled_s, "timing": timing}


def row_of(case: Case) -> dict[str, Any]:
    return {"problem": case.problem, "operator": case.operator, "bucket": case.bucket, "role": case.role,
            "family": case.kernel.name, "config": case.config.name, "params": case.config.param_dict,
            "shape": case.shape, "modeled_on": case.device, "modeled_us": case.modeled_s * 1e6}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per family: cases measured and the median, min and max of measured / modeled."""
    by_family: dict[str, list[float]] = {}
    for row in rows:
        if "ratio" in row:
            by_family.setdefault(row["family"], []).append(row["ratio"])
    return {family: {"cases": len(r), "median_ratio": statistics.median(r), "min_ratio": min(r), "max_ratio": max(r)}
            for family, r in sorted(by_family.items())}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from gpu_sharing import environment
    from tuner.problem import load_problem

    props = torch.cuda.get_device_properties(0)
    l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20))
    result: dict[str, Any] = {
        "benchmark": "gpu_family_latency",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(),
        "settings": {"warmup": args.warmup, "reps": args.reps, "l2_bytes": l2_bytes, "max_copies": MAX_COPIES,
                     "budget_s": args.budget_s, "per_problem": args.per_problem,
                     "timing": "CUDA graph of one launch per input copy (cold L2 by rotation); mean per launch "
                               "over the replays (eager where a run cannot be captured: a row's 'timing')"},
        "rows": [], "errors": [], "not_measured": 0}
    started, seen = time.perf_counter(), set()
    for name in args.problems:
        if time.perf_counter() - started > args.budget_s:
            result["problems_left"] = result.get("problems_left", []) + [name]
            continue
        measured = 0
        for case in cases(load_problem(ROOT / "search_spaces" / f"{name}.yaml")):
            if case.key() in seen:
                continue
            seen.add(case.key())
            if time.perf_counter() - started > args.budget_s or measured >= args.per_problem:
                result["not_measured"] += 1
                continue
            measured += 1
            row = row_of(case)
            try:
                row.update(measure_case(torch.cuda, case, l2_bytes, args.warmup, args.reps))
            except Exception as exc:  # noqa: BLE001 - one failed case is a row, not the run
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                result["errors"].append(f"{case.problem} {case.operator}@{case.bucket} {case.config.name}: "
                                        f"{row['error']}")
            result["rows"].append(row)
            result["summary"] = summary(result["rows"])
            result["settings"]["wall_s"] = round(time.perf_counter() - started, 1)
            args.out.write_text(json.dumps(result, indent=2) + "\n")  # saved after every case
            print(render_row(row), flush=True)
    return result


def render_row(row: dict[str, Any]) -> str:
    measured = f"{row['measured_us']:9.1f} us" if "measured_us" in row else f"error: {row.get('error', '')[:60]}"
    ratio = f"  measured/modeled {row['ratio']:.2f}" if "ratio" in row else ""
    return (f"{row['problem']:<22} {row['operator']:<12} @{row['bucket']} {row['role']:<16} "
            f"modeled {row['modeled_us']:9.1f} us  measured {measured}{ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "data" / "gpu_family_latency_measured.json")
    parser.add_argument("--problems", type=lambda text: tuple(text.split(",")), default=PROBLEMS)
    parser.add_argument("--budget-s", type=float, default=100.0, help="no new case starts after this many seconds")
    parser.add_argument("--per-problem", type=int, default=24, help="the most cases measured per problem")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    from gpu_sharing import cuda_unavailable

    why = cuda_unavailable()
    if why is not None:
        print(f"gpu_family_latency: no CUDA GPU available ({why}); nothing measured, nothing written.")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    print(f"wrote {args.out} ({len(result['rows'])} cases in {result['settings'].get('wall_s')} s, "
          f"{result['not_measured']} left (--budget-s, --per-problem), {len(result['errors'])} errors)")
    for family, s in result.get("summary", {}).items():
        print(f"  {family:<18} {s['cases']:>3} cases  measured/modeled median {s['median_ratio']:.2f} "
              f"(min {s['min_ratio']:.2f}, max {s['max_ratio']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
