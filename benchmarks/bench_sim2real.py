"""The engine model against measured serving: predicted vs measured latency per run and
stage, fitted on the calibration runs, with a leave-one-run-out error beside.

Data: a directory in the ``measured-run/1`` format (``runs/*.json`` and the traces they
name), by default ``../shared/data/serving_real`` beside the checkout: four deployments on
H100s with vLLM V1 (Llama-2-7B TP1, CodeLlama-34B TP2, Mixtral-8x7B TP2, Llama-2-70B TP4),
each at 5 and 10 requests/s, measured by others (its README gives sources and terms; the
traces stay there, this benchmark only reads them).

What it does:

* **calibration**: :func:`tuner.engine.calibrate.fit` on every run; the error of each
  stage's mean, p50, p90 and p99 of e2e, TTFT and TPOT under the fitted coefficients, and
  whether the shipped defaults (:mod:`tuner.engine.defaults`) are this fit, rounded;
* **leave one run out**: for each run, the fit on the other runs, and the error on it;
* **published errors** of other simulators on the Llama-2-7B run (e2e mean), beside ours;
* **speed**: the replay of each run, and of a 16,800-request, 20-minute trace (the
  Llama-2-7B deployment, its prompts, Poisson arrivals at 14 requests/s, seed 0);
* **the service simulator**, which prices each kernel of a step with the analytic kernel
  model instead of the fitted step terms: each run's deployment written by ``tuner init``
  (``batching: vllm``, the run's engine arguments and KV blocks, the ``h100-vllm-graphs``
  kernel factors and vLLM's all-reduce), Poisson arrivals at each stage's rate with the
  run's mean prompt and output lengths, each request sending one of the run's distinct
  prompts at random (``prompt_id``: the prefix cache finds them as it did in the run), the
  per-bucket isolated-fastest configs, three seeds of 120 s; its e2e p50 and p90 and its
  TTFT and TPOT p99 beside the measured ones, and the engine model on the same workload;
* **the kernel model's factors** (``h100-vllm-graphs``, benchmarks/kernel_factors.py):
  fitted on the decode steps of the four deployments against the engine model's GPU
  terms, with each run left out, and an MoE layer's experts (not fitted) checked.

Usage::

    python benchmarks/bench_sim2real.py [--runs DIR] [--json] [--record]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tuner.engine.calibrate import fit, replay_run, stage_figures  # noqa: E402
from tuner.engine.defaults import H100_VLLM_V1  # noqa: E402
from tuner.engine.measured_run import METRICS, MeasuredRun, read_run  # noqa: E402
from tuner.engine.replay import TraceRequest  # noqa: E402
from tuner.engine.init_problem import deployment_of, poisson_regimes, problem_text  # noqa: E402
from tuner.engine.step_cost import COEFFICIENTS, StepCoefficients  # noqa: E402
from tuner.profile.devices import PRESETS  # noqa: E402

from recorded import add_options, record  # noqa: E402

RUNS = ROOT.parent / "shared" / "data" / "serving_real"
#: Other simulators' e2e-mean errors (%) on the Llama-2-7B codegen run, stages 0 and 1:
#: inference-sim/sim-to-real-accuracy-validation, results_trainval/error_records.csv (as
#: quoted by shared/data/serving_real/README.md and issue 37).
PUBLISHED = {
    "run": "20260217-155451-llama-2-7b-tp1-codegen",
    "source": "inference-sim/sim-to-real-accuracy-validation, results_trainval/error_records.csv",
    "e2e_mean_error_pct": {"Vidur": [14.4, 2.5], "AIConfigurator": [15.4, 11.0], "BLIS (trained)": [25.6, 14.8],
                           "llm-optimizer": [42.5, 32.0]},
}
SPEED_REQUESTS, SPEED_SECONDS = 16_800, 1200.0
#: The shipped defaults match the fit when no coefficient differs by more than this
#: (relative): a refit started elsewhere settles within about 1% (it alternates replays
#: and least squares, and stops when the coefficients move less than 0.1% per round).
MATCH_TOLERANCE = 0.02


def _figures(run: MeasuredRun, coefficients: StepCoefficients) -> list[dict[str, Any]]:
    result = replay_run(run, coefficients)
    return [{"index": s.index, "requests": s.requests, "predicted": s.predicted, "measured": s.measured,
             "error_pct": s.error_pct} for s in stage_figures(run, result)]


def _speed(run: MeasuredRun) -> dict[str, Any]:
    """Replay seconds of a 16,800-request, 20-minute Poisson trace on ``run``'s deployment."""
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(SPEED_SECONDS / SPEED_REQUESTS, SPEED_REQUESTS))
    base = run.requests
    requests = tuple(TraceRequest(float(a), base[i % len(base)].prompt, base[i % len(base)].output,
                                  base[i % len(base)].prefix) for i, a in enumerate(arrivals))
    synthetic = replace(run, requests=requests, stage_of=(0,) * len(requests), stages=())
    start = time.perf_counter()
    replay_run(synthetic, H100_VLLM_V1)
    return {"deployment": run.name, "requests": SPEED_REQUESTS, "trace_s": round(float(arrivals[-1]), 1),
            "seconds": round(time.perf_counter() - start, 2), "target_s": 20.0}


SERVICE_SEEDS, SERVICE_HORIZON_S, SERVICE_WARMUP_S = (0, 1, 2), 120.0, 20.0


def _kv_blocks(run: MeasuredRun) -> dict[str, Any]:
    """The KV blocks ``tuner init`` computes for the run's deployment (as vLLM does, at
    ``gpu_memory_utilization`` 0.9) beside those vLLM allocated."""
    estimated = deployment_of(run).kv_blocks
    return {"run": run.name, "estimated": estimated, "recorded": run.engine.num_gpu_blocks,
            "error_pct": 100.0 * (estimated / run.engine.num_gpu_blocks - 1.0)}


def _served_problem(run: MeasuredRun, workdir: Path, factors: str | None = None,
                    coefficients: StepCoefficients | None = None) -> Any:
    """The run's deployment as ``tuner init`` writes it (the run's engine arguments and KV
    blocks), with a Poisson regime per stage at the run's mean lengths; ``factors`` and
    ``coefficients`` (the engine's CPU terms) replace the shipped ones when given."""
    import tempfile

    from tuner.problem.load import load_problem

    prompt, output = run.mean_lengths()
    deployment = deployment_of(run, num_gpu_blocks=run.engine.num_gpu_blocks, name="sim2real")
    rates = {f"stage_{s.index}": s.rate_qps for s in run.stages if s.rate_qps}
    text = problem_text(deployment, poisson_regimes(rates, prompt, output, SERVICE_HORIZON_S, SERVICE_WARMUP_S,
                                                    run.distinct_prompts()))
    if factors is not None:
        text = text.replace("factors: h100-vllm-graphs", f"factors: {factors}")
    if coefficients is not None:
        engine = "  engine:\n"
        cpu = (f"    step_cpu: {coefficients.step!r}\n    request_cpu: {coefficients.requests!r}\n"
               f"    request_overhead: {coefficients.request_overhead_s!r}\n")
        text = text.replace(engine, engine + cpu, 1)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        path = Path(folder) / "sim2real.yaml"
        path.write_text(text)
        return load_problem(path)


def _kernel_factors(runs: list[MeasuredRun], problems: list[Any], left_out: dict[str, StepCoefficients],
                    progress) -> dict[str, Any]:
    """The kernel model's factors fitted on the decode steps of every run, and with each
    run left out (targets from the engine coefficients fitted without it: ``left_out``);
    see benchmarks/kernel_factors.py; shipped as ``h100-vllm-graphs``. Each left-out fit
    then prices its run in the service simulator, with that run's left-out CPU terms."""
    from kernel_factors import FITTED, decode_cases, experts_check, fit, retargeted, rounded, step_errors

    from tuner.engine.calibrate import step_cost_for
    from tuner.profile.factor_sets import A100_CUBLAS, FACTOR_SETS, H100_VLLM_GRAPHS, FactorSet
    from tuner.profile.modeled import LazyCompileCache

    device = PRESETS["h100"]
    resources = LazyCompileCache.from_environment()
    costs = {run.name: step_cost_for(run) for run in runs}
    cases = {run.name: decode_cases(run.name, problem, costs[run.name], device, resources)
             for run, problem in zip(runs, problems)}
    every = [case for found in cases.values() for case in found]
    progress(f"fitting the kernel model's factors on {len(every)} decode steps")
    fitted = fit(every, device)
    shipped = H100_VLLM_GRAPHS.factors
    report: dict[str, Any] = {
        "fitted": rounded(fitted), "shipped": rounded(shipped), "names": list(FITTED),
        "shipped_match_fit": rounded(fitted) == rounded(shipped),
        "steps": step_errors(every, device, shipped),
        "steps_a100_cublas": step_errors(every, device, A100_CUBLAS.factors),
        "leave_one_run_out": [],
        "experts": [row for run, problem in zip(runs, problems)
                    for row in experts_check(run.name, problem, costs[run.name])],
    }
    for held in runs:
        progress(f"kernel factors without {held.name}")
        coefficients = left_out[held.name]
        others = [retargeted(case, costs[name], coefficients) for name, found in cases.items() if name != held.name
                  for case in found]
        factors = fit(others, device)
        name = f"left-out-{held.name}"
        FACTOR_SETS[name] = FactorSet(name, factors, "bench_sim2real: fitted without this run")
        try:
            service = _service_simulator(held, _served_problem(held, ROOT, name, coefficients), engine=False)
        finally:
            del FACTOR_SETS[name]
        report["leave_one_run_out"].append({"run": held.name, "fitted": rounded(factors),
                                            "service_simulator": service,
                                            "steps": step_errors(cases[held.name], device, factors)})
    return report


def _service_simulator(run: MeasuredRun, problem: Any, engine: bool = True) -> dict[str, Any]:
    """The service simulator on the run's deployment (see the module docstring), and the
    engine model on the same workload unless ``engine`` is off."""
    from tuner.search import PER_BUCKET, JointSpace
    from tuner.sim.service import simulate

    prompt, output = run.mean_lengths()
    assignment = PER_BUCKET.assignment(JointSpace.of(problem))
    stages = []
    for stage in run.stages:
        regime = f"stage_{stage.index}"
        runs = [simulate(problem, assignment, regime, seed=seed).metrics for seed in SERVICE_SEEDS]
        predicted = {"e2e_p50_ms": 1e3 * float(np.mean([m.latency_p50_s for m in runs])),
                     "e2e_p90_ms": 1e3 * float(np.mean([m.latency_p90_s for m in runs])),
                     "ttft_p99_ms": 1e3 * float(np.mean([m.ttft_p99_s for m in runs])),
                     "tpot_p99_ms": 1e3 * float(np.mean([m.tpot_p99_s for m in runs])),
                     "overloaded": any(m.overloaded for m in runs)}
        measured = None if stage.measured is None else {
            "e2e_p50_ms": stage.measured["e2e_ms"]["p50"], "e2e_p90_ms": stage.measured["e2e_ms"]["p90"],
            "ttft_p99_ms": stage.measured["ttft_ms"]["p99"], "tpot_p99_ms": stage.measured["tpot_ms"]["p99"]}
        stages.append({"index": stage.index, "predicted": predicted, "measured": measured,
                       "engine_model": _engine_on_service_workload(run, stage.rate_qps, prompt, output)
                       if engine else None})
    return {"run": run.name, "prompt": prompt, "output": output, "stages": stages}


def _engine_on_service_workload(run: MeasuredRun, rate: float, prompt: int, output: int) -> dict[str, float]:
    """The calibrated engine model on the service simulator's workload (Poisson at
    ``rate``, every request ``prompt`` in and ``output`` out, one of the run's distinct
    prompts at random): what the step terms predict for the very workload, so the rest
    of the service simulator's error is its kernel model's."""
    from tuner.engine.measured_run import prefix_keys

    e2e, tpot = [], []
    prompts = run.distinct_prompts()
    full = run.engine.keyed_blocks(prompt, output)
    for seed in SERVICE_SEEDS:
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, int(rate * SERVICE_HORIZON_S * 1.5)))
        arrivals = arrivals[arrivals < SERVICE_HORIZON_S]
        ids = rng.integers(1, prompts + 1, len(arrivals))
        requests = tuple(TraceRequest(float(a), prompt, output, prefix_keys(int(i), full, run.engine.block_size, {}, 0))
                         for a, i in zip(arrivals, ids))
        result = replay_run(replace(run, requests=requests, stage_of=(0,) * len(requests), stages=()), H100_VLLM_V1)
        judged = result.arrival_s >= SERVICE_WARMUP_S
        e2e.append(float(np.percentile(result.e2e_s[judged], 50)))
        tpot.append(float(np.percentile(result.tpot_s[judged], 99)))
    return {"e2e_p50_ms": 1e3 * float(np.mean(e2e)), "tpot_p99_ms": 1e3 * float(np.mean(tpot))}


def measure(directory: Path, progress=print) -> dict[str, Any]:
    runs = [read_run(path) for path in sorted((directory / "runs").glob("*.json"))]
    if not runs:
        raise SystemExit(f"bench_sim2real: no runs/*.json under {directory}")
    started = time.perf_counter()
    progress(f"fitting on {len(runs)} runs")
    fitted = fit(runs, start=H100_VLLM_V1, progress=progress)
    fit_seconds = time.perf_counter() - started
    shipped, refit = H100_VLLM_V1.named(), fitted.named()
    difference = max(abs(refit[n] / shipped[n] - 1.0) if shipped[n] else abs(refit[n]) for n in COEFFICIENTS)
    report: dict[str, Any] = {
        "runs": [run.name for run in runs],
        "coefficients": refit,
        "shipped_defaults": shipped,
        "shipped_defaults_max_difference_pct": 100.0 * difference,
        "shipped_defaults_match_fit": difference <= MATCH_TOLERANCE,
        "fit_seconds": round(fit_seconds, 1),
        "calibration": [], "leave_one_run_out": [], "published": PUBLISHED, "replay_seconds": {},
    }
    for run in runs:
        start = time.perf_counter()
        report["calibration"].append({"run": run.name, "stages": _figures(run, fitted)})
        report["replay_seconds"][run.name] = round(time.perf_counter() - start, 2)
    for held in runs:
        progress(f"leaving out {held.name}")
        others = [run for run in runs if run is not held]
        coefficients = fit(others, start=fitted, progress=None)
        report["leave_one_run_out"].append({
            "run": held.name, "coefficients": coefficients.named(),
            "stages": _figures(held, coefficients)})
    report["speed"] = _speed(runs[0])
    report["kv_blocks"] = [_kv_blocks(run) for run in runs]
    problems = [_served_problem(run, ROOT) for run in runs]
    left_out = {entry["run"]: StepCoefficients(**entry["coefficients"], source="left out")
                for entry in report["leave_one_run_out"]}
    report["kernel_factors"] = _kernel_factors(runs, problems, left_out, progress)
    report["service_simulator"] = []
    for run, problem in zip(runs, problems):
        progress(f"service simulator on {run.name}")
        report["service_simulator"].append(_service_simulator(run, problem))
    return report


def _short(name: str) -> str:
    parts = name.split("-")
    return "-".join(parts[2:-1]) if len(parts) > 3 else name


def render(report: dict[str, Any]) -> str:
    """Markdown: per run and stage, measured and predicted means and the errors (calibration
    and leave-one-run-out), then the published comparison."""
    loro = {entry["run"]: entry for entry in report["leave_one_run_out"]}
    lines = ["| run | stage | e2e mean ms: measured / predicted | TTFT mean ms | TPOT mean ms | e2e p90 ms | "
             "error, calibration: e2e / TTFT / TPOT / e2e p90 | error, run left out: e2e / TTFT / TPOT / e2e p90 |",
             "|---|---|---|---|---|---|---|---|"]
    for entry in report["calibration"]:
        for stage, held in zip(entry["stages"], loro[entry["run"]]["stages"]):
            m, p = stage["measured"], stage["predicted"]
            pair = lambda metric, stat="mean": f"{m[metric][stat]:.1f} / {p[metric][stat]:.1f}"  # noqa: E731
            errors = lambda e: " / ".join(f"{e[metric]['mean']:+.1f}%" for metric in METRICS) + \
                f" / {e['e2e_ms']['p90']:+.1f}%"  # noqa: E731
            lines.append(f"| {_short(entry['run'])} | {stage['index']} | {pair('e2e_ms')} | {pair('ttft_ms')} | "
                         f"{pair('tpot_ms')} | {pair('e2e_ms', 'p90')} | {errors(stage['error_pct'])} | "
                         f"{errors(held['error_pct'])} |")
    return "\n".join(lines)


def render_published(report: dict[str, Any]) -> str:
    published = report["published"]
    ours = next(e for e in report["calibration"] if e["run"] == published["run"])
    held = next(e for e in report["leave_one_run_out"] if e["run"] == published["run"])
    lines = [f"| simulator | e2e mean error, stage 0 (5 req/s) | stage 1 (10 req/s) |", "|---|---|---|"]
    for label, entry in (("tuner, calibrated on all four runs", ours), ("tuner, this run left out", held)):
        errors = [abs(s["error_pct"]["e2e_ms"]["mean"]) for s in entry["stages"]]
        lines.append(f"| {label} | {errors[0]:.1f}% | {errors[1]:.1f}% |")
    for name, (first, second) in published["e2e_mean_error_pct"].items():
        lines.append(f"| {name} | {first:.1f}% | {second:.1f}% |")
    return "\n".join(lines)


def render_service_simulator(report: dict[str, Any]) -> str:
    """Markdown: the service simulator's figures beside the measured ones."""
    lines = ["| run | stage | e2e p50 ms: measured / service simulator | e2e p90 ms | TTFT p99 ms | TPOT p99 ms | "
             "e2e p50 ms, run left out of both fits | e2e p50 ms, engine model on the same workload |",
             "|---|---|---|---|---|---|---|---|"]
    left_out = {(entry["run"], stage["index"]): stage["predicted"]
                for entry in report.get("kernel_factors", {}).get("leave_one_run_out", [])
                if "service_simulator" in entry for stage in entry["service_simulator"]["stages"]}
    for entry in report.get("service_simulator", []):
        for stage in entry["stages"]:
            m, p = stage["measured"], stage["predicted"]
            cells = [f"{m[k]:.1f} / {p[k]:.1f} ({100 * (p[k] / m[k] - 1):+.0f}%)"
                     for k in ("e2e_p50_ms", "e2e_p90_ms", "ttft_p99_ms", "tpot_p99_ms")]
            flag = " (overloaded)" if p["overloaded"] else ""
            cells += [_p50_cell(left_out.get((entry["run"], stage["index"])), m),
                      _p50_cell(stage.get("engine_model"), m)]
            lines.append(f"| {_short(entry['run'])} | {stage['index']}{flag} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _p50_cell(figures: dict[str, Any] | None, measured: dict[str, float]) -> str:
    if figures is None:
        return "–"
    value = figures["e2e_p50_ms"]
    overloaded = " (overloaded)" if figures.get("overloaded") else ""
    return f"{value:.1f} ({100 * (value / measured['e2e_p50_ms'] - 1):+.0f}%){overloaded}"


def render_kernel_factors(report: dict[str, Any]) -> str:
    """Markdown: a decode step's kernels under each factor set against the engine's GPU
    terms, per run and batch (the left-out column: factors fitted on the other runs)."""
    factors = report["kernel_factors"]
    left_out = {(row["run"], row["batch"]): row for entry in factors["leave_one_run_out"] for row in entry["steps"]}
    before = {(row["run"], row["batch"]): row for row in factors["steps_a100_cublas"]}
    lines = ["| run | sequences | engine model, GPU terms ms | `a100-cublas` ms | `h100-vllm-graphs` ms | "
             "fitted with the run left out ms |", "|---|---|---|---|---|---|"]
    for row in factors["steps"]:
        key = (row["run"], row["batch"])
        if row["batch"] not in (1, 8, 64):
            continue
        cells = [f"{r['model_ms']:.2f} ({r['error_pct']:+.0f}%)" for r in (before[key], row, left_out[key])]
        lines.append(f"| {_short(row['run'])} | {row['batch']} | {row['engine_ms']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_coefficients(report: dict[str, Any]) -> str:
    lines = ["| term | fitted on all runs | " + " | ".join(f"{_short(e['run'])} left out"
                                                           for e in report["leave_one_run_out"]) + " |",
             "|---|---|" + "---|" * len(report["leave_one_run_out"])]
    for name in COEFFICIENTS:
        cells = [report["coefficients"][name]] + [e["coefficients"][name] for e in report["leave_one_run_out"]]
        lines.append(f"| `{name}` | " + " | ".join(f"{c:.4g}" for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=RUNS, help="directory of measured runs (runs/*.json)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    add_options(parser)
    args = parser.parse_args(argv)
    report = measure(args.runs.resolve(), progress=lambda line: print(line, file=sys.stderr))
    if args.record:
        record("bench_sim2real", report, args.note)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report), render_published(report), render_coefficients(report), render_kernel_factors(report),
              render_service_simulator(report), sep="\n\n")
        speed = report["speed"]
        print(f"\nreplay of {speed['requests']:,} requests over {speed['trace_s']:.0f} s: {speed['seconds']:.1f} s "
              f"(target <= {speed['target_s']:.0f} s); shipped defaults within "
              f"{100 * MATCH_TOLERANCE:.0f}% of this fit: {report['shipped_defaults_match_fit']} "
              f"(largest difference {report['shipped_defaults_max_difference_pct']:.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
