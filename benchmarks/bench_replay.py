"""How closely a replay on the CPU reproduces the simulator where both should agree.

    .venv/bin/python benchmarks/bench_replay.py [--seconds 5] [--json] [--record]

``tuner replay`` executes a service on a wall clock (docs/replay.md). On the seed
example the kernels are declared (10 ms lean, 8 ms fast, 0.1 of the SMs each: eight
streams never contend), so the replay waits out the same times the simulator adds up and
the two should agree but for the harness's own cost: a thread hand-off per batch, the
operating system's sleep precision, arrivals seen late. Each case replays the same
seeded requests the simulator draws (seed 0) and reports goodput, SLO attainment and
latency percentiles side by side, and how late the harness saw arrivals (p99). Not a
GPU measurement: what it bounds is the harness, which a GPU replay runs too.
"""

from __future__ import annotations

import argparse
import sys

from recorded import add_options, load_average, publish

#: (regime, config) of the seed example: both variants at light and heavy load.
CASES = (("light", "lean"), ("light", "fast"), ("heavy", "lean"), ("heavy", "fast"))
FIGURES = (("goodput_rps", "goodput/s", "{:.1f}"), ("slo_attainment", "SLO met", "{:.1%}"),
           ("latency_p50_s", "p50 ms", "ms"), ("latency_p99_s", "p99 ms", "ms"))


def measure(regime: str, config: str, seconds: float) -> dict[str, object]:
    from tuner import bundled
    from tuner.problem import load_problem, resolve_assignment
    from tuner.replay import replay
    from tuner.sim import simulate

    problem = load_problem(bundled.problem_file("seed_example"))
    assignment = resolve_assignment(problem, [f"stage={config}"])
    replayed = replay(problem, assignment, regime, seed=0, duration_s=seconds)
    simulated = simulate(problem, assignment, regime, seed=0, horizon_s=seconds).metrics
    return {"regime": regime, "config": config, "seconds": seconds, "wall_s": round(replayed.wall_s, 2),
            "lateness_p99_s": replayed.lateness_p99_s, "unfinished": replayed.unfinished,
            "measured": {key: getattr(replayed.metrics, key) for key, _, _ in FIGURES},
            "simulated": {key: getattr(simulated, key) for key, _, _ in FIGURES}}


def render(report: dict[str, object]) -> str:
    """A markdown table: per case, each figure replayed (measured) / simulated."""
    from tuner.cli.replay import shown

    head = "| regime | config | " + " | ".join(f"{label}: replayed / simulated" for _, label, _ in FIGURES)
    lines = [head + " | arrivals seen late, p99 ms |", "|---|---|" + "---|" * (len(FIGURES) + 1)]
    for case in report["cases"]:  # type: ignore[union-attr]
        cells = [f"{shown(case['measured'][key], form)} / {shown(case['simulated'][key], form)}"
                 for key, _, form in FIGURES]
        lines.append(f"| {case['regime']} | {case['config']} | " + " | ".join(cells)
                     + f" | {case['lateness_p99_s'] * 1e3:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each replay's window (wall-clock seconds)")
    parser.add_argument("--json", action="store_true")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    report = {"problem": "seed_example", "seed": 0,
              "cases": [measure(regime, config, args.seconds) for regime, config in CASES]}
    return publish("bench_replay", report, args, before, render)


if __name__ == "__main__":
    sys.exit(main())
