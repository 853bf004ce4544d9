"""``tuner dashboard`` (serve the results on loopback) and ``tuner report --html`` (one file)."""

from __future__ import annotations

from pathlib import Path

import click

from . import main, one_line_errors

STORAGE_HELP = ("SQLAlchemy URL of the tuner database, opened read-only "
                "(default: sqlite:///results.db if it exists, else sqlite:///results.db.example).")


def _storage(storage: str | None) -> str:
    from ..dashboard.render import default_storage

    return storage or default_storage()


@main.command()
@click.option("--storage", envvar="TUNER_STORAGE", default=None, help=STORAGE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8050, show_default=True, type=int, help="Port (0: any free port).")
@click.option("--problems", "problems_dir", default="search_spaces", show_default=True,
              type=click.Path(path_type=Path), help="Directory of problem files <problem>.yaml, for the simulated plots.")
@one_line_errors
def dashboard(storage: str | None, host: str, port: int, problems_dir: Path) -> None:
    """Serve the config table, goodput-vs-load and M(t)/R(t) pages (read-only, offline)."""
    from ..dashboard import Dashboard
    from ..dashboard.server import make_server

    board = Dashboard(_storage(storage), problems_dir)
    server = make_server(board, host, port)
    click.echo(f"tuner dashboard on http://{host}:{server.server_address[1]}/ ({board.storage}); Ctrl-C stops")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@main.command()
@click.option("--html", "out", required=True, type=click.Path(path_type=Path), help="Write one self-contained HTML file.")
@click.option("--storage", envvar="TUNER_STORAGE", default=None, help=STORAGE_HELP)
@click.option("--problems", "problems_dir", default="search_spaces", show_default=True,
              type=click.Path(path_type=Path), help="Directory of problem files <problem>.yaml, for the simulated plots.")
@click.option("--problem", "only", multiple=True, help="Only plot these problems (repeatable; the table keeps all).")
@one_line_errors
def report(out: Path, storage: str | None, problems_dir: Path, only: tuple[str, ...]) -> None:
    """Write the dashboard's pages as one HTML file (plotly.js inline, works offline)."""
    from ..dashboard import write_report

    path = write_report(_storage(storage), out, problems_dir, list(only) or None)
    click.echo(f"report written to {path}")
