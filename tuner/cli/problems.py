"""``tuner problems``: the problems bundled with the package, by the names commands accept."""

from __future__ import annotations

import json
import textwrap

import click

from .group import main, one_line_errors


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, path, regimes, description}.")
@one_line_errors
def problems(as_json: bool) -> None:
    """List the bundled problems: every command taking PROBLEM accepts these names.

    They ship inside the package with their traces, so `tuner tune llm_decode` works from
    any directory; copy one (its path is listed) to start a problem of your own.
    """
    from .. import bundled
    from ..problem.document import read_document

    entries = []
    for name in bundled.problem_names():
        path = bundled.problem_file(name)
        _, document = read_document(path)
        regimes = document.get("regimes")
        entries.append({"name": name, "path": str(path),
                        "regimes": list(regimes) if isinstance(regimes, dict) else [],
                        "description": " ".join(str(document.get("description", "")).split())})
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    width = max(len(entry["name"]) for entry in entries) + 2
    for entry in entries:
        default = " (default)" if entry["name"] == bundled.DEFAULT_PROBLEM_NAME else ""
        click.echo(f"{entry['name']:<{width}}regimes: {', '.join(entry['regimes'])}{default}")
        summary = entry["description"].split(". ")[0].rstrip(".")
        for line in textwrap.wrap(summary + ".", 88 - width):
            click.echo(" " * width + line)
    click.echo(f"\n{len(entries)} problems in {bundled.PROBLEMS_DIR}")
