"""``tuner dashboard`` (serve the results on loopback, optuna-dashboard beside them) and
``tuner report`` (the same pages as one HTML file; figures into the studies on request)."""

from __future__ import annotations

import itertools
import os
import signal
import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path

import click

from .. import bundled
from ..errors import TunerError
from .group import database_error, database_url, main, one_line_errors
from .params import Integer, OutputFile
from .progress import TerminalProgress, quiet_option

STORAGE_HELP = ("SQLAlchemy URL of the tuner database, opened read-only "
                "(default: sqlite:///results.db if it exists, else sqlite:///results.db.example).")


def _storage(storage: str | None) -> str:
    from ..dashboard import default_storage

    return storage or default_storage()


def _common(command):
    """Options both commands take: where the data and the problem files are."""
    command = click.option("--jobs", "-j", default=None, type=Integer(1, 256),
                           help="Worker processes for the simulations, 1 to 256 "
                                "[default: the number of CPUs].")(command)
    command = click.option("--seeds", default=3, show_default=True, type=Integer(1, 50),
                           help="Seeds per point of the goodput-vs-load curves, 1 to 50 (the error bars are their "
                                "95% CI).")(command)
    command = click.option("--problems", "problems_dir", default=bundled.PROBLEMS_DIR,
                           type=click.Path(path_type=Path),
                           help="Directory of problem files <problem>.yaml, for the simulated plots "
                                "[default: the bundled problems].")(command)
    return click.option("--storage", envvar="TUNER_STORAGE", default=None, callback=database_url,
                        help=STORAGE_HELP)(command)


@main.command()
@_common
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8050, show_default=True, type=Integer(0, 65535),
              help="Port, 0 to 65535 (0: any free port).")
@click.option("--optuna-dashboard/--no-optuna-dashboard", "with_optuna", default=True, show_default=True,
              help="Also serve optuna-dashboard (read-only) on the next free port, linked from each study page.")
@click.option("--warm/--no-warm", default=True, show_default=True,
              help="Run every page's simulations in the background at start-up, so pages open instantly.")
@one_line_errors
def dashboard(storage: str | None, problems_dir: Path, seeds: int, jobs: int | None, host: str, port: int,
              with_optuna: bool, warm: bool) -> None:
    """Serve the config table, goodput-vs-load, timelines and study pages (read-only, offline)."""
    from ..dashboard import Dashboard
    from ..dashboard.server import make_server

    board = Dashboard(_storage(storage), problems_dir, sweep_seeds=seeds, jobs=jobs or os.cpu_count() or 1)
    with ExitStack() as stack:
        stack.callback(board.close)
        stack.enter_context(_stopped_by_signals())
        try:
            server = make_server(board, host, port)
        except OSError as exc:
            raise TunerError(_listen_error(exc, host, port)) from None
        stack.callback(server.server_close)
        if with_optuna:
            _serve_optuna_dashboard(board, host, server.server_address[1], stack)
        click.echo(f"tuner dashboard on http://{host}:{server.server_address[1]}/ ({board.storage}, read-only)"
                   + (f"; optuna-dashboard on {board.optuna_dashboard_url}/dashboard" if with_optuna else "")
                   + "; Ctrl-C stops")
        if warm:
            threading.Thread(target=_warm, args=(board,), daemon=True, name="warm").start()
        server.serve_forever()  # until Ctrl-C (or SIGTERM, SIGHUP): closed here, "interrupted" and 130 in main


def _listen_error(exc: OSError, host: str, port: int) -> str:
    """Why the server cannot listen, naming the option to change: a port in use or
    reserved, or a host that is no address of this machine."""
    import errno
    import socket

    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        return f"--port {port}: address already in use; pick another or use --port 0 (any free port)"
    if exc.errno == errno.EACCES:
        return f"--port {port}: {reason} (ports below 1024 need root); pick another or use --port 0 (any free port)"
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine ({reason}); 127.0.0.1 is loopback"
    return f"cannot listen on --host {host} --port {port}: {reason}"


def _serve_optuna_dashboard(board, host: str, port: int, stack: ExitStack) -> None:
    """optuna-dashboard on the port after ours, or any free one when that is taken."""
    from ..dashboard.server import make_optuna_dashboard_server, serve_in_background

    try:
        extra = make_optuna_dashboard_server(board.storage, host, port + 1 if port < 65535 else 0)
    except OSError:
        extra = make_optuna_dashboard_server(board.storage, host, 0)
    stack.callback(extra.server_close)
    serve_in_background(extra)
    stack.callback(extra.shutdown)
    board.optuna_dashboard_url = f"http://{host}:{extra.server_address[1]}"


def _warm(board) -> None:
    try:
        board.warm()
    except BaseException as exc:  # noqa: BLE001 - a page shows the same error when opened
        if not board.closed:
            click.echo(f"tuner dashboard: precomputing stopped: {exc}", err=True)


@main.command()
@_common
@click.option("--html", "out", type=OutputFile(), help="Write one self-contained HTML file.")
@click.option("--into-studies", is_flag=True,
              help="Save the goodput-vs-load, timeline and attribution figures and a Markdown summary into each "
                   "Optuna study (optuna-dashboard shows them). Writes to the database named by --storage.")
@click.option("--problem", "only", multiple=True, help="Only plot these problems (repeatable; the table keeps all).")
@click.option("--force", is_flag=True,
              help="Replace an existing file this command did not write (a file it wrote is replaced without it).")
@quiet_option
@one_line_errors
def report(storage: str | None, problems_dir: Path, seeds: int, jobs: int | None, out: Path | None,
           into_studies: bool, only: tuple[str, ...], force: bool, quiet: bool) -> None:
    """Write the dashboard's pages as one HTML file (plotly.js inline, works offline), and/or
    save its figures and a summary into each Optuna study for optuna-dashboard."""
    if out is not None:
        from ..outputs import HTML_REPORT_MARK, refuse_foreign

        refuse_foreign(out, HTML_REPORT_MARK, force)
    from ..dashboard import Dashboard, write_report
    from ..dashboard.standalone import sections

    if out is None and not into_studies:
        raise click.UsageError("say what to write: --html OUT and/or --into-studies")
    if into_studies and storage is None:
        raise click.UsageError("--into-studies writes to the database: name it with --storage URL")
    board = Dashboard(_storage(storage), problems_dir, sweep_seeds=seeds, jobs=jobs or os.cpu_count() or 1)
    problems = {row.problem for row in board.rows()}
    unknown = sorted(set(only) - problems)
    if unknown:
        board.close()
        raise TunerError(f"{board.storage}: --problem {', '.join(unknown)}: not in the table "
                         f"(it has {', '.join(sorted(problems)) or 'no problem'})")
    try:
        with _stopped_by_signals():
            if out is not None:
                with _progress("html", quiet, total=len(sections(board, list(only) or None))) as step:
                    path = write_report(board, out, list(only) or None, progress=step)
                click.echo(f"report written to {path}")
            if into_studies:
                with _progress("studies", quiet) as step:
                    written = _saved_into_studies(board, list(only) or None, step)
                click.echo(f"figures and a note saved into {len(written)} studies; open them with "
                           f"optuna-dashboard {board.storage}")
    finally:
        board.close()


def _saved_into_studies(board, only: list[str] | None, step) -> list[str]:
    """:func:`tuner.dashboard.save_into_studies`, a database that refuses the write (a
    read-only file) one line: Optuna's error has a 100-line chain of causes."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from ..dashboard import save_into_studies

    try:
        return save_into_studies(board, only, progress=step)
    except (SQLAlchemyError, optuna.exceptions.OptunaError) as exc:
        raise TunerError(database_error(f"{board.storage}: --into-studies cannot write into the studies", exc)) \
            from None


@contextmanager
def _stopped_by_signals():
    """SIGTERM and SIGHUP (``kill PID``, a closed terminal) stop the command as Ctrl-C does,
    so its ``finally`` blocks shut the worker processes down instead of leaving them
    running; the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def _progress(stage: str, quiet: bool, total: int | None = None):
    """A ``progress(part)`` callback, called as each part starts, counting the parts done
    (shown as :class:`~tuner.cli.progress.Progress` does): parts run simulations, so a
    report takes minutes."""
    with TerminalProgress("tuner report", "parts", quiet, transient=True) as shown:
        shown.start(stage, total=total)
        done = itertools.count()
        yield lambda part: shown.update(next(done), total, detail=part)
