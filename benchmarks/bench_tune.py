"""The default ``tuner tune``: wall time and number of simulations, from a fresh database.

What runs: ``tuner tune`` exactly as a user types it (a subprocess of the installed
entry point, ``python -m tuner`` when it is missing), in a temporary directory holding a
link to ``search_spaces/`` and nothing else, so the default problem (``llm_decode.yaml``
when it exists, else ``seed_example.yaml``) and the default storage
(``sqlite:///results.db`` there) are used. Wall time includes start-up and imports.

Simulations are counted from the database afterwards: each trial records how many
simulations it ran (0 for a repeated assignment or an infeasible one), and the table of
per-regime figures is read from the studies. Extra options are passed to the command
(e.g. ``-- --oracle``).

Before and after, in one run, one after the other on the same machine: *before* is the
command as it ran before the compiled core and the seed processes (the pure-Python core,
``TUNER_PURE_PYTHON=1``, and ``--sim-jobs 1``: everything in one process); *after* is the
command as a user types it. Their config tables must be identical (only the time may
differ), which the benchmark checks. It also times the cold start of one worker process
(imports, the problem's load, its first simulation) — what each ``--sim-jobs`` process
pays once.

Usage::

    python benchmarks/bench_tune.py                 # before and after
    python benchmarks/bench_tune.py --after-only    # only the command as typed
    python benchmarks/bench_tune.py --json          # the numbers as JSON
    python benchmarks/bench_tune.py -- --horizon 10 # any tune options after --

Exit status: the command's (0 when it succeeded); 2 when the two tables differ; with
``--strict`` also 1 when the command took longer than the 90 s target.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recorded import add_options, load_average, machine, record

ROOT = Path(__file__).resolve().parents[1]
#: Issue 17: the default ``tuner tune`` on 2 cores.
TARGET_S = 90.0
#: A worker's cold start: what ``--sim-jobs`` processes each pay before their first result.
COLD_START = """
import json, sys, time
start = time.perf_counter()
from tuner.search.parallel import load_for_tuning, run_seed
from tuner.problem.assignment import Assignment
imported = time.perf_counter()
problem = load_for_tuning(sys.argv[1], sys.argv[2])
loaded = time.perf_counter()
run_seed(problem, Assignment.default(problem), next(iter(problem.regimes)), 0, 1.0, "goodput")
done = time.perf_counter()
print(json.dumps({"imports_s": imported - start, "load_s": loaded - imported, "first_simulation_s": done - loaded,
                  "total_s": done - start}))
"""


def tuner_command() -> list[str]:
    exe = Path(sys.executable).with_name("tuner")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tuner"]


def count(db: Path) -> dict:
    """Per study: finished trials, simulations run by trials, pruned and infeasible trials."""
    import optuna
    from optuna.trial import TrialState

    from tuner.search.trial_record import TrialRecord

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{db}"
    studies = {}
    for summary in optuna.study.get_all_study_summaries(url):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        trials = study.get_trials(deepcopy=False)
        studies[summary.study_name] = {
            "trials": sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials),
            "pruned": sum(t.state == TrialState.PRUNED for t in trials),
            "infeasible": sum(any(v > 0 for v in t.constraints.values()) for t in trials),
            "repeats": sum(TrialRecord.of(t).duplicate_of is not None for t in trials),
            "simulations": sum(TrialRecord.of(t).simulations or 0 for t in trials),
        }
    return studies


def markdown(report: dict) -> str:
    """docs/tuning.md's table of the run (benchmarks/figures.py renders it from the record)."""
    regimes = len(report["studies"])
    verdict = "met" if report["wall_s"] < report["target_s"] else "**missed**"
    runs = [(report, f"< {report['target_s']:.0f} s: {verdict}")]
    if report.get("before"):
        runs.append((report["before"], f"{report['speedup']:.2f}× the time; table "
                                       f"{'identical' if report['tables_identical'] else '**differs**'}"))
    return "\n".join([
        "| run | simulator core | wall | | studies | trials | simulations in trials | repeats |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| `{run['command']}` | {run['build'].partition('simulator core ')[2]} | {run['wall_s']:.1f} s | {note} "
          f"| {regimes} | {run['trials']} | {run['simulations']} | {sum(s['repeats'] for s in run['studies'].values())} |"
          for run, note in runs)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the run takes over the target")
    parser.add_argument("--target", type=float, default=TARGET_S,
                        help=f"the wall-time target in seconds (default {TARGET_S:.0f}; issue 40's deployments: 180)")
    parser.add_argument("--after-only", action="store_true", help="only the command as typed: no before run")
    parser.add_argument("tune_args", nargs="*", help="options passed to `tuner tune` (after --)")
    add_options(parser)
    args = parser.parse_args(argv)
    before_load = load_average()

    after = tune(args.tune_args, {})
    output, errors = after.pop("output"), after.pop("errors")
    report = {**after, "target_s": args.target, "machine": machine()}
    if not args.after_only and after["exit_status"] == 0:
        before = tune([*args.tune_args, "--sim-jobs", "1"], {"TUNER_PURE_PYTHON": "1"})
        for key in ("output", "errors"):
            before.pop(key)
        report["before"] = before
        report["speedup"] = before["wall_s"] / after["wall_s"]
        report["tables_identical"] = before.pop("table") == after["table"]
        report["cold_start"] = cold_start()
    report.pop("table", None)
    if args.record and after["exit_status"] == 0 and report.get("tables_identical", True):
        # one name per command, so `-- --jobs 2` does not overwrite the default run
        record("bench_tune" + "".join(f"_{a.lstrip('-')}" for a in args.tune_args), report, args.note, before_load)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(output, end="")
        print("\n" + summary(report))
    if after["exit_status"] != 0:
        print(errors, file=sys.stderr, end="")
        return after["exit_status"]
    if not report.get("tables_identical", True):
        return 2
    return 1 if args.strict and report["wall_s"] > args.target else 0


def tune(options: list[str], env_changes: dict[str, str]) -> dict:
    """``tuner tune OPTIONS`` in a fresh directory: wall time, counts and the table."""
    with tempfile.TemporaryDirectory(prefix="bench_tune_") as tmp:
        here = Path(tmp)
        (here / "search_spaces").symlink_to(ROOT / "search_spaces")
        command = [*tuner_command(), "tune", *options]
        env = {**os.environ, "COLUMNS": "160", **env_changes}
        env.pop("TUNER_STORAGE", None)
        if "TUNER_PURE_PYTHON" not in env_changes:
            env.pop("TUNER_PURE_PYTHON", None)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=here, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        db = here / "results.db"
        studies = count(db) if db.exists() else {}
        return {
            "command": " ".join([*(f"{k}={v}" for k, v in env_changes.items()), "tuner", "tune", *options]),
            "exit_status": done.returncode,
            "wall_s": round(wall, 2),
            "simulations": sum(s["simulations"] for s in studies.values()),
            "trials": sum(s["trials"] for s in studies.values()),
            "database_bytes": db.stat().st_size if db.exists() else 0,
            "studies": studies,
            "build": build(env),
            "table": table(db) if db.exists() else None,
            "output": done.stdout, "errors": done.stderr,
        }


def table(db: Path) -> list[str]:
    """The config table's rows as text, without their creation times."""
    from tuner.store import Store

    with Store(f"sqlite:///{db}") as store:
        return [repr(dataclasses.replace(row, created_at=None)) for row in store.rows()]


def build(env: dict[str, str]) -> str:
    done = subprocess.run([*tuner_command(), "--version"], capture_output=True, text=True, env=env)
    return done.stdout.strip()


def cold_start() -> dict:
    """One fresh worker process's imports, problem load and first simulation."""
    from tuner.bundled import default_problem

    url = f"sqlite:///{ROOT / 'results.db.example'}"
    env = {k: v for k, v in os.environ.items() if k != "TUNER_PURE_PYTHON"}
    done = subprocess.run([sys.executable, "-c", COLD_START, str(default_problem()), url], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout)


def summary(report: dict) -> str:
    lines = [f"{report['command']}: {report['wall_s']:.1f} s wall (target < {report['target_s']:.0f} s), "
             f"{report['trials']} trials, {report['simulations']} simulations, "
             f"database {report['database_bytes'] / 1e6:.2f} MB  [{report['build']}]"]
    for name, s in report["studies"].items():
        lines.append(f"  {name}: {s['trials']} trials ({s['pruned']} pruned, {s['infeasible']} infeasible, "
                     f"{s['repeats']} repeats), {s['simulations']} simulations")
    before = report.get("before")
    if before:
        cold = report["cold_start"]
        lines += [f"before: {before['command']}: {before['wall_s']:.1f} s  [{before['build']}]",
                  f"speed-up {report['speedup']:.2f}x; tables {'identical' if report['tables_identical'] else 'DIFFER'}",
                  f"cold start of one worker process: {cold['total_s']:.2f} s (imports {cold['imports_s']:.2f} s, "
                  f"problem load {cold['load_s']:.2f} s, first simulation {cold['first_simulation_s']:.2f} s)"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
