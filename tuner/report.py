"""Human-readable output of simulations (rich tables), kept apart from the CLI parsing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from .problem.model import Config, Problem, Service
from .sim.metrics import Metrics


def stream_names(service: Service) -> list[str]:
    """Track names for a trace: executors first, then neighbour streams."""
    return [f"executor {i}" for i in range(service.executors)] + [f"neighbour {n.name}" for n in service.neighbors]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.2f}"


def metrics_table(problem: Problem, assignment: Mapping[str, Config],
                  results: Sequence[tuple[str, Metrics]], seed: int) -> None:
    """Print one row per regime with the figures people compare first."""
    sources = sorted({c.profile.source for c in assignment.values()})
    console = Console(width=None if Console().is_terminal else 200)
    title = (f"{problem.name}: " + ", ".join(f"{op}={c.name}" for op, c in assignment.items())
             + f"  (seed {seed}, profiles {'/'.join(sources)}; all figures simulated)")
    table = Table(title=title, title_justify="left")
    token = problem.service.batching == "continuous"
    columns = ["regime", "goodput/s", "throughput/s", "SLO met", "p50 ms", "p99 ms", "admitted max",
               "mem peak GiB", "SM busy", "stall ms"]
    if token:
        columns += ["TTFT p99 ms", "TPOT p99 ms"]
    if problem.service.neighbors:
        columns.append("neighbour progress")
    for column in columns:
        table.add_column(column, justify="left" if column == "regime" else "right")
    for name, m in results:
        row = [name, f"{m.goodput_rps:.1f}", f"{m.throughput_rps:.1f}", f"{m.slo_attainment:.1%}",
               _ms(m.latency_p50_s), _ms(m.latency_p99_s), str(m.admitted_max),
               f"{m.memory_peak_bytes / 2**30:.1f}", f"{m.sm_busy_fraction:.1%}", _ms(m.admission_stall_s)]
        if token:
            row += [_ms(m.ttft_p99_s), _ms(m.tpot_p99_s)]
        if problem.service.neighbors:
            row.append("—" if m.neighbor_progress_ratio is None else f"{m.neighbor_progress_ratio:.1%}")
        table.add_row(*row)
    console.print(table)
