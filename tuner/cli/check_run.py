"""``tuner check-run``: replay a measured serving run through the engine model and print
predicted against measured latencies, per load stage."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import click

from .deployment import deployment_from_options, deployment_options
from .group import fail, main, one_line_errors, warn


def _finite(value: Any) -> Any:
    """JSON has no NaN: a figure with no requests behind it is null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


@main.command("check-run")
@click.argument("run_file", metavar="RUN.json", type=click.Path(exists=False))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"run", "stages": [{"index", "predicted", "measured", "error_pct"}]} (milliseconds).')
@deployment_options(model_required=False)
@one_line_errors
def check_run(run_file: str, as_json: bool, **options: Any) -> None:
    """Replay RUN.json with the shipped step costs and compare with what it measured.

    RUN.json is a measured run (format measured-run/1), which names its deployment; a
    `vllm bench serve --save-result --save-detailed` result, or an inference-perf report
    folder (with per-request metrics), whose deployment the options give (--model at
    least). A vllm bench result saves no arrival times: a draw of the process it sent
    (Poisson, or gamma with its burstiness; seed 0) is replayed.

    The run's deployment (model config, GPU, tensor parallelism, engine arguments) is
    built as it was run and its trace replayed through vLLM V1's scheduler (token budget,
    chunked prefill, KV blocks with prefix caching and preemption, CUDA graphs, async
    scheduling) with the step costs shipped for that GPU and engine; nothing is fitted to
    the run. Per stage: mean, p50, p90 and p99 of e2e latency, TTFT and TPOT
    ((e2e - TTFT) / (output tokens - 1) per request), predicted, and beside them the
    measured figures and the error where the run has them (a plan gets predictions only).
    """
    from ..engine.calibrate import replay_run, stage_figures
    from ..engine.defaults import coefficients_for
    from ..engine.measured_run import gpu_preset_name

    run = _read(run_file, options)
    coefficients, warning = coefficients_for(gpu_preset_name(run.gpu), "vllm")
    if warning:
        warn([warning])
    started = time.perf_counter()
    result = replay_run(run, coefficients)
    seconds = time.perf_counter() - started
    figures = stage_figures(run, result)
    if as_json:
        click.echo(json.dumps({"run": run.name, "stages": [
            {"index": s.index, "requests": s.requests, "predicted": _finite(s.predicted),
             "measured": _finite(s.measured), "error_pct": _finite(s.error_pct)} for s in figures]}, indent=2))
        return
    engine = run.engine
    click.echo(f"{run.name}: {run.model.name} ({run.model.parameters / 1e9:.2f} B parameters) on {run.gpu}, "
               f"TP {run.tp}; vLLM V1 with max_num_seqs {engine.max_num_seqs}, max_num_batched_tokens "
               f"{engine.max_num_batched_tokens}, {engine.num_gpu_blocks:,} KV blocks of {engine.block_size}")
    click.echo(f"step costs: {coefficients.source}")
    click.echo(f"replayed {len(run.requests):,} requests in {seconds:.1f} s: {result.steps:,} steps, "
               f"{result.preemptions} preemptions, {result.cached_tokens:,} prompt tokens from the prefix cache"
               + (f", {result.refused} refused" if result.refused else ""))
    for stage in figures:
        click.echo("")
        click.echo(_stage_table(stage, run.stages[[s.index for s in run.stages].index(stage.index)].rate_qps))


def _read(run_file: str, options: dict[str, Any]):
    """The run in ``run_file``, whichever of the formats it is in."""
    from pathlib import Path

    from ..engine.inference_perf import is_inference_perf, read_inference_perf
    from ..engine.measured_run import read_run
    from ..engine.model_config import read_json_object
    from ..engine.vllm_bench import is_vllm_bench, read_vllm_bench

    if Path(run_file).is_dir():
        if not is_inference_perf(Path(run_file)):
            fail(f"{run_file}: a folder, but not an inference-perf report (no stage_N_lifecycle_metrics.json)")
        if options["model_config"] is None:
            fail(f"{run_file}: an inference-perf report names no deployment: pass --model CONFIG.json "
                 "(and --tp and the engine arguments it ran with)")
        return read_inference_perf(run_file, deployment_from_options(options))
    data = read_json_object(Path(run_file))
    if isinstance(data, dict) and data.get("format") == "measured-run/1":
        given = _given(options)
        if given:
            fail(f"{run_file}: a measured run names its own deployment; --{given[0].replace('_', '-')} applies "
                 "to vllm bench serve results only")
        return read_run(run_file)
    if is_vllm_bench(data):
        if options["model_config"] is None:
            fail(f"{run_file}: a vllm bench serve result names no deployment: pass --model CONFIG.json "
                 "(and --tp and the engine arguments it ran with)")
        return read_vllm_bench(run_file, deployment_from_options(options))
    fail(f"{run_file}: neither a measured run (format measured-run/1) nor a vllm bench serve result "
         "(request_rate, input_lens, output_lens)")


def _given(options: dict[str, Any]) -> list[str]:
    """The deployment options given on the command line (not left at their defaults)."""
    from click.core import ParameterSource

    context = click.get_current_context()
    return [name for name in options if context.get_parameter_source(name) is ParameterSource.COMMANDLINE]


def _cell(predicted: float, measured: float, error: float) -> str:
    if measured != measured:  # the run did not report it
        return f"{predicted:.1f} / –"
    return f"{predicted:.1f} / {measured:.1f} ({error:+.1f}%)"


def _stage_table(stage: Any, rate: float | None) -> str:
    rate_text = f"{rate:g} req/s, " if rate is not None else ""
    header = f"stage {stage.index} ({rate_text}{stage.requests:,} requests)"
    if stage.measured is None:
        lines = [header, f"  {'ms':<6}" + "".join(f"{s:>10}" for s in ("mean", "p50", "p90", "p99"))]
        for metric, label in (("e2e_ms", "e2e"), ("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
            lines.append(f"  {label:<6}" + "".join(f"{stage.predicted[metric][s]:>10.1f}"
                                                   for s in ("mean", "p50", "p90", "p99")))
        return "\n".join(lines)
    lines = [header + ": predicted / measured (error)",
             f"  {'ms':<6}" + "".join(f"{s:>26}" for s in ("mean", "p50", "p90", "p99"))]
    errors = stage.error_pct
    for metric, label in (("e2e_ms", "e2e"), ("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        cells = [_cell(stage.predicted[metric][s], stage.measured[metric][s], errors[metric][s])
                 for s in ("mean", "p50", "p90", "p99")]
        lines.append(f"  {label:<6}" + "".join(f"{c:>26}" for c in cells))
    return "\n".join(lines)
