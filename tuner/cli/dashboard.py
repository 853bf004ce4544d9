"""``tuner dashboard`` (serve the results on loopback, optuna-dashboard beside them) and
``tuner report`` (the same pages as one HTML file; figures into the studies on request)."""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import click

from . import main, one_line_errors

STORAGE_HELP = ("SQLAlchemy URL of the tuner database, opened read-only "
                "(default: sqlite:///results.db if it exists, else sqlite:///results.db.example).")


def _storage(storage: str | None) -> str:
    from ..dashboard import default_storage

    return storage or default_storage()


def _common(command):
    """Options both commands take: where the data and the problem files are."""
    command = click.option("--jobs", "-j", default=None, type=click.IntRange(1, 256),
                           help="Worker processes for the simulations [default: the number of CPUs].")(command)
    command = click.option("--seeds", default=3, show_default=True, type=click.IntRange(1, 50),
                           help="Seeds per point of the goodput-vs-load curves (the error bars are their 95% CI).")(command)
    command = click.option("--problems", "problems_dir", default="search_spaces", show_default=True,
                           type=click.Path(path_type=Path),
                           help="Directory of problem files <problem>.yaml, for the simulated plots.")(command)
    return click.option("--storage", envvar="TUNER_STORAGE", default=None, help=STORAGE_HELP)(command)


@main.command()
@_common
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8050, show_default=True, type=int, help="Port (0: any free port).")
@click.option("--optuna-dashboard/--no-optuna-dashboard", "with_optuna", default=True, show_default=True,
              help="Also serve optuna-dashboard (read-only) on the next port, linked from each study page.")
@click.option("--warm/--no-warm", default=True, show_default=True,
              help="Run every page's simulations in the background at start-up, so pages open instantly.")
@one_line_errors
def dashboard(storage: str | None, problems_dir: Path, seeds: int, jobs: int | None, host: str, port: int,
              with_optuna: bool, warm: bool) -> None:
    """Serve the config table, goodput-vs-load, timelines and study pages (read-only, offline)."""
    from ..dashboard import Dashboard
    from ..dashboard.server import make_optuna_dashboard_server, make_server, serve_in_background

    board = Dashboard(_storage(storage), problems_dir, sweep_seeds=seeds, jobs=jobs or os.cpu_count() or 1)
    server = make_server(board, host, port)
    extra = None
    if with_optuna:
        extra = make_optuna_dashboard_server(board.storage, host, 0 if port == 0 else server.server_address[1] + 1)
        board.optuna_dashboard_url = f"http://{host}:{extra.server_address[1]}"
        serve_in_background(extra)
    click.echo(f"tuner dashboard on http://{host}:{server.server_address[1]}/ ({board.storage}, read-only)"
               + (f"; optuna-dashboard on {board.optuna_dashboard_url}/dashboard" if extra else "") + "; Ctrl-C stops")
    if warm:
        threading.Thread(target=_warm, args=(board,), daemon=True, name="warm").start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        board.close()
        if extra is not None:
            extra.shutdown()
            extra.server_close()


def _warm(board) -> None:
    try:
        board.warm()
    except Exception as exc:  # a page will show the same error when opened
        if not board.closed:
            click.echo(f"tuner dashboard: precomputing stopped: {exc}", err=True)


@main.command()
@_common
@click.option("--html", "out", type=click.Path(path_type=Path), help="Write one self-contained HTML file.")
@click.option("--into-studies", is_flag=True,
              help="Save the goodput-vs-load and timeline figures and a Markdown summary into each Optuna study "
                   "(optuna-dashboard shows them). Writes to the database.")
@click.option("--problem", "only", multiple=True, help="Only plot these problems (repeatable; the table keeps all).")
@one_line_errors
def report(storage: str | None, problems_dir: Path, seeds: int, jobs: int | None, out: Path | None,
           into_studies: bool, only: tuple[str, ...]) -> None:
    """Write the dashboard's pages as one HTML file (plotly.js inline, works offline)."""
    from ..dashboard import Dashboard, save_into_studies, write_report

    if out is None and not into_studies:
        raise click.UsageError("say what to write: --html OUT and/or --into-studies")
    board = Dashboard(_storage(storage), problems_dir, sweep_seeds=seeds, jobs=jobs or os.cpu_count() or 1)
    try:
        if out is not None:
            with _progress("report") as step:
                path = write_report(board, out, list(only) or None, progress=step)
            click.echo(f"report written to {path}")
        if into_studies:
            with _progress("studies") as step:
                written = save_into_studies(board, list(only) or None, progress=step)
            click.echo(f"figures and a note saved into {len(written)} studies; open them with "
                       f"optuna-dashboard {board.storage}")
    finally:
        board.close()


@contextmanager
def _progress(what: str):
    """A rich spinner naming the part being simulated (nothing when stderr is not a terminal)."""
    if not sys.stderr.isatty():
        yield lambda _part: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda part: bar.update(task, description=f"{what}: {part}")
