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

Usage::

    python benchmarks/bench_tune.py                 # the default command
    python benchmarks/bench_tune.py --json          # the numbers as JSON
    python benchmarks/bench_tune.py -- --horizon 10 # any tune options after --

Exit status: the command's (0 when it succeeded); with ``--strict`` also 1 when the run
took longer than the 180 s target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recorded import add_options, load_average, machine, record

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 180.0


def tuner_command() -> list[str]:
    exe = Path(sys.executable).with_name("tuner")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tuner"]


def count(db: Path) -> dict:
    """Per study: finished trials, simulations run by trials, pruned and infeasible trials."""
    import optuna
    from optuna.trial import TrialState

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
            "repeats": sum("duplicate_of" in t.user_attrs for t in trials),
            "simulations": sum(int(t.user_attrs.get("simulations", 0)) for t in trials),
        }
    return studies


def markdown(report: dict) -> str:
    """docs/tuning.md's table of the run (benchmarks/figures.py renders it from the record)."""
    regimes = len(report["studies"])
    verdict = "met" if report["wall_s"] < report["target_s"] else "**missed**"
    return "\n".join([
        "| run | wall | target | studies | trials | simulations in trials | repeats |", "|---|---|---|---|---|---|---|",
        f"| `{report['command']}` | {report['wall_s']:.1f} s | < {report['target_s']:.0f} s: {verdict} | {regimes} "
        f"| {report['trials']} | {report['simulations']} | {sum(s['repeats'] for s in report['studies'].values())} |"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--strict", action="store_true", help=f"exit 1 when the run takes over {TARGET_S:.0f} s")
    parser.add_argument("tune_args", nargs="*", help="options passed to `tuner tune` (after --)")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()

    with tempfile.TemporaryDirectory(prefix="bench_tune_") as tmp:
        here = Path(tmp)
        (here / "search_spaces").symlink_to(ROOT / "search_spaces")
        command = [*tuner_command(), "tune", *args.tune_args]
        env = {**os.environ, "COLUMNS": "160"}
        env.pop("TUNER_STORAGE", None)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=here, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        studies = count(here / "results.db") if (here / "results.db").exists() else {}
        size = (here / "results.db").stat().st_size if (here / "results.db").exists() else 0
    report = {
        "command": " ".join(["tuner", "tune", *args.tune_args]),
        "exit_status": done.returncode,
        "wall_s": round(wall, 2),
        "target_s": TARGET_S,
        "simulations": sum(s["simulations"] for s in studies.values()),
        "trials": sum(s["trials"] for s in studies.values()),
        "database_bytes": size,
        "studies": studies,
        "machine": machine(),
    }
    if args.record and done.returncode == 0:
        # one name per command, so `-- --jobs 2` does not overwrite the default run
        record("bench_tune" + "".join(f"_{a.lstrip('-')}" for a in args.tune_args), report, args.note, before)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(done.stdout, end="")
        print(f"\n{report['command']}: {wall:.1f} s wall (target < {TARGET_S:.0f} s), "
              f"{report['trials']} trials, {report['simulations']} simulations, database {size / 1e6:.2f} MB")
        for name, s in studies.items():
            print(f"  {name}: {s['trials']} trials ({s['pruned']} pruned, {s['infeasible']} infeasible, "
                  f"{s['repeats']} repeats), {s['simulations']} simulations")
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr, end="")
        return done.returncode
    return 1 if args.strict and wall > TARGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
