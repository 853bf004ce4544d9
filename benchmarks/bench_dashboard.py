"""How long the dashboard takes to have every page of a database ready, serial versus
worker processes, side by side in one run.

    .venv/bin/python benchmarks/bench_dashboard.py [--storage sqlite:///results.db.example] [--jobs N]

Per problem: the goodput-versus-load sweep (candidates x 8 rates x 3 seeds), the
regimes' recorded timelines and their attribution waterfalls, from a cold cache. The
sweeps and the attributions' simulations run in the worker pool, the timelines in the
main process. The sweeps' goodputs must agree to the last digit (the same seeds): the
last line says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

from tuner.dashboard import Dashboard  # noqa: E402
from tuner.dashboard.board import regimes_of  # noqa: E402


def ready(storage: str, jobs: int) -> tuple[dict[str, tuple[float, float, float, int]], dict[str, tuple]]:
    board = Dashboard(storage, jobs=jobs)
    rows = board.rows()
    times, sweeps = {}, {}
    try:
        for problem in dict.fromkeys(r.problem for r in rows):
            start = time.perf_counter()
            sweep = board.sweep(problem, rows)
            middle = time.perf_counter()
            regimes = regimes_of([r for r in rows if r.problem == problem]).items()
            for (_, regime), regime_rows in regimes:
                board.timelines(problem, regime, regime_rows)
            after_timelines = time.perf_counter()
            for (_, regime), regime_rows in regimes:
                board.attribution(problem, regime, regime_rows)
            points = 0 if sweep is None else len(sweep.curves) * len(sweep.rates) * sweep.seeds
            times[problem] = (middle - start, after_timelines - middle, time.perf_counter() - after_timelines, points)
            sweeps[problem] = None if sweep is None else tuple(c.goodputs for c in sweep.curves)
    finally:
        board.close()
    return times, sweeps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="sqlite:///results.db.example")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    serial, serial_sweeps = ready(args.storage, 1)
    parallel, parallel_sweeps = ready(args.storage, args.jobs)
    print(f"{'problem':22} {'sweep points':>12} {'sweep, 1 job':>13} {f'{args.jobs} jobs':>8} "
          f"{'attribution, 1 job':>19} {f'{args.jobs} jobs':>8} {'timelines':>10}")
    for problem, (sweep_s, timeline_s, attribution_s, points) in serial.items():
        fast_sweep, _, fast_attribution, _ = parallel[problem]
        print(f"{problem:22} {points:12d} {sweep_s:12.1f}s {fast_sweep:7.1f}s {attribution_s:18.1f}s "
              f"{fast_attribution:7.1f}s {timeline_s:9.1f}s")
    total_serial = sum(a + b + c for a, b, c, _ in serial.values())
    total_parallel = sum(a + b + c for a, b, c, _ in parallel.values())
    print(f"all pages ready: {total_serial:.1f}s with 1 job, {total_parallel:.1f}s with {args.jobs} "
          f"({total_serial / total_parallel:.2f}x, on {os.cpu_count()} CPUs)")
    print("same goodputs serial and parallel:", "yes" if serial_sweeps == parallel_sweeps else "NO")


if __name__ == "__main__":
    main()
