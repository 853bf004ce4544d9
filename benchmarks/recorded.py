"""Recorded benchmark results: ``benchmarks/results/<name>.json``, with when, where and on
which code each was measured.

Why one helper: the README and ``docs/`` quote these files (``benchmarks/figures.py``
regenerates every benchmark figure from them and ``tests/test_benchmarks.py`` fails when a
doc states a number they do not hold), so every file needs the same envelope — the date,
the machine (cores, CPU, Python, which build of the simulator core runs, the load average
around the run: the development machine is shared) and the git commit — and a figure can always be
traced to one run::

    {"benchmark": name, "recorded": {...}, "report": <the benchmark's --json output>}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARED_NOTE = "the 2-core development machine, shared with other engineers' tests while this ran"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def simulator_core() -> str:
    """Which build of the simulator core this process loads, as ``tuner --version`` says
    (compiled with mypyc, or pure Python and why): every timing depends on it."""
    from tuner.sim import BUILD

    return str(BUILD)


def git_commit() -> dict[str, Any]:
    """HEAD and whether the working tree differed from it (others edit it concurrently)."""
    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "cores_usable": usable_cpus(),
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "simulator_core": simulator_core(), "platform": platform.platform(), "load_average": load_average()}


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--record`` and ``--note``, the same on every benchmark."""
    parser.add_argument("--record", action="store_true",
                        help="also write the numbers to benchmarks/results/<name>.json (what the docs quote)")
    parser.add_argument("--note", default=SHARED_NOTE, help=f"what the record says of the run (default: {SHARED_NOTE!r})")


def record(name: str, report: Any, note: str = SHARED_NOTE, started_load: list[float] | None = None) -> Path:
    """Write ``report`` as ``benchmarks/results/<name>.json`` in the envelope above."""
    RESULTS.mkdir(exist_ok=True)
    recorded = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **git_commit(),
                "machine": machine(), "load_average_before": started_load, "note": note}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "recorded": recorded, "report": report}, indent=2,
                               default=str) + "\n")
    return path


def publish(name: str, report: Any, args: argparse.Namespace, started_load: list[float] | None,
            render: Any) -> int:
    """A benchmark's ending: the record when ``--record``, then the report as JSON
    (``--json``) or as ``render`` prints it; 0, the exit code."""
    if args.record:
        record(name, report, args.note, started_load)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def load(name: str) -> dict[str, Any]:
    """The envelope of ``benchmarks/results/<name>.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text())
