"""Human-readable output of simulations (rich tables), kept apart from the CLI parsing."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.table import Table

from .problem.assignment import Assignment
from .problem.model import Problem, Service
from .sim.metrics import OVERLOADED, Metrics


def stream_names(service: Service) -> list[str]:
    """Track names for a trace, in the simulator's stream order: each lane's executors
    (the first lane's plain, the others named by their partition), then neighbours."""
    names = []
    for lane, partition in enumerate(service.lanes()):
        suffix = f" on {partition.name}" if lane else ""
        names += [f"executor {i}{suffix}" for i in range(service.executors)]
    return names + [f"neighbour {n.name}" for n in service.neighbors]


def terminal_width() -> int:
    """The terminal's width in columns; for a pipe or a file ``$COLUMNS``, else 80."""
    return shutil.get_terminal_size().columns


def terminal_console() -> Console:
    """A console as wide as the terminal (for a pipe or a file: :func:`terminal_width`,
    where a fixed 200 columns made tables too wide to read in one)."""
    return Console(width=None if Console().is_terminal else terminal_width())


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.2f}"


def metrics_table(problem: Problem, assignment: Assignment,
                  results: Sequence[tuple[str, Metrics]], seed: int) -> None:
    """Print one row per regime with the figures people compare first."""
    sources = sorted({c.profile.source for _, c in assignment.cells()})
    console = Console(width=None if Console().is_terminal else 200)
    title = (f"{problem.name}: " + assignment.summary(problem)
             + f"  (seed {seed}, profiles {'/'.join(sources)}; all figures simulated)")
    table = Table(title=title, title_justify="left")
    token = problem.service.kind.token_level
    columns = ["regime", "arrivals/s", "goodput/s", "throughput/s", "SLO met", "p50 ms", "p99 ms", "admitted max",
               "mem peak GiB", "SM busy", "stall ms"]
    if token:
        columns += ["TTFT p99 ms", "TPOT p99 ms"]
    if problem.service.neighbors:
        columns.append("neighbour progress")
    # service.launch: iterations whose GPU waited on the host for most of their time
    hosted = problem.service.launch == "eager" or problem.service.graph_replay_s > 0.0
    if hosted:
        columns.append("host-bound iterations")
    for column in columns:
        table.add_column(column, justify="left" if column == "regime" else "right")
    for name, m in results:
        row = [name, f"{m.arrival_rate_rps:.3g}", f"{m.goodput_rps:.1f}" + (" *" if m.overloaded else ""),
               f"{m.throughput_rps:.1f}", f"{m.slo_attainment:.1%}",
               _ms(m.latency_p50_s), _ms(m.latency_p99_s), str(m.admitted_max),
               f"{m.memory_peak_bytes / 2**30:.1f}", f"{m.sm_busy_fraction:.1%}", _ms(m.admission_stall_s)]
        if token:
            row += [_ms(m.ttft_p99_s), _ms(m.tpot_p99_s)]
        if problem.service.neighbors:
            row.append("—" if m.neighbor_progress_ratio is None else f"{m.neighbor_progress_ratio:.1%}")
        if hosted:
            row.append(f"{m.host_bound_iterations} of {m.iterations}")
        table.add_row(*row)
    warmups = sorted({m.warmup_s for _, m in results})
    table.caption = (f"judged: requests arriving after a warm-up of {', '.join(f'{w:g}' for w in warmups)} s; "
                     "arrivals/s: the rate the window realised")
    if any(m.overloaded for _, m in results):
        table.caption += f"; * {OVERLOADED} (the backlog grew through the window; see --capacity)"
    console.print(table)


def typical_batches(problem: Problem) -> list[tuple[str, dict[str, float]]]:
    """Named batches the service runs often: the largest batch (where workspace is
    reserved), ``service.baseline_batch`` when the file sets one, and the smallest step."""
    service = problem.service
    batches = [("largest batch", service.largest_batch_variables(problem.size_fields))]
    if service.baseline_batch:
        batches.append(("baseline_batch", service.baseline_batch_variables(problem.size_fields)))
    smallest = {name: 1.0 for name in batches[0][1]}
    if service.kind.token_level:
        smallest.update(prefill_tokens=0.0, decode_seqs=1.0)
        batches.append(("one-sequence decode step", smallest))
    else:
        batches.append(("batch of one", smallest))
    return batches


def wrapped(text: str, width: int, indent: int = 0) -> list[str]:
    """``text`` indented by ``indent`` spaces and wrapped at ``width`` columns between
    words (a bucket label or a path is never split), its continuation lines 4 deeper."""
    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4),
                         break_long_words=False, break_on_hyphens=False)


def bucket_lines(problem: Problem, width: int | None = None) -> Iterator[str]:
    """What ``tuner validate`` says of buckets: per operator its key, its buckets, and
    the bucket each typical batch falls in. Lines wrap at ``width`` columns (default:
    :func:`terminal_width`), never inside a label: an operator with 80 buckets printed
    them on one line."""
    width = width or terminal_width()
    batches = typical_batches(problem)
    yield "buckets (one config is chosen per operator and bucket):"
    for op in problem.service.operators:
        bucketing = op.bucketing
        if not bucketing.key:
            yield f"  {op.name}: one bucket (every shape)"
            continue
        labels = " ".join(b.label for b in bucketing.buckets)
        yield from wrapped(f"{op.name}: key {', '.join(bucketing.key)}, {bucketing.size} buckets: {labels}", width, 2)
        for name, variables in batches:
            values = op.variables(variables)
            shape = ", ".join(f"{dim}={values[dim]:g}" for dim in bucketing.key)
            bucket = bucketing.buckets[bucketing.index(values)]
            unreached = "" if bucketing.reachable(bucket) else " (no batch the memory budget admits falls here)"
            yield from wrapped(f"{name}: {shape} → {bucket.label}{unreached}", width, 4)
