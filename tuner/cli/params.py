"""The types of the commands' options: each refuses a bad value with the cause in words
and the value capped (:func:`tuner.errors.shown_value`), so that the ``tuner`` group can
print it as one line naming the option (:mod:`tuner.cli.usage`).

Click's own types say "'abc' is not a valid float." and echo the whole value; the
bounds here are checked as the value is parsed, before any work, so a command never
gets far enough to fail on them with a library's name for the setting.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from ..errors import shown_value


class Integer(click.ParamType):
    """An integer, optionally bounded: ``'x' is not an integer``, ``'0' is below the minimum 1
    (why)``, ``'9' is above the maximum 8 (why_maximum)``."""

    name = "integer"

    def __init__(self, minimum: int | None = None, maximum: int | None = None, why: str = "",
                 why_maximum: str = "") -> None:
        self.minimum, self.maximum, self.why, self.why_maximum = minimum, maximum, why, why_maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                self.fail(f"{shown_value(value)} is not an integer", param, ctx)
        if self.minimum is not None and number < self.minimum:
            self.fail(f"{shown_value(value)} is below the minimum {self.minimum}{_because(self.why)}", param, ctx)
        if self.maximum is not None and number > self.maximum:
            self.fail(f"{shown_value(value)} is above the maximum {self.maximum}{_because(self.why_maximum)}",
                      param, ctx)
        return number


def _because(why: str) -> str:
    return f" ({why})" if why else ""


class Number(click.ParamType):
    """A number; with ``positive`` (a unit: ``seconds``), a finite one above 0."""

    name = "number"

    def __init__(self, positive: str = "") -> None:
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{shown_value(value)} is not a number", param, ctx)
        if self.positive and not (math.isfinite(number) and number > 0):
            self.fail(f"{shown_value(value)} is not a finite number of {self.positive} above 0", param, ctx)
        return number


class Choice(click.Choice):
    """One of a few words: ``'xml' is not one of json, vllm`` (click echoes the value whole)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{shown_value(value)} is not one of {', '.join(map(str, self.choices))}", param, ctx)


class OutputFile(click.Path):
    """A file to write (a :class:`~pathlib.Path`): a directory, a special file or a SQLite
    database is refused before any work (:func:`tuner.outputs.output_problem`); a link to
    a regular file is written through."""

    def __init__(self, stdout: str | None = None) -> None:
        """``stdout``: why this output cannot go to standard output, when it cannot; else
        ``-`` names standard output (written through, never renamed over)."""
        super().__init__(dir_okay=False, path_type=Path)
        self.stdout_refused = stdout

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        from ..outputs import STDOUT, output_problem, output_target

        if str(value) == "-":
            if self.stdout_refused:
                self.fail(f"'-': {self.stdout_refused}; name a file", param, ctx)
            return STDOUT
        path = Path(value)
        problem = output_problem(path)
        if problem is not None:
            self.fail(f"{shown_value(value)} {problem}", param, ctx)
        return output_target(path)


#: ``--seed``: numpy seeds workloads from non-negative integers, so every command takes the same.
SEED = Integer(minimum=0, why="workload seeds are numbered from 0")
#: ``--horizon``: a measurement window.
SECONDS = Number(positive="seconds")
#: A count of at least one (trials, processes).
COUNT = Integer(minimum=1)
#: The most workload seeds a command simulates: each is one more simulation of the whole
#: window (a capacity search: dozens), and 2**31 of them is a typo, not a request.
MAX_SEEDS = 1000
#: ``--seeds``: paired workload samples.
SEEDS = Integer(minimum=1, maximum=MAX_SEEDS, why_maximum="each seed is one more simulation of every assignment")
