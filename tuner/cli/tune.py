"""``tuner tune``: search each regime's joint assignment and write the config table."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import TunerError
from . import DEFAULT_PROBLEM, fail, main, one_line_errors, storage_option, warn

def default_problem() -> Path:
    """``search_spaces/llm_decode.yaml`` when it exists, else the seed example."""
    llm = DEFAULT_PROBLEM.parent / "llm_decode.yaml"
    return llm if llm.exists() else DEFAULT_PROBLEM


def tune_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``tuner tune`` and ``tuner worker`` share (a worker joins a tune)."""
    options = [
        click.argument("problem", required=False, type=click.Path(path_type=Path)),
        storage_option(),
        click.option("--trials", default=30, show_default=True, type=int,
                     help="Finished trials per regime's study (a rerun continues to this number)."),
        click.option("--seeds", default=3, show_default=True, type=int, help="Traffic samples per assignment (K)."),
        click.option("--regimes", default=None, metavar="A,B", help="Regimes to tune, comma-separated (default: all)."),
        click.option("--oracle", is_flag=True, help="Also evaluate every joint assignment (when the space is small)."),
        click.option("--oracle-limit", default=512, show_default=True, type=int,
                     help="Largest joint space --oracle evaluates exhaustively."),
        click.option("--horizon", type=float, default=None,
                     help="Seconds of traffic per simulation (default: the regime's)."),
        click.option("--seed", default=0, show_default=True, type=int,
                     help="First workload seed; also seeds the sampler."),
        click.option("--jobs", "-j", default=1, show_default=True, type=int,
                     help="Worker processes on this machine (each runs trials; see the README on fleets)."),
        click.option("--heartbeat", default=5, show_default=True, type=int, metavar="SECONDS",
                     help="Seconds between a running trial's heartbeats; a trial silent for 4x this is "
                          "marked failed and retried."),
        click.option("-q", "--quiet", is_flag=True,
                     help="No progress (a bar on a terminal, else a line every few seconds on stderr)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@main.command()
@tune_options
@click.option("--fresh", is_flag=True, help="Delete the chosen regimes' studies first and start over.")
@one_line_errors
def tune(problem: Path | None, storage: str, fresh: bool, **options: Any) -> None:
    """Tune each regime's joint assignment by goodput and write the config table.

    One Optuna study per regime (named tuner:PROBLEM:REGIME) in the storage; a rerun
    resumes it. The table's rows for a regime are replaced when the regime is done.
    Several processes (--jobs) or machines (`tuner worker`) may share the storage.
    """
    _tune(problem, storage, fresh=fresh, salt="", **options)


@main.command()
@tune_options
@one_line_errors
def worker(problem: Path | None, storage: str, **options: Any) -> None:
    """Join the problem's studies in the storage and run trials until each holds its budget.

    Start one per machine (or several, or with --jobs) against the same database URL,
    with the same options; whichever worker completes a regime writes its rows, once.
    Watch with `tuner table show` or `tuner dashboard`.
    """
    _tune(problem, storage, fresh=False, salt=f":{os.getpid()}", **options)


def _tune(problem: Path | None, storage: str, *, fresh: bool, salt: str, trials: int, seeds: int,
          regimes: str | None, oracle: bool, oracle_limit: int, horizon: float | None, seed: int, jobs: int,
          heartbeat: int, quiet: bool) -> None:
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from ..search import TuneSettings, tune_problem
    from ..search.fleet import Worker, exit_interrupted, load_for_tuning, quiet_logs
    from ..search.report import print_outcomes
    from ..store.store import parse_url, shown

    loaded = load_for_tuning(problem or default_problem(), storage)
    warn(loaded.warnings)
    where = shown(parse_url(storage))  # the password hidden
    chosen = [name.strip() for name in regimes.split(",") if name.strip()] if regimes else None
    settings = TuneSettings(trials=trials, seeds=seeds, base_seed=seed, horizon_s=horizon, oracle=oracle,
                            oracle_limit=oracle_limit)
    quiet_logs()
    try:
        with TrialProgress(quiet) as progress:
            outcomes = tune_problem(loaded, storage, settings, chosen, fresh=fresh, progress=progress, jobs=jobs,
                                    worker=Worker.here(salt, heartbeat_s=heartbeat),
                                    warn=lambda message: warn([message]))
    except KeyboardInterrupt:
        click.echo(f"tuner: interrupted; finished trials are kept in {where}; rerun the same command to resume",
                   err=True)
        exit_interrupted()
    except TunerError:
        raise
    except (SQLAlchemyError, optuna.exceptions.OptunaError) as exc:
        text = str(exc).strip().splitlines()
        fail(f"{where}: {text[0] if text else type(exc).__name__}")
    print_outcomes(loaded, outcomes, where)
    written = {outcome.regime for outcome in outcomes}
    for name in chosen or loaded.regimes:
        if name not in written:
            click.echo(f"regime {name}: rows already written from its study with these settings (by another "
                       f"worker or an earlier run); `tuner table show --storage {where}` lists them")


class TrialProgress:
    """Implements :class:`tuner.search.Progress`: trials done/total, best goodput, ETA.

    On a terminal, a bar per regime; elsewhere (a log, CI) a line on stderr at most every
    :attr:`INTERVAL_S` seconds, so a long run never looks hung; nothing with ``quiet``.
    """

    #: Seconds between progress lines when stderr is not a terminal.
    INTERVAL_S = 5.0

    def __init__(self, quiet: bool = False) -> None:
        self._progress = None
        self._task = None
        terminal = sys.stderr.isatty()
        self._bar = terminal and not quiet
        self._lines = not terminal and not quiet
        self._regime = ""
        self._done = self._total = self._first = 0
        self._best: float | None = None
        self._started = self._last = 0.0

    def __enter__(self) -> TrialProgress:
        self._last = time.monotonic()
        if self._bar:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("trials"),
                TextColumn("best {task.fields[best]}"), TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def start(self, regime: str, done: int, total: int) -> None:
        self._regime, self._done, self._total, self._first, self._best = regime, done, total, done, None
        self._started = time.monotonic()
        if self._progress is not None:
            self._task = self._progress.add_task(f"regime {regime}", total=total, completed=done, best="—")

    def update(self, done: int, best: float | None) -> None:
        self._done, self._best = done, best
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, best="—" if best is None else f"{best:.2f}/s")
        self._line(self._trials())

    def finish(self) -> None:
        if self._progress is not None and self._task is not None:
            task = self._progress.tasks[self._task]
            self._progress.update(self._task, total=task.completed)

    def note(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            task = self._progress.tasks[self._task]
            self._progress.update(self._task, description=f"{task.description.split(':')[0]}: {text}")
        self._line(text)

    def _trials(self) -> str:
        """``12/30 trials, best 8.65/s, ETA 1m20s`` (the ETA from this run's pace)."""
        best = "—" if self._best is None else f"{self._best:.2f}/s"
        text = f"{self._done}/{self._total} trials, best {best}"
        ran = self._done - self._first
        if 0 < ran and self._done < self._total:
            left = (time.monotonic() - self._started) / ran * (self._total - self._done)
            text += f", ETA {int(left // 60)}m{int(left % 60):02d}s"
        return text

    def _line(self, text: str) -> None:
        """One progress line on stderr, at most every INTERVAL_S seconds."""
        now = time.monotonic()
        if self._lines and now - self._last >= self.INTERVAL_S:
            self._last = now
            click.echo(f"tuner tune: regime {self._regime}: {text}", err=True)
