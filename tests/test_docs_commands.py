"""Every ``tuner`` command line the docs show names options the command has (issue 38,
item 10: problem-files.md told users to run ``tuner profile --measure``, which never
existed; it is ``--device cuda``)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from tuner.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A code span or a shell line that runs tuner (``$ `` and ``.venv/bin/`` allowed before it).
COMMAND = re.compile(r"`(tuner [^`]+)`|^\s*(?:\$ )?(?:\.venv/bin/)?(tuner [^\n#]+)", re.M)


def _unknown_options(text: str) -> list[tuple[str, str]]:
    """``(command, option)`` for each ``--option`` a shown command line gives that the
    command does not take (prose inside a line, ``but --fresh``, is skipped)."""
    found = []
    for match in COMMAND.finditer(text):
        tokens = (match.group(1) or match.group(2)).split()[1:]
        command, names = main, []
        while tokens and isinstance(command, click.Group) and tokens[0] in command.commands:
            command = command.commands[tokens.pop(0)]
            names.append(command.name)
        if command is main:
            continue
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for before, token in zip(["", *tokens], tokens):
            option = re.match(r"^\[?(--[a-z][a-z0-9-]*)", token)
            if option and option.group(1) not in known and before != "but":
                found.append((" ".join(names), option.group(1)))
    return found


def test_every_shown_command_line_names_options_that_exist() -> None:
    unknown = {str(path.relative_to(ROOT)): _unknown_options(path.read_text()) for path in DOCS}
    assert {path: found for path, found in unknown.items() if found} == {}


def test_the_check_finds_the_option_that_never_existed() -> None:
    assert _unknown_options("measured after `tuner profile --measure` on a GPU") == [("profile", "--measure")]
    assert _unknown_options("`tuner profile --device cuda`") == []
