"""``tuner validate`` and ``tuner simulate``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import TunerError
from .group import DEFAULT_PROBLEM, main, one_line_errors, storage_option, warn
from .params import SECONDS, SEED, SEEDS, OutputFile

if TYPE_CHECKING:
    from ..problem.knobs import KnobValue
    from ..problem.model import Problem
    from ..sim import SimResult
    from ..sim.chrome_trace import TraceWriter

#: The environment variable with the trace size (MB) above which ``--trace`` warns.
TRACE_WARN_ENV = "TUNER_TRACE_WARN_MB"
TRACE_WARN_MB = 100.0


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@one_line_errors
def validate(problem: Path | None) -> None:
    """Check a problem file and summarise it."""
    from ..problem import load_problem
    from ..console import bucket_lines, terminal_width, wrapped
    from ..problem.echo import resolved_lines

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    warn(loaded.warnings)
    ops = ", ".join(f"{op.name}({op.family}×{op.repeat})" for op in loaded.service.operators)
    summary = (f"{loaded.path}: ok — {loaded.service.batching} batching, operators {ops}, "
               f"regimes {', '.join(loaded.regimes)}")
    for line in wrapped(summary, terminal_width()):
        click.echo(line)
    for line in resolved_lines(loaded):
        for part in wrapped(line, terminal_width(), indent=4):
            click.echo(part)
    for line in bucket_lines(loaded):
        click.echo(line)


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@click.option("--regime", "regimes", multiple=True, help="Regime to simulate (repeatable; default: all).")
@click.option("--assign", "assign", multiple=True, metavar="OP[@BUCKET]=CONFIG",
              help="Config for an operator (every bucket) or one bucket of it (OP@M17..32=…, labels as "
                   "`tuner validate` lists them), by name or by parameters (OP=K=V,K=V). Repeatable.")
@click.option("--knob", "knob_settings", multiple=True, metavar="NAME=VALUE",
              help="Run the engine with this value of one of the problem's service.knobs (repeatable; "
                   "e.g. max_num_seqs=64, cudagraph_capture_sizes=1,2,4,8).")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Workload seed (same seed, same requests).")
@click.option("--horizon", type=SECONDS, default=None, help="Measurement window in seconds (default: the regime's).")
@click.option("--capacity", is_flag=True,
              help="Report the capacity at the SLO instead: the highest rate at which the SLO's attainment "
                   "target holds on each regime's traffic shape (about ten simulations per seed).")
@click.option("--seeds", type=SEEDS, default=3, show_default=True,
              help="With --capacity: seeds --seed, --seed+1, … (the CI is over them).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--trace", "trace_path", type=OutputFile(stdout="standard output carries simulate's own report"),
              default=None,
              help="Write a Chrome Trace Event file (open it in Perfetto; gzipped when FILE ends in .gz); one "
                   "regime only. An existing trace it wrote is overwritten, with a warning; any other file "
                   "needs --force. A short pilot run estimates "
                   f"the size first and warns above ${TRACE_WARN_ENV} MB (default {TRACE_WARN_MB:g}).")
@click.option("--trace-window", default=None, metavar="START:END",
              help="With --trace: only events between these simulated seconds (30: for the rest of the run).")
@click.option("--trace-kernels", default="all", show_default=True, metavar="all|none|sample:N",
              help="With --trace: every kernel slice, none (counters only), or every N-th of each stream.")
@click.option("--policy", default=None, metavar="table|static:REGIME|isolated-fastest",
              help="Choose configs at run time: the tuned table's dispatcher fed by the simulated load, "
                   "one regime's row of the table held fixed, or the isolated-fastest baseline.")
@storage_option("The tuned table --policy reads (a SQLite file or URL, or a JSON export).")
@click.option("--force", is_flag=True, help="With --trace: replace an existing file that is not a trace this "
                                           "command wrote.")
@one_line_errors
def simulate(problem: Path | None, regimes: tuple[str, ...], assign: tuple[str, ...], knob_settings: tuple[str, ...],
             seed: int,
             horizon: float | None, capacity: bool, seeds: int, as_json: bool, trace_path: Path | None,
             trace_window: str | None, trace_kernels: str, policy: str | None, storage: str, force: bool) -> None:
    """Simulate the service under traffic regimes and report goodput and resources."""
    from ..problem import load_problem, resolve_assignment
    from ..problem.knobs import shown as shown_knobs
    from ..console import metrics_table
    from ..sim import simulate as run_simulation
    from ..sim.chrome_trace import TraceOptions

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    knob_values = parse_knobs(loaded, knob_settings)
    loaded = loaded.with_knobs(knob_values)
    for name in regimes:
        loaded.regime(name)  # (an unknown one: one line naming those there are)
    chosen = list(regimes) or list(loaded.regimes)
    if trace_path is not None and len(chosen) != 1:
        raise TunerError("--trace needs exactly one --regime")
    if trace_path is None and (trace_window is not None or trace_kernels != "all"):
        raise TunerError("--trace-window and --trace-kernels go with --trace FILE")
    if trace_path is not None:
        from ..outputs import TRACE_MARK, refuse_foreign

        refuse_foreign(trace_path, TRACE_MARK, force)
    trace_options = TraceOptions.parse(trace_window, trace_kernels)
    if policy is not None:
        if assign or trace_path is not None or capacity:
            raise TunerError("--policy chooses the configs at run time: drop --assign, --trace and --capacity")
        _simulate_switching(loaded, policy, storage, chosen, seed, horizon, as_json)
        return
    assignment = resolve_assignment(loaded, assign)
    if capacity:
        if trace_path is not None:
            raise TunerError("--capacity runs many simulations: drop --trace")
        _simulate_capacity(loaded, assignment, chosen, tuple(range(seed, seed + seeds)), horizon, as_json)
        return
    results = []
    for name in chosen:
        if trace_path is None:
            with _status(f"simulating regime {name!r}", quiet=as_json):
                result = run_simulation(loaded, assignment, name, seed=seed, horizon_s=horizon)
        else:
            result, trace = _traced(loaded, assignment, name, seed, horizon, trace_path, trace_options, as_json)
        results.append((name, result))
    sources = sorted({c.profile.source for _, c in assignment.cells()})
    if as_json:
        documents = [
            {"problem": loaded.name, "regime": name, "seed": seed, "assignment": assignment.as_dict(loaded),
             "knobs": shown_knobs(knob_values),
             "profile_source": ",".join(sources), **result.metrics.to_dict()}
            for name, result in results
        ]
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    metrics_table(loaded, assignment, [(n, r.metrics) for n, r in results], seed)
    if trace_path is not None:
        click.echo(f"trace written to {trace_path}: {trace.events:,} events, {_mb(trace_path.stat().st_size)} "
                   "(open it at ui.perfetto.dev)")


def _traced(problem, assignment, regime: str, seed: int, horizon: float | None, path: Path, options,
            quiet: bool) -> tuple[SimResult, TraceWriter]:
    """Simulate with the trace streamed to ``path``, after warning when it would be big
    (a heavy regime makes millions of events) or would replace a file."""
    from ..console import stream_names
    from ..sim.chrome_trace import estimate_trace, trace_file, traced_simulation

    names, limit, gzipped = stream_names(problem.service), _warn_mb(), path.name.endswith(".gz")
    if path.exists():
        warn([f"--trace {path}: the file exists and is overwritten"])
    with _status("estimating the trace's size from a short pilot run", quiet=quiet):
        estimate = estimate_trace(problem, assignment, regime, seed, horizon, names, options, gzipped)
    if estimate.bytes > limit * 1e6:
        warn([f"--trace {path}: about {_mb(estimate.bytes)} and {estimate.events:,} events (a {estimate.pilot_s:g} s "
              f"pilot run, scaled to the horizon), over ${TRACE_WARN_ENV}={limit:g} MB; narrow it with "
              "--trace-window START:END or --trace-kernels none|sample:N"
              + ("" if gzipped else ", or name a .json.gz file")])
    with _status(f"simulating regime {regime!r}, writing {path}", quiet=quiet), trace_file(path) as out:
        return traced_simulation(problem, assignment, regime, seed, horizon, out, names, options)


def _warn_mb() -> float:
    """The trace size (MB) above which ``--trace`` warns: ``$TUNER_TRACE_WARN_MB`` or the default."""
    text = os.environ.get(TRACE_WARN_ENV, "")
    try:
        return float(text) if text else TRACE_WARN_MB
    except ValueError:
        raise TunerError(f"${TRACE_WARN_ENV}={text!r}: expected a number of MB") from None


def _mb(size: float) -> str:
    return f"{size / 1e6:.3g} MB"


def parse_knobs(problem: Problem, settings: tuple[str, ...]) -> dict[str, KnobValue]:
    """``--knob NAME=VALUE`` settings, each checked against the problem's ``service.knobs``
    (so that ``with_knobs`` cannot refuse them)."""
    from ..problem.knobs import parse_setting

    try:
        values = dict(parse_setting(text) for text in settings)
        problem.with_knobs(values)
    except ValueError as exc:
        raise TunerError(f"{problem.path}: {exc}") from None
    return values


def _simulate_capacity(problem, assignment, regimes: list[str], seeds: tuple[int, ...], horizon: float | None,
                       as_json: bool) -> None:
    from ..search.capacity import REL_TOL
    from ..problem.scenario import Scenario
    from ..search.evaluate import evaluate
    from .progress import TerminalProgress

    target = problem.service.slo.attainment
    documents = []
    for regime in regimes:
        done = []
        with TerminalProgress("tuner simulate", "seeds", quiet=as_json) as progress:
            progress.start(f"capacity of regime {regime}", 0, len(seeds))

            def step(index: int, value: float, probes: int) -> None:
                done.append(probes)
                progress.update(index + 1, detail=f"{sum(done)} simulations")

            def probe(rate: float, attainment: float) -> None:
                progress.update(len(done), detail=f"probed {rate:.3g} req/s: {attainment:.1%} met the SLO")

            found = evaluate(Scenario.of(problem, regime, seeds, horizon), assignment, on_seed=step,
                             metric="capacity", on_probe=probe)
            progress.finish()
        if not found.feasible:
            raise TunerError(f"{problem.path}: regime {regime!r}: {found.constraints.reason}")
        documents.append({
            "problem": problem.name, "regime": regime, "seeds": list(seeds), "assignment": assignment.as_dict(problem),
            "attainment_target": target, "capacity_rps": found.mean, "capacity_ci_rps": found.ci,
            "capacity_per_seed_rps": list(found.values), "relative_tolerance": REL_TOL,
            "capacity_lower_bound": found.lower_bound, "capacity_limit": found.limit,
            "simulations": sum(done), "horizon_s": problem.regime(regime).window_s(horizon),
        })
    if as_json:
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    for d in documents:
        ci = "" if d["capacity_ci_rps"] is None else f" ± {d['capacity_ci_rps']:.3g}"
        value = f"≥ {d['capacity_rps']:.3g} req/s (a lower bound)" if d["capacity_lower_bound"] \
            else f"{d['capacity_rps']:.3g}{ci} req/s"
        per_seed = ", ".join(f"{v:.3g}" for v in d["capacity_per_seed_rps"])
        click.echo(f"{d['regime']}: capacity at {d['attainment_target']:.0%} SLO attainment "
                   f"{value} (seeds: {per_seed}; {d['simulations']} simulations of "
                   f"{d['horizon_s']:g} s; simulated)")
        if d["capacity_lower_bound"]:
            click.echo(f"  {d['regime']}: {d['capacity_limit']}")


def _simulate_switching(problem, policy_text: str, storage: str, regimes: list[str], seed: int,
                     horizon: float | None, as_json: bool) -> None:
    from ..sim import DispatcherSwitch, NoSwitch, simulate_switching

    if policy_text == "isolated-fastest":
        from ..search import PER_BUCKET, JointSpace

        assignments = {"isolated-fastest": PER_BUCKET.assignment(JointSpace.of(problem))}
        make = lambda: NoSwitch("isolated-fastest")  # noqa: E731
    elif policy_text == "table" or policy_text.startswith("static:"):
        from ..runtime import Dispatcher
        from .table_assignments import table_assignments

        table, assignments = table_assignments(problem, storage, f"--policy {policy_text}")
        if policy_text == "table":
            make = lambda: DispatcherSwitch(Dispatcher(table))  # noqa: E731
        else:
            key = policy_text.removeprefix("static:")
            if key not in assignments:
                raise TunerError(f"--policy {policy_text}: the table has no regime {key!r} "
                                 f"(regimes: {', '.join(assignments)})")
            make = lambda: NoSwitch(key)  # noqa: E731
    else:
        raise TunerError(f"--policy {policy_text!r}: expected table, static:REGIME or isolated-fastest")
    documents = []
    for regime in regimes:
        with _status(f"simulating regime {regime!r} under --policy {policy_text}", quiet=as_json):
            metrics = simulate_switching(problem, assignments, make(), regime, seed=seed, horizon_s=horizon).metrics
        documents.append({"problem": problem.name, "regime": regime, "seed": seed, "policy": policy_text,
                          **metrics.to_dict()})
    if as_json:
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    for d in documents:
        click.echo(f"{d['regime']}: --policy {policy_text}: goodput {d['goodput_rps']:.2f}/s, "
                   f"SLO met {d['slo_attainment']:.1%}, p99 {d['latency_p99_s'] or float('nan'):.3f} s, "
                   f"{d['config_switches']} switches (simulated)")


class _status:
    """A spinner on stderr while a long step runs (silent for JSON output or a pipe)."""

    def __init__(self, message: str, quiet: bool) -> None:
        self.message, self.quiet, self._status = message, quiet, None

    def __enter__(self) -> None:
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(stderr=True).status(self.message)
            self._status.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
