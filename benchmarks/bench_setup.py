"""Set-up and test time of a fresh clone, run as the README's first lines run them.

What runs, in a ``git clone`` of this checkout's HEAD in a temporary directory (so only
committed files, and a ``.venv`` made from nothing)::

    bash scripts/setup-env.sh                  # timed: set-up
    bash scripts/setup-env.sh --tests          # with --tests: the test extras' set-up, timed
    .venv/bin/python -m pytest -q              # with --tests: the suite, timed and counted

Why a script: the README's first lines state these times, and ``benchmarks/figures.py``
writes them from this script's record, so they are measured, dated and tied to a commit
rather than remembered. pip's download cache, a local wheel directory
(``PIP_FIND_LINKS``) and whether the local PostgreSQL server answered (the fleet tests skip
without it) are recorded beside the times: each changes them.

Usage::

    python benchmarks/bench_setup.py --record           # set-up only (minutes: pip installs torch)
    python benchmarks/bench_setup.py --tests --record   # and the whole suite (several minutes more)

Exit status: 0; 1 when a command failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from recorded import ROOT, add_options, load_average, record

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def timed(command: list[str], cwd: Path) -> dict[str, Any]:
    """Wall time, exit status and the last lines of output of ``command``."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {"command": " ".join(command), "wall_s": round(time.perf_counter() - start, 1),
            "exit_status": done.returncode, "tail": lines[-5:],
            "failures": [line for line in lines if line.startswith(("FAILED ", "ERROR "))][:200]}


def outcomes(tail: list[str]) -> dict[str, int]:
    """pytest's closing counts (``816 passed, 3 skipped in 401.2s``)."""
    for line in reversed(tail):
        found = SUMMARY.findall(line)
        if found:
            return {outcome: int(n) for n, outcome in found}
    return {}


def postgres_answers() -> bool | None:
    if shutil.which("pg_isready") is None:
        return None
    return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode == 0


def measure(tests: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_setup_") as tmp:
        clone = Path(tmp) / "tuner"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True)
        report: dict[str, Any] = {
            "clone_commit": head.stdout.strip(),  # what was measured: HEAD may move during the run
            "pip_cache_present": (Path.home() / ".cache" / "pip").is_dir(),
            "pip_find_links": os.environ.get("PIP_FIND_LINKS"),  # local wheels: no downloads
            "postgres_answers": postgres_answers(),
            "setup": timed(["bash", "scripts/setup-env.sh"], clone),
        }
        if tests:
            report["tests_setup"] = timed(["bash", "scripts/setup-env.sh", "--tests"], clone)
            report["tests"] = timed([".venv/bin/python", "-m", "pytest", "-q"], clone)
            report["tests"]["outcomes"] = outcomes(report["tests"]["tail"])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", action="store_true", help="also set up for the tests and run the whole suite")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    report = measure(args.tests)
    failed = any(step["exit_status"] for key, step in report.items() if isinstance(step, dict))
    if args.record:  # a failed step is recorded too: its exit status is in the record
        record("setup_and_tests", report, args.note, before)
    print(json.dumps(report, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
