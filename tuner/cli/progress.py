"""Progress of a long command on stderr: a bar on a terminal, else a line every few seconds.

A command that runs for minutes and prints nothing looks hung in a log or CI, where
stderr is no terminal and a bar would only write escape codes; so there it prints a
plain line at most every :attr:`TerminalProgress.INTERVAL_S` seconds (done/total, a detail such
as the best value so far, an ETA from this run's pace), and nothing with ``-q``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

import click


def quiet_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``-q/--quiet``, the same switch for every command that shows progress."""
    return click.option("-q", "--quiet", is_flag=True,
                        help="No progress (a bar on a terminal, else a line every few seconds on stderr).")(command)


def duration(seconds: float) -> str:
    """``1m20s``: short enough for a progress line."""
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class TerminalProgress:
    """Counted steps of one command, shown as :mod:`tuner.cli.progress` describes.

    ``start`` opens a stage (a regime, the compiles, the report's parts), ``update``
    counts steps in it, ``note`` names what it does after the counted steps. On a
    terminal each stage is a bar; elsewhere a line ``COMMAND: STAGE: 12/30 UNIT, DETAIL,
    ETA 1m20s`` on stderr, throttled, so a short command prints none.
    """

    #: Seconds between progress lines when stderr is not a terminal.
    INTERVAL_S: ClassVar[float] = 5.0

    def __init__(self, command: str, unit: str, quiet: bool = False, transient: bool = False) -> None:
        terminal = sys.stderr.isatty()
        self.command, self.unit, self.transient = command, unit, transient
        self._bar = terminal and not quiet
        self._lines = not terminal and not quiet
        self._rich: Any = None
        self._task: Any = None
        self._stage = ""
        self._done = self._first = 0
        self._total: int | None = None
        self._started = self._last = 0.0

    def __enter__(self) -> TerminalProgress:
        self._last = time.monotonic()
        if self._bar:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bars

            self._rich = Bars(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
                TextColumn("{task.fields[detail]}"), TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=self.transient,
            )
            self._rich.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)

    def start(self, stage: str, done: int = 0, total: int | None = None, detail: str = "",
              unit: str | None = None) -> None:
        """A new stage with ``done`` of ``total`` steps already behind it (a resumed study),
        counted in ``unit`` (default: the command's)."""
        self._stage, self._done, self._first, self._total = stage, done, done, total
        self.unit = unit or self.unit
        self._started = time.monotonic()
        if self._rich is not None:
            self._task = self._rich.add_task(stage, total=total, completed=done, detail=detail, unit=self.unit)

    def update(self, done: int, total: int | None = None, detail: str = "") -> None:
        """``done`` steps of the stage behind; ``total`` when it changed. The ETA's pace
        counts from the update that first gave a total (steps before it, such as configs
        found in a cache, took no time)."""
        self._done = done
        if total is not None:
            if self._total is None:
                self._first, self._started = done, time.monotonic()
            self._total = total
        if self._task is not None:
            self._rich.update(self._task, completed=done, total=self._total, detail=detail)
        self._line(self._counted(detail))

    def note(self, text: str) -> None:
        """What the stage does now that its counted steps are done."""
        if self._task is not None:
            self._rich.update(self._task, description=f"{self._stage}: {text}")
        self._line(text)

    def finish(self) -> None:
        """Close the stage's bar at what was done (a stage may end short of its total)."""
        if self._task is not None:
            self._rich.update(self._task, total=self._rich.tasks[self._task].completed)

    def say(self, text: str) -> None:
        """One line on stderr now, above the bar if one is drawn (nothing when quiet)."""
        if self._rich is not None:
            self._rich.console.print(f"{self.command}: {text}", markup=False, highlight=False)
        elif self._lines:
            click.echo(f"{self.command}: {text}", err=True)

    def counted(self) -> str:
        """The stage's count and ETA as its progress line gives them (``12/90 simulations, ETA 0m20s``)."""
        return self._counted("")

    def _counted(self, detail: str) -> str:
        """``12/30 trials, best 8.65/s, ETA 1m20s`` (the ETA from this run's pace; ``12 parts``
        and no ETA while the total is unknown)."""
        text = f"{self._done}{'' if self._total is None else f'/{self._total}'} {self.unit}"
        if detail:
            text += f", {detail}"
        ran = self._done - self._first
        if 0 < ran and self._total is not None and self._done < self._total:
            text += f", ETA {duration((time.monotonic() - self._started) / ran * (self._total - self._done))}"
        return text

    def _line(self, text: str) -> None:
        """One progress line on stderr, at most every INTERVAL_S seconds."""
        now = time.monotonic()
        if self._lines and now - self._last >= self.INTERVAL_S:
            self._last = now
            click.echo(f"{self.command}: {self._stage + ': ' if self._stage else ''}{text}", err=True)
