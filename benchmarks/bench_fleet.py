"""Trials per second with 1 and 2 workers (``tuner tune --jobs``), on SQLite and PostgreSQL.

What runs: four measurements, one after another, each on a fresh database — SQLite with
``--jobs 1`` and ``--jobs 2``, then PostgreSQL with ``--jobs 1`` and ``--jobs 2`` — each
the real command line as a subprocess::

    python -m tuner tune search_spaces/llm_decode.yaml --regimes heavy --storage URL \\
        --trials 24 --seeds 2 --horizon 30 --seed 0 --jobs J -q

with the same settings for all four. SQLite is a file in a temporary directory (also the
command's working directory); PostgreSQL is a database made with ``CREATE DATABASE`` on
the server (default the local test server, trust auth) and dropped ``WITH (FORCE)``
afterwards, whatever happens.

The defaults: llm_decode ``heavy`` is the default problem's busiest regime and its
trials are realistic (one simulation of 30 s of traffic takes about 0.7-0.8 s on one
core, so a trial of 2 seeds about 1.5 s; a trial's database work is a small share of it,
as in real use). Two seeds per trial rather than one exercise the per-seed intermediate
values and pruning a real study writes; 30 s horizons rather than the regime's 60 s keep
the trial near 1.5 s. 24 trials make the trial phase about 35-40 s with one worker on
2 cores (12 trials per worker with two), and the whole command about a minute: start-up
(imports, loading the problem, the warm starts) and, after the trials, the serial
baselines and capacities at the SLO, which one process computes whatever ``--jobs`` is.

What is timed:

* **Trial phase** (the target): read back from the database after the command exits —
  finished trials (COMPLETE or PRUNED) divided by the span from the earliest
  ``datetime_start`` to the latest ``datetime_complete`` over the study's trials.
  Simulations per second over the same span sum the trials' ``simulations`` attribute
  (0 for a replay of an evaluated point, marked ``duplicate_of``); trials per worker come
  from the ``worker`` attribute, with when each worker's first trial started (a helper
  joins late by its cold start). Two diagnostics say where a shortfall comes from: the
  mean trial duration (longer with 2 workers: they compete for cores) and the busy
  fraction, the trials' summed durations over span x workers (below 1: workers idle
  between trials — joining late, waiting on a lease or the database, sampling). The JSON
  has every trial's worker, start and end.
* **Wall**: the whole command (``time.perf_counter`` around the subprocess), start-up and
  the serial rows phase included. Reported, not judged.
* **Cold cost per worker process** (a proxy, labelled so): the wall time of a fresh
  ``python -c`` that imports ``tuner.cli`` and ``tuner.search`` and calls
  ``tuner.search.parallel.load_for_tuning(path, url)`` once (the compile cache opens lazily,
  so the database is not touched). Median of 3. A ``--jobs`` helper pays this and its
  own study setup before its first trial.

**Target** (the issue): on each backend, 2 workers at least 1.7x the trials per second of
one worker in the trial phase. The machine's other load skews this; the header shows the
CPU count and load average, and each measurement the load average before it started.

Usage::

    python benchmarks/bench_fleet.py                        # 4 measurements (about 4 minutes)
    python benchmarks/bench_fleet.py --quick                # a smoke check (about 1.5 minutes)
    python benchmarks/bench_fleet.py --backends sqlite      # SQLite only
    python benchmarks/bench_fleet.py --json --out fleet.json

If PostgreSQL is unreachable, one line says so and only SQLite is measured.

Exit status: 0; 2 when a ``tuner tune`` command failed; with ``--strict`` also 1 when a
ratio misses the target (or PostgreSQL was asked for and is unreachable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from recorded import add_options, cpu_model, load_average, record, usable_cpus

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.7
BACKENDS = ("sqlite", "postgresql")
WORKERS = (1, 2)
POSTGRES = os.environ.get("TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
DEFAULTS = {"trials": 24, "seeds": 2, "horizon": 30.0}
QUICK = {"trials": 6, "seeds": 1, "horizon": 5.0}
COLD_REPEATS = 3

COLD_SCRIPT = """\
import json, sys, time
start = time.perf_counter()
import tuner.cli, tuner.search
from tuner.search.parallel import load_for_tuning
imported = time.perf_counter()
load_for_tuning(sys.argv[1], sys.argv[2])
loaded = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported}))
"""


# -- the machine -------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    import optuna
    import sqlalchemy

    return {
        "cpu": cpu_model(), "cpus": os.cpu_count(), "cpus_usable": usable_cpus(), "load_average": load_average(),
        "python": platform.python_version(), "platform": platform.platform(),
        "optuna": optuna.__version__, "sqlalchemy": sqlalchemy.__version__,
    }


# -- databases ---------------------------------------------------------------------------

class Postgres:
    """Fresh databases on a PostgreSQL server, through an AUTOCOMMIT admin engine."""

    def __init__(self, admin_url: str) -> None:
        from sqlalchemy import create_engine

        self.engine = create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 2})

    def reachable(self) -> str | None:
        """None when the server answers; else why not, in one line."""
        from sqlalchemy import text

        try:
            with self.engine.connect() as connection:
                self.version = connection.execute(text("SHOW server_version")).scalar()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the server
            lines = str(exc).strip().splitlines()
            return lines[0] if lines else type(exc).__name__
        return None

    def create(self) -> tuple[str, str]:
        from sqlalchemy import text

        name = f"tuner_bench_fleet_{uuid.uuid4().hex[:12]}"
        with self.engine.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        return name, self.engine.url.set(database=name).render_as_string(hide_password=False)

    def drop(self, name: str) -> None:
        from sqlalchemy import text

        with self.engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def dispose(self) -> None:
        self.engine.dispose()


def shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


# -- one measurement ---------------------------------------------------------------------

def tune_command(problem: Path, regime: str, url: str, settings: dict[str, Any], jobs: int) -> list[str]:
    return [sys.executable, "-m", "tuner", "tune", str(problem), "--regimes", regime, "--storage", url,
            "--trials", str(settings["trials"]), "--seeds", str(settings["seeds"]),
            "--horizon", f"{settings['horizon']:g}", "--seed", str(settings["seed"]), "--jobs", str(jobs), "-q"]


def read_back(url: str, study_name: str, workers: int) -> dict[str, Any]:
    """The trial phase of the study, from its trials' timestamps and user attributes."""
    import optuna
    from optuna.trial import TrialState

    from tuner.search.trial_record import TrialRecord

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    try:
        trials = optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False)
    finally:
        storage.engine.dispose()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
    recorded = {t.number: TrialRecord.of(t) for t in trials}
    simulations = sum(recorded[t.number].simulations or 0 for t in trials)
    per_worker = Counter(str(recorded[t.number].worker or "?") for t in finished)
    origin = min(starts) if starts else None
    first_start: dict[str, float] = {}
    if starts:
        for t in trials:
            who = str(recorded[t.number].worker or "?")
            if t.datetime_start is not None:
                offset = (t.datetime_start - origin).total_seconds()
                first_start[who] = min(first_start.get(who, offset), offset)
    durations = [(t.datetime_complete - t.datetime_start).total_seconds() for t in finished
                 if t.datetime_start is not None and t.datetime_complete is not None]
    timeline = [
        {"number": t.number, "state": t.state.name, "worker": recorded[t.number].worker,
         "start_s": None if t.datetime_start is None or origin is None
         else round((t.datetime_start - origin).total_seconds(), 3),
         "end_s": None if t.datetime_complete is None or origin is None
         else round((t.datetime_complete - origin).total_seconds(), 3),
         "simulations": recorded[t.number].simulations, "duplicate_of": recorded[t.number].duplicate_of}
        for t in trials
    ]
    return {
        "trials": len(finished),
        "states": dict(Counter(t.state.name for t in trials)),
        "trial_phase_s": round(span, 3),
        "mean_trial_s": round(statistics.mean(durations), 3) if durations else None,
        # share of the span x workers spent inside finished trials (1.0: no worker ever idle)
        "busy_fraction": round(sum(durations) / (span * workers), 3) if span > 0 else None,
        "trials_per_s": len(finished) / span if span > 0 else None,
        "simulations": simulations,
        "simulations_per_s": simulations / span if span > 0 else None,
        "replays": sum(r.duplicate_of is not None for r in recorded.values()),
        "trials_per_worker": dict(sorted(per_worker.items())),
        "worker_first_start_s": {w: round(s, 2) for w, s in sorted(first_start.items(), key=lambda kv: kv[1])},
        "first_start": origin,
        "last_complete": max(ends) if ends else None,
        "timeline": timeline,
    }


def measure(backend: str, jobs: int, problem: Path, problem_name: str, regime: str, settings: dict[str, Any],
            postgres: Postgres | None, workdir: Path, log) -> dict[str, Any]:
    made = None
    if backend == "sqlite":
        url = f"sqlite:///{workdir / f'fleet-sqlite-j{jobs}.db'}"
    else:
        assert postgres is not None
        made, url = postgres.create()
    study_name = f"tuner:{problem_name}:{regime}"
    result: dict[str, Any] = {"backend": backend, "workers": jobs, "storage": shown(url),
                              "load_average_before": load_average()}
    log(f"  {backend}, {jobs} worker{'s' if jobs > 1 else ''}: running ...")
    try:
        command = tune_command(problem, regime, url, settings, jobs)
        env = {**os.environ, "COLUMNS": "160"}
        env.pop("TUNER_STORAGE", None)
        started_at = datetime.now()  # Optuna stamps trials with naive local time, like this
        start = time.perf_counter()
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env)
        result["wall_s"] = round(time.perf_counter() - start, 2)
        result["exit_status"] = done.returncode
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        # Optuna's INFO log lines ("[I <time>] Trial 3 finished ...") are counted, not kept
        result["optuna_info_lines"] = sum(line.startswith("[I ") for line in lines)
        result["stderr"] = [line[:300] for line in lines if not line.startswith("[I ")][-20:]
        try:
            result.update(read_back(url, study_name, jobs))
            first, last = result.pop("first_start"), result.pop("last_complete")
            if first is not None and last is not None:
                # the wall time split: before the first trial, the trial phase, after the last
                result["before_trials_s"] = round((first - started_at).total_seconds(), 2)
                result["after_trials_s"] = round(result["wall_s"] - (last - started_at).total_seconds(), 2)
        except Exception as exc:  # noqa: BLE001 - a failed command may leave no study
            lines = str(exc).strip().splitlines()
            result["read_error"] = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    finally:
        if made is not None and postgres is not None:
            postgres.drop(made)
    return result


def cold_cost(problem: Path, workdir: Path) -> dict[str, Any]:
    """Proxy for a worker process's cold start: interpreter, imports, loading the problem."""
    url = f"sqlite:///{workdir / 'cold.db'}"
    runs = []
    for _ in range(COLD_REPEATS):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", COLD_SCRIPT, str(problem), url], cwd=workdir,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            return {"error": lines[-1] if lines else f"exit status {done.returncode}"}
        inner = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({"wall_s": round(wall, 3), "import_s": round(inner["import_s"], 3),
                     "load_s": round(inner["load_s"], 3)})
    return {
        "what": "python -c: import tuner.cli, tuner.search; load_for_tuning(problem, url) once "
                "(a proxy for a worker's cold start; the database is not touched)",
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "import_s": statistics.median(r["import_s"] for r in runs),
        "load_s": statistics.median(r["load_s"] for r in runs),
        "runs": runs,
    }


def ratios(measurements: list[dict[str, Any]], backends: list[str]) -> dict[str, Any]:
    out = {}
    for backend in backends:
        rate = {m["workers"]: m.get("trials_per_s") for m in measurements if m["backend"] == backend}
        one, two = rate.get(1), rate.get(2)
        ratio = two / one if one and two else None
        out[backend] = {"ratio": None if ratio is None else round(ratio, 3), "target": TARGET_RATIO,
                        "met": None if ratio is None else ratio >= TARGET_RATIO}
    return out


# -- output ------------------------------------------------------------------------------

def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def rows_table(report: dict[str, Any]) -> str:
    """One markdown row per measurement (docs/tuning.md shows it, via benchmarks/figures.py)."""
    out = ["| backend | workers | trials | trial-phase s | trials/s | simulations/s | replays | wall s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["measurements"]:
        out.append(f"| {r['backend']} | {r['workers']} | {r.get('trials', '—')} | {fmt(r.get('trial_phase_s'), 1)} "
                   f"| {fmt(r.get('trials_per_s'), 3)} | {fmt(r.get('simulations_per_s'), 3)} "
                   f"| {r.get('replays', '—')} | {fmt(r.get('wall_s'), 1)} |")
    return "\n".join(out)


def table(report: dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    load = m["load_average"]
    out = [
        f"Trials per second with 1 and 2 workers — {m['cpu']}, {m['cpus']} CPUs ({m['cpus_usable']} usable), "
        f"load average {'/'.join(f'{x:g}' for x in load) if load else '?'}; Python {m['python']}, "
        f"Optuna {m['optuna']}, SQLAlchemy {m['sqlalchemy']}"
        + (f", PostgreSQL {report['postgresql_version']}" if report.get("postgresql_version") else ""),
        "",
        f"tuner tune {s['problem']} --regimes {s['regime']} --trials {s['trials']} --seeds {s['seeds']} "
        f"--horizon {s['horizon']:g} --seed {s['seed']} --jobs J -q" + ("   (--quick)" if report["quick"] else ""),
        "",
        rows_table(report),
        "",
    ]
    for r in report["measurements"]:
        first = r.get("worker_first_start_s", {})
        per = ", ".join(f"{w} {n} (first +{first.get(w, 0):g} s)" for w, n in r.get("trials_per_worker", {}).items())
        states = ", ".join(f"{k} {v}" for k, v in sorted(r.get("states", {}).items()))
        load = r["load_average_before"]
        out.append(f"  {r['backend']}, {r['workers']} worker{'s' if r['workers'] > 1 else ''}: wall "
                   f"{fmt(r.get('wall_s'), 1)} s = {fmt(r.get('before_trials_s'), 1)} s before the first trial + "
                   f"{fmt(r.get('trial_phase_s'), 1)} s trial phase + {fmt(r.get('after_trials_s'), 1)} s after "
                   f"the last; load average before {'/'.join(f'{x:g}' for x in load) if load else '?'}")
        out.append(f"    trials per worker: {per or 'none'}; mean trial {fmt(r.get('mean_trial_s'))} s; busy "
                   f"{fmt(r.get('busy_fraction'))}; states {states or '—'}")
        if len(r.get("trials_per_worker", {})) < r["workers"] and "trials" in r:
            out.append(f"    only {len(r['trials_per_worker'])} of {r['workers']} workers finished a trial")
        if r.get("optuna_info_lines"):
            out.append(f"    {r['optuna_info_lines']} Optuna INFO log lines on stderr (with -q)")
        if r.get("exit_status"):
            out.append(f"    command FAILED with status {r['exit_status']}")
        if r.get("read_error"):
            out.append(f"    reading the study failed: {r['read_error']}")
        for text in r.get("stderr", []):
            out.append(f"    stderr: {text}")
    cold = report.get("cold_cost", {})
    out.append("")
    if not cold:
        pass
    elif "error" in cold:
        out.append(f"Cold cost per worker process: failed ({cold['error']})")
    else:
        out.append(f"Cold cost per worker process (proxy: fresh python, import tuner.cli + tuner.search, "
                   f"load_for_tuning once; median of {len(cold['runs'])}): {cold['wall_s']:.2f} s "
                   f"(imports {cold['import_s']:.2f} s, loading the problem {cold['load_s']:.2f} s)")
    out.append("")
    out.append(f"2 workers vs 1 in the trial phase (target ≥ {TARGET_RATIO:g}×):")
    for backend, r in report["ratios"].items():
        verdict = "—" if r["met"] is None else ("PASS" if r["met"] else "MISS")
        out.append(f"  {backend}: {fmt(r['ratio'])}× {verdict}")
    if report.get("postgresql_unreachable"):
        out.append(f"  postgresql: not measured, unreachable: {report['postgresql_unreachable']}")
    if report["quick"]:
        out.append("  (--quick is a smoke check: with so few, so short trials start-up dominates and the "
                   "ratios say nothing about the target)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), metavar="A,B",
                        help="backends to measure, comma-separated (default: sqlite,postgresql)")
    parser.add_argument("--problem", type=Path, default=ROOT / "search_spaces" / "llm_decode.yaml")
    parser.add_argument("--regime", default="heavy")
    parser.add_argument("--trials", type=int, help=f"finished trials per study (default {DEFAULTS['trials']}; "
                                                   f"--quick {QUICK['trials']})")
    parser.add_argument("--seeds", type=int, help=f"seeds per trial (default {DEFAULTS['seeds']}; "
                                                  f"--quick {QUICK['seeds']})")
    parser.add_argument("--horizon", type=float, help=f"seconds of traffic per simulation (default "
                                                      f"{DEFAULTS['horizon']:g}; --quick {QUICK['horizon']:g})")
    parser.add_argument("--seed", type=int, default=0, help="first workload seed (default 0)")
    parser.add_argument("--postgres", default=POSTGRES, metavar="URL",
                        help="admin URL of the PostgreSQL server (default $TUNER_TEST_POSTGRES or the local one)")
    parser.add_argument("--quick", action="store_true", help="few trials, short horizons: a smoke check")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON instead of the table")
    parser.add_argument("--out", type=Path, metavar="PATH", help="also write the JSON to PATH")
    parser.add_argument("--strict", action="store_true", help=f"exit 1 when a ratio misses {TARGET_RATIO:g}×")
    add_options(parser)
    args = parser.parse_args(argv)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"--backends: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(BACKENDS)}")
    base = QUICK if args.quick else DEFAULTS
    settings = {"trials": args.trials or base["trials"], "seeds": args.seeds or base["seeds"],
                "horizon": args.horizon or base["horizon"], "seed": args.seed}
    problem = args.problem.resolve()
    if not problem.exists():
        parser.error(f"no problem file {problem}")
    import yaml

    problem_name = yaml.safe_load(problem.read_text())["name"]

    def log(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)

    report: dict[str, Any] = {
        "quick": args.quick,
        "machine": machine(),
        "settings": {"problem": str(problem.relative_to(ROOT) if problem.is_relative_to(ROOT) else problem),
                     "regime": args.regime, **settings},
        "target_ratio": TARGET_RATIO,
        "timing": "trial phase: finished trials / (latest datetime_complete - earliest datetime_start) of the "
                  "study's trials, read back from the database; wall: the whole command",
    }
    postgres = None
    if "postgresql" in backends:
        postgres = Postgres(args.postgres)
        why = postgres.reachable()
        if why is not None:
            backends.remove("postgresql")
            print(f"PostgreSQL at {shown(args.postgres)} unreachable ({why}); "
                  f"{'measuring SQLite only' if backends else 'nothing to measure'}", file=sys.stderr)
            report["postgresql_unreachable"] = why
            postgres.dispose()
            postgres = None
        else:
            report["postgresql_version"] = postgres.version
    measurements = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench_fleet_") as tmp:
            workdir = Path(tmp)
            if backends:
                log("cold cost per worker process ...")
                report["cold_cost"] = cold_cost(problem, workdir)
            for backend in backends:
                for jobs in WORKERS:
                    measurements.append(measure(backend, jobs, problem, problem_name, args.regime, settings,
                                                postgres, workdir, log))
    finally:
        if postgres is not None:
            postgres.dispose()
    report["measurements"] = measurements
    report["ratios"] = ratios(measurements, backends)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    if args.record:
        record("bench_fleet" + ("_quick" if args.quick else ""), report, args.note, report["machine"]["load_average"])
    print(text if args.json else table(report))
    if any(m.get("exit_status") for m in measurements):
        return 2
    missed = any(r["met"] is False for r in report["ratios"].values()) or "postgresql_unreachable" in report
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
