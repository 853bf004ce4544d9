"""``tuner validate`` and ``tuner simulate``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from ..errors import TunerError
from . import DEFAULT_PROBLEM, main, one_line_errors


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@one_line_errors
def validate(problem: Path | None) -> None:
    """Check a problem file and summarise it."""
    from ..problem import load_problem

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    ops = ", ".join(f"{op.name}({op.family}×{op.repeat})" for op in loaded.service.operators)
    click.echo(f"{loaded.path}: ok — {loaded.service.batching} batching, operators {ops}, "
               f"regimes {', '.join(loaded.regimes)}")


@main.command()
@click.argument("problem", required=False, type=click.Path(path_type=Path))
@click.option("--regime", "regimes", multiple=True, help="Regime to simulate (repeatable; default: all).")
@click.option("--assign", "assign", multiple=True, metavar="OP=CONFIG",
              help="Config for an operator, by name or by parameters (OP=K=V,K=V). Repeatable.")
@click.option("--seed", default=0, show_default=True, help="Workload seed (same seed, same requests).")
@click.option("--horizon", type=float, default=None, help="Measurement window in seconds (default: the regime's).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Chrome Trace Event file (open it in Perfetto); one regime only.")
@one_line_errors
def simulate(problem: Path | None, regimes: tuple[str, ...], assign: tuple[str, ...], seed: int,
             horizon: float | None, as_json: bool, trace_path: Path | None) -> None:
    """Simulate the service under traffic regimes and report goodput and resources."""
    from ..problem import load_problem, resolve_assignment
    from ..report import metrics_table, stream_names
    from ..sim import simulate as run_simulation
    from ..sim import write_chrome_trace

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    for name in regimes:
        if name not in loaded.regimes:
            raise TunerError(f"{loaded.path}: regimes: no regime {name!r} (regimes: {', '.join(loaded.regimes)})")
    if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
        raise TunerError(f"--horizon must be a finite number of seconds > 0 but got {horizon}")
    chosen = list(regimes) or list(loaded.regimes)
    if trace_path is not None and len(chosen) != 1:
        raise TunerError("--trace needs exactly one --regime")
    assignment = resolve_assignment(loaded, assign)
    results = []
    for name in chosen:
        with _status(f"simulating regime {name!r}", quiet=as_json):
            result = run_simulation(loaded, assignment, name, seed=seed, horizon_s=horizon,
                                    record=trace_path is not None)
        results.append((name, result))
        if trace_path is not None and result.recording is not None:
            write_chrome_trace(result.recording, trace_path, stream_names(loaded.service))
    sources = sorted({c.profile.source for c in assignment.values()})
    if as_json:
        documents = [
            {"problem": loaded.name, "regime": name, "seed": seed,
             "assignment": {op: c.name for op, c in assignment.items()},
             "profile_source": ",".join(sources), **result.metrics.to_dict()}
            for name, result in results
        ]
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
        return
    metrics_table(loaded, assignment, [(n, r.metrics) for n, r in results], seed)
    if trace_path is not None:
        click.echo(f"trace written to {trace_path} (open it at ui.perfetto.dev)")


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
