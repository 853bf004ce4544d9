"""``tuner replay``: the service executed on a wall clock, measured (issue 41)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import TunerError
from .group import DEFAULT_PROBLEM, main, one_line_errors, storage_option
from .params import SECONDS, SEED, OutputFile

if TYPE_CHECKING:
    from ..problem.assignment import Assignment
    from ..problem.model import Problem
    from ..replay import ReplayResult
    from ..sim.metrics import Metrics

#: Rows of the printed comparison: (label, metric, format).
_FIGURES = (("arrivals/s", "arrival_rate_rps", "{:.3g}"), ("goodput/s", "goodput_rps", "{:.1f}"),
            ("SLO met", "slo_attainment", "{:.1%}"), ("p50 ms", "latency_p50_s", "ms"),
            ("p90 ms", "latency_p90_s", "ms"), ("p99 ms", "latency_p99_s", "ms"), ("completed", "completed", "{:d}"),
            ("mem peak GiB", "memory_peak_bytes", "GiB"))


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@click.option("--regime", default=None, help="Regime to replay (default: the problem's first).")
@click.option("--assign", "assign", multiple=True, metavar="OP[@BUCKET]=CONFIG",
              help="Config for an operator or one bucket of it, as `tuner simulate --assign` takes it. Repeatable.")
@click.option("--table", "from_table", is_flag=True,
              help="Run the configs the stored table (--storage) holds for this regime, as the dispatcher would.")
@click.option("--isolated-fastest", is_flag=True,
              help="Run the per-bucket isolated-fastest configs (the baseline: what triton.autotune(key=...) keeps).")
@storage_option("The tuned table --table reads (a SQLite file or URL, or a JSON export).")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Workload seed (the simulator's requests).")
@click.option("--duration", type=SECONDS, default=None,
              help="Window in seconds of wall-clock time (default: the regime's horizon).")
@click.option("--drain", type=SECONDS, default=None,
              help="How long after the window to wait for the requests still in the system (default: 10 s); "
                   "those left count as unfinished.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the kernels run: the CPU (the families' PyTorch references at 1/16 of each "
                   "dimension), or this machine's GPU (their Triton kernels on CUDA streams, one per executor "
                   "and lane).")
@click.option("--compare", is_flag=True, help="Also simulate the same requests and print simulated beside measured.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (tuner simulate's keys, and a 'replay' object).")
@click.option("--trace", "trace_path", type=OutputFile(stdout="standard output carries replay's own report"),
              default=None, help="Write a Chrome Trace Event file of what ran when, measured (open it in Perfetto; "
                                 "gzipped when FILE ends in .gz): batches, kernels (CUDA events on a GPU), "
                                 "neighbours, memory and queue. Any file but a trace needs --force.")
@click.option("--force", is_flag=True, help="With --trace: replace an existing file that is not a trace.")
@one_line_errors
def replay(problem: Path | None, regime: str | None, assign: tuple[str, ...], from_table: bool,
           isolated_fastest: bool, storage: str, seed: int, duration: float | None, drain: float | None, device: str,
           compare: bool, as_json: bool, trace_path: Path | None, force: bool) -> None:
    """Execute the service on a wall clock and measure what it delivers.

    The regime's seeded arrivals (the same requests `tuner simulate` draws) arrive at
    their times; admission holds real allocations against the memory budget (scaled down
    on the CPU); the problem's own batching policy fills the executors, which run side by
    side. An operator with a kernel runs it (on the CPU: its family's PyTorch reference
    at 1/16 of each dimension, so the times are the CPU's; on a GPU: its Triton kernel
    with the config, on the executor's stream); one with a declared profile waits out its
    latency (on a GPU: a spin kernel on its share of the SMs)."""
    from ..problem import load_problem
    from ..replay import replay as run_replay

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    name = regime or next(iter(loaded.regimes))
    window = loaded.regime(name).window_s(duration)  # (an unknown regime: one line naming those there are)
    assignment = _assignment(loaded, name, assign, from_table, isolated_fastest, storage)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise TunerError(f"--device cuda: no CUDA GPU here (torch {torch.__version__}: "
                             "torch.cuda.is_available() is False); replay with --device cpu")
    if not as_json:
        click.echo(f"replaying {loaded.name}:{name} on the {device} for {window:g} s (and the drain)...", err=True)
    if trace_path is not None:
        from ..outputs import TRACE_MARK, refuse_foreign

        refuse_foreign(trace_path, TRACE_MARK, force)
    result = run_replay(loaded, assignment, name, seed=seed, duration_s=duration, device=device,
                        trace_path=trace_path, **({} if drain is None else {"drain_s": drain}))
    simulated = None
    if compare:
        from ..sim import simulate

        simulated = simulate(loaded, assignment, name, seed=seed, horizon_s=duration).metrics
    if as_json:
        document = {"problem": loaded.name, "regime": name, "seed": seed, "assignment": assignment.as_dict(loaded),
                    **result.to_dict()}
        if simulated is not None:
            document["simulated"] = simulated.to_dict()
        click.echo(json.dumps(document, indent=2))
        return
    _print(loaded.name, name, result, simulated)


def _assignment(problem: Problem, regime: str, assign: tuple[str, ...], from_table: bool, isolated_fastest: bool,
                storage: str) -> Assignment:
    """What the replay runs: ``--assign``'s configs (the defaults elsewhere), the table's
    for the regime, or the per-bucket isolated-fastest baseline (one of the three)."""
    if sum((bool(assign), from_table, isolated_fastest)) > 1:
        raise TunerError("--assign, --table and --isolated-fastest each say what to run: give one of them")
    if isolated_fastest:
        from ..search import PER_BUCKET, JointSpace

        return PER_BUCKET.assignment(JointSpace.of(problem))
    if from_table:
        from .table_assignments import table_assignments

        _, assignments = table_assignments(problem, storage, "--table")
        if regime not in assignments:
            raise TunerError(f"--table: the table in {storage} has no rows for regime {regime!r} of "
                             f"{problem.name} (regimes: {', '.join(assignments) or 'none'})")
        return assignments[regime]
    from ..problem import resolve_assignment

    return resolve_assignment(problem, assign)


def _print(problem: str, regime: str, result: ReplayResult, simulated: Metrics | None) -> None:
    measured = result.metrics.to_dict()
    other = simulated.to_dict() if simulated is not None else None
    click.echo(f"{problem}:{regime}, {result.metrics.arrivals} arrivals: measured on the {result.device} "
               f"({result.kernels} per launch)" + (", simulated beside it" if other else ""))
    for label, key, form in _FIGURES:
        line = f"  {label:<14}{shown(measured[key], form):>12}"
        if other is not None:
            line += f"   simulated {shown(other[key], form):>10}"
        click.echo(line)
    click.echo(f"  wall {result.wall_s:.1f} s; arrivals seen up to {result.lateness_p99_s * 1e3:.2f} ms late (p99); "
               f"{result.unfinished} request(s) unfinished after the drain; memory held for real at "
               f"1/{1 / result.memory_scale:g} of its bytes")
    if result.device == "cuda" and result.issue_share is not None:
        click.echo(f"  issuing launches took {result.issue_share:.0%} of the batches' time"
                   + (" (host-bound: the GPU waited on Python's launches)" if result.issue_share > 0.9 else ""))


def shown(value: float | int | None, form: str) -> str:
    """A figure as the comparison prints it: ``form`` "ms" (seconds in ms), "GiB" (bytes)
    or a format string; "—" where there is none (also ``benchmarks/bench_replay.py``'s)."""
    if value is None:
        return "—"
    if form == "ms":
        return f"{value * 1e3:.2f}"
    if form == "GiB":
        return f"{value / 2**30:.2f}"
    return form.format(value)
