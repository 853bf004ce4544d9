"""Simulator throughput: simulated kernel completions per wall-second, beside SimPy.

Four cases, one run, one table:

* ``M/D/c  tuner``  — ``search_spaces/seed_example.yaml``, regime ``heavy``, config
  ``stage=lean``: one request per batch, 8 executors, a 10 ms kernel that takes 0.1 of
  the SMs (eight never interfere), memory for exactly 8 admitted requests, Poisson
  arrivals at 720/s. That is an M/D/8 queue with S = 10 ms (ρ = 0.9).
* ``M/D/c  SimPy``  — the same M/D/c queue written the usual SimPy way (a process per
  request, ``simpy.Resource(capacity=c)``), fed the *same* arrival times. Both sides
  include workload generation in their timing; the problem-file load is excluded.
* ``dynamic tuner`` — ``search_spaces/toy_embedder.yaml``, regime ``heavy``: dynamic
  batching, four executors contending for the SMs, 96 kernels per batch.
* ``continuous tuner`` — ``search_spaces/toy_llm.yaml``, regime ``heavy``, default
  assignment: continuous batching, 160 kernels per iteration, a neighbour stream.

The M/D/c parameters are read from the problem file and checked to really describe an
M/D/c queue, and the two M/D/c runs must agree on the mean wait (they simulate the same
queue on the same arrivals), which is what makes the ratio apples to apples.

Before and after, in one run: every case runs in two child processes, one on the
pure-Python build of the simulator core (``TUNER_PURE_PYTHON=1``, the code before it was
compiled) and one on the build the install made (mypyc-compiled when it could;
:mod:`tuner.sim.native`). Their metrics must be identical to the last digit: the two
builds are one model. Without a compiled build both sides are pure Python and the table
says so.

Python runs one thread, so every number is single-core; no pinning is done or needed.

Usage::

    python benchmarks/bench_simulator.py            # full 60 s horizons, best of N
    python benchmarks/bench_simulator.py --quick    # short horizons (used by the tests)
    python benchmarks/bench_simulator.py --json     # the numbers as JSON on stdout

Exit status: 0; 2 when the tuner and SimPy disagree on the M/D/c mean wait, or the two
builds on any metric; with ``--strict`` also 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tuner.problem import Problem, load_problem, resolve_assignment  # noqa: E402
from tuner.problem.assignment import Assignment  # noqa: E402
from tuner.sim import BUILD, bind, simulate  # noqa: E402
from tuner.sim.native import PURE_ENV  # noqa: E402
from tuner.traffic import Poisson  # noqa: E402

from recorded import add_options, load_average, record  # noqa: E402

#: Simulated kernel completions per wall-second the simulator must reach (issue 17).
TARGET_PER_S = 300_000
#: How many times faster than SimPy the M/D/c case must run.
TARGET_VS_SIMPY = 3.0
#: Largest relative difference of the M/D/c mean wait allowed between tuner and SimPy.
WAIT_RTOL = 0.03

SEARCH_SPACES = ROOT / "search_spaces"
MDC_FILE, MDC_REGIME, MDC_ASSIGN = "seed_example.yaml", "heavy", ("stage=lean",)
LLM_FILE, LLM_REGIME = "toy_llm.yaml", "heavy"
DYN_FILE, DYN_REGIME = "toy_embedder.yaml", "heavy"

#: (M/D/c horizon, continuous horizon, repeats) of --quick.
QUICK = (5.0, 2.0, 1)


# -- the SimPy baseline ----------------------------------------------------------------

@dataclass
class QueueResult:
    """What one M/D/c simulation reports (per-request arrays in arrival order)."""

    wait_s: list[float]
    sojourn_s: list[float]
    completions: int
    goodput_rps: float

    @property
    def wait_mean_s(self) -> float:
        return statistics.fmean(self.wait_s) if self.wait_s else 0.0


def simpy_mdc(arrivals_s: Sequence[float], servers: int, service_s: float,
              deadline_s: float | None, horizon_s: float) -> QueueResult:
    """M/D/c FIFO in SimPy: ``servers`` servers, deterministic service ``service_s``.

    Requests arrive at ``arrivals_s`` (sorted, inside ``[0, horizon_s)``); after the last
    arrival the queue drains. A request is good when its sojourn (wait + service) is at
    most ``deadline_s``; goodput is good requests per second of the arrival window.
    """
    env = simpy.Environment()
    servers_res = simpy.Resource(env, capacity=servers)
    n = len(arrivals_s)
    wait = [0.0] * n
    sojourn = [0.0] * n
    done = 0

    def request(i: int):
        nonlocal done
        arrived = env.now
        with servers_res.request() as req:
            yield req
            wait[i] = env.now - arrived
            yield env.timeout(service_s)
        sojourn[i] = env.now - arrived
        done += 1

    def source():
        last = 0.0
        for i, t in enumerate(arrivals_s):
            yield env.timeout(t - last)
            last = t
            env.process(request(i))

    env.process(source())
    env.run()  # no `until`: runs until the last request has drained
    limit = math.inf if deadline_s is None else deadline_s + 1e-12
    good = sum(1 for s in sojourn if s <= limit)
    return QueueResult(wait, sojourn, done, good / horizon_s)


# -- the M/D/c problem, read and checked -------------------------------------------------

@dataclass(frozen=True)
class MDc:
    rate: float        # λ, arrivals per second
    servers: int       # c
    service_s: float   # S
    deadline_s: float | None

    @property
    def rho(self) -> float:
        return self.rate * self.service_s / self.servers

    def wait_approx_s(self) -> float:
        """Cosmetatos' approximation of the M/D/c mean wait (Erlang C, halved, corrected)."""
        c, a, rho = self.servers, self.rate * self.service_s, self.rho
        if rho >= 1.0:
            return math.inf
        term, total = 1.0, 1.0
        for k in range(1, c):
            term *= a / k
            total += term
        tail = term * a / c / (1.0 - rho)
        erlang_c = tail / (total + tail)
        w_mmc = erlang_c * self.service_s / (c * (1.0 - rho))
        return 0.5 * w_mmc * (1.0 + (1.0 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c))


def mdc_of(problem: Problem, assignment: Assignment, regime: str) -> MDc:
    """The M/D/c queue this problem is, or ValueError saying why it is not one."""
    service = problem.service
    why = []
    def fail(reasons: list[str]) -> ValueError:
        return ValueError(f"{problem.path} regime {regime!r} is not an M/D/c queue: " + "; ".join(reasons))

    if service.batching != "dynamic" or service.max_batch != 1:
        raise fail(["not dynamic batching with max_batch 1"])
    if service.jitter.kind != "deterministic":
        why.append(f"service jitter is {service.jitter.kind}")
    if service.neighbors:
        why.append("it has neighbour streams")
    if service.launch_overhead_s:
        why.append("it has a launch overhead")
    process = problem.regimes[regime].arrivals.sample(np.random.default_rng(0))
    if not isinstance(process, Poisson) or problem.regimes[regime].arrivals.rate_range is not None:
        why.append("arrivals are not Poisson at one rate")
    bound = bind(service, assignment, problem.size_fields)
    program = bound.program({"batch": 1})
    if program.kernels != 1:
        raise fail(why + [f"a batch launches {program.kernels} kernels, not 1"])
    phases = program.lanes[0][0][1]  # the first lane's first launch's phases
    servers = service.executors
    if servers * max(p[1] for p in phases) > 1.0 + 1e-9 or servers * max(p[2] for p in phases) > 1.0 + 1e-9:
        why.append(f"{servers} kernels side by side would slow each other")
    budget = problem.regimes[regime].memory_budget or service.memory.budget
    room = budget - service.memory.fixed - bound.reserved_workspace
    per_request = service.memory.per_request.evaluate({})
    if per_request > 0 and room // per_request < servers:
        why.append(f"memory admits {room // per_request:.0f} requests, fewer than {servers} executors")
    if why:
        raise fail(why)
    return MDc(process.rate, servers, sum(p[0] for p in phases), service.slo.deadline_s)


# -- timing -------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    description: str
    completions: int
    walls_s: list[float]
    target: bool              # whether the throughput target applies to this case
    ratio_vs_simpy: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # every figure of the simulation, to compare builds

    @property
    def wall_s(self) -> float:
        return min(self.walls_s)

    @property
    def per_s(self) -> float:
        return self.completions / self.wall_s

    @property
    def meets_target(self) -> bool | None:
        return self.per_s >= TARGET_PER_S if self.target else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(wall_s_best=self.wall_s, wall_s_median=statistics.median(self.walls_s),
                   per_s=self.per_s, meets_target=self.meets_target)
        return out


def timed(fn: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    """Run ``fn`` ``repeats`` times (GC collected before each, left on during); the last
    result and every wall time."""
    walls = []
    result = None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - start)
    return result, walls


def problem_case(name: str, file: str, regime: str, horizon_s: float | None, repeats: int, seed: int) -> Case:
    """Time a shipped multi-kernel problem under its default assignment."""
    problem = load_problem(SEARCH_SPACES / file)
    assignment = Assignment.default(problem)
    result, walls = timed(lambda: simulate(problem, assignment, regime, seed=seed, horizon_s=horizon_s), repeats)
    m = result.metrics
    kernels_per_batch = sum(op.repeat for op in problem.service.operators)
    return Case(name, f"{file} {regime} default assignment ({problem.service.batching} batching, "
                      f"{kernels_per_batch} kernels per batch)",
                m.kernels, walls, target=True,
                extra={"requests": m.arrivals, "completed": m.completed, "goodput_rps": m.goodput_rps},
                metrics=asdict(m))


def run_this_build(quick: bool = False, repeats: int | None = None, horizon_s: float | None = None,
                   seed: int = 0) -> dict[str, Any]:
    """Run the three cases and the cross-check on the build this process loaded."""
    mdc_h, llm_h, reps = QUICK if quick else (None, None, 3)
    if horizon_s is not None:
        mdc_h = llm_h = horizon_s
    if repeats is not None:
        reps = repeats

    problem = load_problem(SEARCH_SPACES / MDC_FILE)
    assignment = resolve_assignment(problem, MDC_ASSIGN)
    queue = mdc_of(problem, assignment, MDC_REGIME)
    regime = problem.regimes[MDC_REGIME]
    mdc_h = mdc_h or regime.horizon_s

    tuner_result, tuner_walls = timed(
        lambda: simulate(problem, assignment, MDC_REGIME, seed=seed, horizon_s=mdc_h), reps)
    metrics = tuner_result.metrics

    def simpy_run() -> QueueResult:
        # The very arrivals tuner simulated: same seed, same generator, same horizon.
        arrivals = regime.workload(seed, problem.service.jitter, mdc_h).arrivals_s.tolist()
        return simpy_mdc(arrivals, queue.servers, queue.service_s, queue.deadline_s, mdc_h)

    baseline, simpy_walls = timed(simpy_run, reps)

    label = f"M/D/{queue.servers} S={queue.service_s * 1e3:g}ms λ={queue.rate:g}/s"
    simpy_case = Case("M/D/c SimPy", f"{label}, SimPy {simpy.__version__} baseline",
                      baseline.completions, simpy_walls, target=False, ratio_vs_simpy=1.0)
    mdc_case = Case("M/D/c tuner", f"{MDC_FILE} {MDC_REGIME} {' '.join(MDC_ASSIGN)} ({label})",
                    metrics.kernels, tuner_walls, target=True, metrics=asdict(metrics))
    mdc_case.ratio_vs_simpy = mdc_case.per_s / simpy_case.per_s

    dynamic_case = problem_case("dynamic tuner", DYN_FILE, DYN_REGIME, llm_h, reps, seed)
    llm_case = problem_case("continuous tuner", LLM_FILE, LLM_REGIME, llm_h, reps, seed)

    tuner_wait, simpy_wait = metrics.wait_mean_s, baseline.wait_mean_s
    scale = max(abs(tuner_wait), abs(simpy_wait), 1e-12)
    cross = {
        "queue": asdict(queue) | {"rho": queue.rho},
        "horizon_s": mdc_h,
        "seed": seed,
        "wait_mean_s": {"tuner": tuner_wait, "simpy": simpy_wait, "approx_cosmetatos": queue.wait_approx_s()},
        "wait_rel_diff": abs(tuner_wait - simpy_wait) / scale,
        "wait_rtol": WAIT_RTOL,
        "goodput_rps": {"tuner": metrics.goodput_rps, "simpy": baseline.goodput_rps},
        "completions": {"tuner": metrics.kernels, "simpy": baseline.completions},
    }
    cross["agree"] = cross["wait_rel_diff"] <= WAIT_RTOL and metrics.kernels == baseline.completions
    return {
        "build": str(BUILD),
        "compiled": BUILD.compiled,
        "quick": quick,
        "repeats": reps,
        "timing": "best wall time of the repeats; workload generation included, problem load excluded",
        "single_core": "Python runs one thread: every number is one core's; no pinning done",
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "machine": platform.machine(),
        "cases": [c.to_dict() for c in (mdc_case, simpy_case, dynamic_case, llm_case)],
        "cross_check": cross,
    }


def run(quick: bool = False, repeats: int | None = None, horizon_s: float | None = None,
        seed: int = 0) -> dict[str, Any]:
    """Both builds, each in a child process (pure Python first), and their comparison:
    the installed build's report with each case's pure-Python speed, speed-up and whether
    every metric is identical; everything the table and JSON show."""
    options = ["--quick"] * quick + ["--repeats", str(repeats)] * (repeats is not None) + \
        ["--horizon", repr(horizon_s)] * (horizon_s is not None) + ["--seed", str(seed)]
    before = _child(options, pure=True)
    after = _child(options, pure=False)
    pure_cases = {c["name"]: c for c in before["cases"]}
    for case in after["cases"]:
        old = pure_cases[case["name"]]
        case["before_per_s"] = old["per_s"]
        case["speedup"] = case["per_s"] / old["per_s"]
        case["identical"] = case["metrics"] == old["metrics"] and case["completions"] == old["completions"]
    by_name = {c["name"]: c for c in after["cases"]}
    mdc, dynamic, llm = by_name["M/D/c tuner"], by_name["dynamic tuner"], by_name["continuous tuner"]
    tuner_cases = [c for c in after["cases"] if c["target"]]
    identical = all(c["identical"] for c in after["cases"])
    targets_met = all(c["meets_target"] for c in tuner_cases) and mdc["ratio_vs_simpy"] >= TARGET_VS_SIMPY
    # the figures the README quotes, under names that do not depend on the cases' order
    summary = {"mdc_per_s": mdc["per_s"], "mdc_vs_simpy": mdc["ratio_vs_simpy"],
               "dynamic_per_s": dynamic["per_s"], "continuous_per_s": llm["per_s"],
               "mdc_meets_target": mdc["meets_target"], "slowest_per_s": min(c["per_s"] for c in tuner_cases),
               "pure_mdc_per_s": mdc["before_per_s"], "pure_mdc_vs_simpy": pure_cases["M/D/c tuner"]["ratio_vs_simpy"],
               "speedup_min": min(c["speedup"] for c in tuner_cases),
               "speedup_max": max(c["speedup"] for c in tuner_cases), "identical": identical}
    return after | {"before": {"build": before["build"], "cases": before["cases"]},
                    "target_per_s": TARGET_PER_S, "target_vs_simpy": TARGET_VS_SIMPY,
                    "targets_met": targets_met, "identical": identical, "summary": summary}


def _child(options: list[str], *, pure: bool) -> dict[str, Any]:
    """:func:`run_this_build` in a fresh interpreter on the pure-Python or installed build."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | ({PURE_ENV: "1"} if pure else {})
    done = subprocess.run([sys.executable, __file__, "--this-build", "--json", *options], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_simulator: the {'pure-Python' if pure else 'installed'} build's run failed:\n"
                         f"{done.stderr}")
    return json.loads(done.stdout)


# -- output ------------------------------------------------------------------------------

def table(report: dict[str, Any]) -> str:
    target = f"≥{report['target_per_s'] // 1000}k/s"
    head = ("case", "completions", "pure Python/s", "installed/s", "speed-up", "vs SimPy", target, "metrics")
    rows = []
    for c in report["cases"]:
        ratio = c["ratio_vs_simpy"]
        met = c["meets_target"]
        rows.append((
            c["name"], f"{c['completions']:,}", f"{c['before_per_s']:,.0f}", f"{c['per_s']:,.0f}",
            f"{c['speedup']:.2f}×", "—" if ratio is None or c["name"].endswith("SimPy") else f"{ratio:.2f}×",
            "—" if met is None else ("yes" if met else "NO"),
            "—" if c["name"].endswith("SimPy") else ("identical" if c["identical"] else "DIFFER"),
        ))
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths)))

    x = report["cross_check"]
    q, w = x["queue"], x["wait_mean_s"]
    out = [
        f"Simulated kernel completions per wall-second (best of {report['repeats']}; "
        f"Python {report['python']}, SimPy {report['simpy']}; one core — Python is single-threaded)",
        f"Simulator core: before = {report['before']['build']}; installed = {report['build']}",
        "",
        line(head),
        line(["-" * n for n in widths]),
        *(line(r) for r in rows),
        "",
    ]
    for c in report["cases"]:
        out.append(f"  {c['name']:<17} {c['description']}")
    out += [
        "",
        f"Cross-check, M/D/{q['servers']} with S = {q['service_s'] * 1e3:g} ms, λ = {q['rate']:g}/s "
        f"(ρ = {q['rho']:.2f}), {x['horizon_s']:g} s of the same arrivals (seed {x['seed']}):",
        f"  mean wait    tuner {w['tuner'] * 1e3:.4f} ms   SimPy {w['simpy'] * 1e3:.4f} ms   "
        f"rel. diff {x['wait_rel_diff']:.2%} (limit {x['wait_rtol']:.0%})   "
        f"[Cosmetatos approx. {w['approx_cosmetatos'] * 1e3:.3f} ms]",
        f"  goodput      tuner {x['goodput_rps']['tuner']:.2f}/s   SimPy {x['goodput_rps']['simpy']:.2f}/s",
        f"  completions  tuner {x['completions']['tuner']:,}   SimPy {x['completions']['simpy']:,}",
        f"  -> {'agree' if x['agree'] else 'DISAGREE'}",
        "",
        f"Target (≥{report['target_per_s']:,} completions/s on every tuner case, M/D/c "
        f"≥{report['target_vs_simpy']:g}× SimPy, installed build): {'met' if report['targets_met'] else 'NOT met'}; "
        f"metrics of the two builds {'identical' if report['identical'] else 'DIFFER'}",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"short horizons ({QUICK[0]:g} s M/D/c, {QUICK[1]:g} s continuous), one repeat")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON instead of the table")
    parser.add_argument("--repeats", type=int, help="timed runs per case (default 3; --quick 1)")
    parser.add_argument("--horizon", type=float, help="arrival window in seconds for every case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a throughput target is missed")
    parser.add_argument("--this-build", action="store_true",
                        help="only the build this process loads, no comparison (what each child runs)")
    add_options(parser)
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.this_build:
        print(json.dumps(run_this_build(args.quick, args.repeats, args.horizon, args.seed)))
        return 0
    before = load_average()
    report = run(args.quick, args.repeats, args.horizon, args.seed)
    if args.record:
        record("bench_simulator", report, args.note, before)
    print(json.dumps(report, indent=2) if args.json else table(report))
    if not report["cross_check"]["agree"] or not report["identical"]:
        return 2
    if args.strict and not report["targets_met"]:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
