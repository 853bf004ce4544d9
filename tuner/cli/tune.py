"""``tuner tune``: search each regime's joint assignment and write the config table."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ..errors import TunerError
from .group import DEFAULT_PROBLEM, database_error, fail, main, one_line_errors, storage_option, warn
from .params import COUNT, SECONDS, SEED, SEEDS
from .progress import TerminalProgress, duration, quiet_option


def tune_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``tuner tune`` and ``tuner worker`` share (a worker joins a tune)."""
    options = [
        click.argument("problem", required=False, type=click.Path(path_type=Path)),
        storage_option(writes=True),
        click.option("--trials", default=30, show_default=True, type=COUNT,
                     help="Finished trials per regime's study (a rerun continues to this number)."),
        click.option("--seeds", default=3, show_default=True, type=SEEDS, help="Traffic samples per assignment (K)."),
        click.option("--regimes", default=None, metavar="A,B", help="Regimes to tune, comma-separated (default: all)."),
        click.option("--oracle", is_flag=True, help="Also evaluate every joint assignment (when the space is small)."),
        click.option("--oracle-limit", default=512, show_default=True, type=COUNT,
                     help="Largest joint space --oracle evaluates exhaustively."),
        click.option("--horizon", type=SECONDS, default=None,
                     help="Seconds of traffic per simulation (default: the regime's)."),
        click.option("--seed", default=0, show_default=True, type=SEED,
                     help="First workload seed; also seeds the sampler."),
        click.option("--jobs", "-j", default=1, show_default=True, type=COUNT,
                     help="Worker processes on this machine (each runs trials; see the README on fleets)."),
        click.option("--sim-jobs", default=None, type=COUNT,
                     help="Processes simulating each evaluation's seeds side by side, each worker included "
                          "(default: its share of the usable cores plus one, at most --seeds; 1: the worker "
                          "alone). Unlike --jobs, the table is the same for any number."),
        click.option("--force", "force_jobs", is_flag=True,
                     help="Allow --jobs and --sim-jobs beyond this machine's usable cores."),
        click.option("--heartbeat", default=5, show_default=True, type=COUNT, metavar="SECONDS",
                     help="Seconds between a running trial's heartbeats; a trial silent for 4x this is "
                          "marked failed and retried."),
        quiet_option,
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


def _check_processes(jobs: int, sim_jobs: int | None, force: bool) -> None:
    """Refuse more processes than the machine's usable cores unless told: each is a
    Python interpreter with the problem loaded (tens to hundreds of MB), and beyond the
    cores they only take turns (the fuzz round's `--jobs 40` started 41 processes and
    1.6 GB in 12 s on 2 cores)."""
    from ..search.parallel import usable_cores

    cores = usable_cores()
    for name, count in (("--jobs", jobs), ("--sim-jobs", sim_jobs)):
        if count is not None and count > cores and not force:
            raise TunerError(f"{name} {count}: this machine has {cores} usable cores; more processes only take "
                             "turns (pass --force to start them anyway)")


def _tune(problem: Path | None, storage: str, *, fresh: bool, salt: str, trials: int, seeds: int,
          regimes: str | None, oracle: bool, oracle_limit: int, horizon: float | None, seed: int, jobs: int,
          sim_jobs: int | None, force_jobs: bool, heartbeat: int, quiet: bool) -> None:
    _check_processes(jobs, sim_jobs, force_jobs)
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    from ..collect.fill import compile_ahead
    from ..search import TuneSettings, tune_problem
    from ..interrupts import exit_interrupted
    from ..processes import quiet_logs
    from ..search.leases import Worker
    from ..search.parallel import default_processes, load_for_tuning
    from ..profile.user_cache import remember_tune
    from ..search.summary import print_outcomes
    from ..store.store import parse_url, shown

    loaded = load_for_tuning(problem or DEFAULT_PROBLEM, storage)
    warn(loaded.warnings)
    where = shown(parse_url(storage))  # the password hidden
    chosen = _regimes(regimes)
    settings = TuneSettings(trials=trials, seeds=seeds, base_seed=seed, horizon_s=horizon, oracle=oracle,
                            oracle_limit=oracle_limit)
    quiet_logs()
    try:
        with TrialProgress(quiet, chosen or list(loaded.regimes)) as progress:
            processes = sim_jobs or default_processes(seeds, jobs)
            compile_ahead(loaded, lambda missing, each: progress.compiling(missing, each, where, processes),
                          progress.compiled, workers=processes)
            outcomes = tune_problem(loaded, storage, settings, chosen, fresh=fresh, progress=progress, jobs=jobs,
                                    sim_jobs=processes,
                                    worker=Worker.here(salt, heartbeat_s=heartbeat),
                                    warn=lambda message: warn([message]))
    except KeyboardInterrupt:
        click.echo(f"tuner: interrupted; the studies and table in {where} are as they were (--fresh swaps in "
                   "its studies only once it has succeeded)" if fresh
                   else f"tuner: interrupted; finished trials are kept in {where}; rerun the same command to resume",
                   err=True)
        exit_interrupted()
    except TunerError:
        raise
    except (SQLAlchemyError, optuna.exceptions.OptunaError) as exc:
        fail(database_error(where, exc))
    print_outcomes(loaded, outcomes, where)
    if not quiet:
        click.echo(progress.summary(), err=True)
    remember_tune(storage)  # so that `table show`, `dashboard`… here find it without --storage
    written = {outcome.regime for outcome in outcomes}
    for name in chosen or loaded.regimes:
        if name not in written:
            click.echo(f"regime {name}: rows already written from its study with these settings (by another "
                       f"worker or an earlier run); `tuner table show --storage {where}` lists them")


def _regimes(text: str | None) -> list[str] | None:
    """``--regimes A,B`` as names, each once (``light,light`` tunes and counts light once);
    None when not given. A value naming nothing (``,``, a blank) is refused: it used to
    mean every regime, the opposite of what was typed."""
    if text is None:
        return None
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise TunerError(f"--regimes {text!r} names no regime; leave it out to tune every regime")
    return names


class TrialProgress:
    """Implements :class:`tuner.search.StudyProgress` for the whole run: per regime (``k/n``)
    its trials done/total with the best goodput so far, then its baselines and capacity
    searches as counted simulations, each with an ETA from its own pace, and at the end the
    run's time split between them (a tune's ETA used to cover the trials only, and say
    8 s when a minute of capacity searches followed)."""

    PHASES = ("preparing", "compiling", "trials", "baselines and capacities")

    def __init__(self, quiet: bool = False, regimes: Sequence[str] = ()) -> None:
        self._shown = TerminalProgress("tuner tune", "trials", quiet)
        self._regimes = list(regimes)
        self._regime = ""
        self._simulated = 0
        self._phase, self._since, self._started = "preparing", time.monotonic(), time.monotonic()
        self._spent = dict.fromkeys(self.PHASES, 0.0)

    def __enter__(self) -> TrialProgress:
        self._shown.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._switch(self._phase)
        self._shown.__exit__(*exc)

    def compiling(self, missing: int, seconds_each: float | None, storage: str, processes: int) -> None:
        """Say, before the first compile, how many launches no compile cache holds and how
        long compiling them should take; count them from here."""
        self._switch("compiling")
        each = "" if seconds_each is None else (
            f": about {duration(missing * seconds_each / processes)} ({seconds_each:.2g} s each on average in the "
            f"cache, {processes} process{'es' if processes > 1 else ''})")
        self._shown.say(f"preparing: {missing} kernel launch{'es' if missing > 1 else ''} of this problem's configs "
                        f"are in no compile cache ({storage}'s, your cache directory's, results.db.example's); "
                        f"compiling them now, once{each}")
        self._shown.start("compiling", 0, missing, unit="kernels")

    def compiled(self, done: int, total: int) -> None:
        self._shown.update(done, total)

    def start(self, regime: str, done: int, total: int) -> None:
        self._switch("trials")
        place = f" ({self._regimes.index(regime) + 1}/{len(self._regimes)})" if regime in self._regimes else ""
        self._regime = f"regime {regime}{place}"
        self._shown.start(self._regime, done, total, detail="best —", unit="trials")

    def update(self, done: int, best: float | None) -> None:
        self._shown.update(done, detail=f"best {'—' if best is None else f'{best:.2f}/s'}")

    def finish(self) -> None:
        self._shown.finish()

    def after_trials(self, simulations: int) -> None:
        self._switch("baselines and capacities")
        self._simulated = 0
        self._shown.start(f"{self._regime}: baselines and capacities", 0, max(simulations, 1), unit="simulations")

    def simulated(self, count: int) -> None:
        self._simulated += count
        self._shown.update(self._simulated)

    def note(self, text: str) -> None:
        if self._phase == "baselines and capacities":  # with the count and ETA the note would hide
            text = f"{text}; {self._shown.counted()}"
        self._shown.note(text)

    def summary(self) -> str:
        """``tuner tune: 1m05s in all: preparing 0m03s, trials 0m40s, baselines and capacities 0m22s``."""
        self._switch(self._phase)
        return (f"tuner tune: {duration(time.monotonic() - self._started)} in all: "
                + ", ".join(f"{phase} {duration(seconds)}" for phase, seconds in self._spent.items()
                            if seconds or phase != "compiling"))

    def _switch(self, phase: str) -> None:
        """Count the time since the last switch to the phase it was in; ``phase`` from now."""
        now = time.monotonic()
        self._spent[self._phase] += now - self._since
        self._phase, self._since = phase, now
