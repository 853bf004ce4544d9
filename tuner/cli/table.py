"""``tuner table show`` and ``tuner table export``: read the config table a tune wrote."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import TunerError
from . import main, one_line_errors, storage_option


@main.group()
def table() -> None:
    """Show or export the config table."""


def _rows(storage: str, problem: str | None, *, one_problem: bool):
    from ..store import Store

    with Store(storage) as store:
        problems = store.problems()
        if problem is not None and problem not in problems:
            raise TunerError(f"{store.url}: no rows for problem {problem!r} "
                             f"(problems: {', '.join(problems) or 'none yet'})")
        if one_problem and problem is None:
            if len(problems) > 1:
                raise TunerError(f"{store.url}: the table holds several problems ({', '.join(problems)}); "
                                 "choose one with --problem")
            if not problems:
                raise TunerError(f"{store.url}: the table is empty (run `tuner tune --storage {store.url}`)")
            problem = problems[0]
        return problem, store.rows(problem)


@table.command()
@storage_option()
@click.option("--problem", default=None, help="Only this problem's rows (its name in the problem file).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of row objects.")
@one_line_errors
def show(storage: str, problem: str | None, as_json: bool) -> None:
    """Print the config table: one row per (problem, regime, operator)."""
    _, rows = _rows(storage, problem, one_problem=False)
    if as_json:
        click.echo(json.dumps([row.to_dict() for row in rows], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 200)
    view = Table(title=f"config table in {storage} (goodput simulated, req/s)", title_justify="left")
    for column in ("problem", "regime", "op", "config", "params", "goodput", "isolated-fastest", "oracle",
                   "source", "device", "study:trial"):
        view.add_column(column)
    for row in rows:
        params = ", ".join(f"{k}={v}" for k, v in row.params.items())
        goodput = f"{row.goodput_rps:.2f}" + ("" if row.goodput_ci_rps is None else f" ± {row.goodput_ci_rps:.2f}")
        oracle = "—" if row.oracle_goodput_rps is None else f"{row.oracle_goodput_rps:.2f}"
        view.add_row(row.problem, row.regime, row.op, row.config, params, goodput,
                     f"{row.baseline_goodput_rps:.2f}", oracle, row.source, row.device,
                     f"{row.study_name}:{row.trial_number}")
    console.print(view)


@table.command()
@click.option("--format", "fmt", type=click.Choice(["json", "vllm"]), required=True,
              help="json: one project file the runtime loads; vllm: one file per (regime, op) in OUT/.")
@click.argument("out", type=click.Path(path_type=Path))
@storage_option()
@click.option("--problem", default=None, help="The problem to export (needed when the table holds several).")
@one_line_errors
def export(fmt: str, out: Path, storage: str, problem: str | None) -> None:
    """Export one problem's config table to OUT (a file for json, a directory for vllm)."""
    from ..store.export import export_json, export_vllm

    chosen, rows = _rows(storage, problem, one_problem=True)
    if fmt == "json":
        if out.is_dir():
            raise TunerError(f"{out}: is a directory; --format json writes one file")
        export_json(chosen, rows, out)
        click.echo(f"{len(rows)} rows of {chosen} written to {out}")
        return
    files, notes = export_vllm(rows, out)
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(f"{len(files)} files written to {out}/")
