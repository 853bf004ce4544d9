"""Does a comparison survive a change of window? Goodput and capacity across horizons.

For one problem and regime: the assignment the table tuned, THE baseline (per-bucket
isolated-fastest) and the one-config-per-operator baseline, each simulated on the same
seeds at several window lengths. Per horizon it prints each assignment's goodput (mean ±
95% CI), how many seeds were flagged *overloaded* (the backlog grew through the window),
the tuned/baseline ratios with the paired difference, and the capacity at the SLO.

What it shows: a stable regime's goodput ratio stays within its CI whatever the window;
an overloaded one moves with the window (its queue grows for as long as one watches) and
is flagged; capacity does not depend on the window beyond its CI, which is why the
table stores it next to goodput.

Usage::

    python benchmarks/bench_horizon.py                                   # llm_decode heavy, results.db.example
    python benchmarks/bench_horizon.py --problem search_spaces/seed_example.yaml --regime heavy
    python benchmarks/bench_horizon.py --horizons 20 60 180 --capacity-horizons 20 60 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from recorded import add_options, load_average, record

ROOT = Path(__file__).resolve().parents[1]


def measure(problem_path: Path, regime: str, storage: str, horizons: list[float], capacity_horizons: list[float],
            seeds: int) -> dict:
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.runtime.served import read_table
    from tuner.search import ONE_CONFIG, PER_BUCKET, JointSpace
    from tuner.problem.scenario import Scenario
    from tuner.search.evaluate import evaluate
    from tuner.stats import paired_delta

    problem = load_problem(problem_path)
    space = JointSpace.of(problem)
    table = read_table(storage.removeprefix("sqlite:///"), problem=problem.name)
    assignments = {
        "tuned": Assignment.from_rows(problem, table.regime_rows(regime), table.source),
        PER_BUCKET.name: PER_BUCKET.assignment(space),
        ONE_CONFIG.name: ONE_CONFIG.assignment(space),
    }
    seed_list = tuple(range(seeds))
    out = {"problem": problem.name, "regime": regime, "seeds": list(seed_list),
           "attainment_target": problem.service.slo.attainment, "horizons": []}
    for horizon in horizons:
        started = time.perf_counter()
        entry: dict = {"horizon_s": horizon, "warmup_s": problem.regimes[regime].warmup_for(horizon)}
        metrics = ["goodput"] + (["capacity"] if horizon in capacity_horizons else [])
        for metric in metrics:
            found = {name: evaluate(Scenario.of(problem, regime, seed_list, horizon), a, metric=metric)
                     for name, a in assignments.items()}
            entry[metric] = {name: {"mean": e.mean, "ci": e.ci, "per_seed": list(e.values),
                                    **({"overloaded_seeds": e.overloaded, "realized_rates_rps": list(e.rates)}
                                       if metric == "goodput" else {})}
                             for name, e in found.items()}
            for other in (PER_BUCKET.name, ONE_CONFIG.name):
                delta = paired_delta(found["tuned"], found[other])
                entry[metric][f"tuned_minus_{other}"] = {"mean": delta.mean, "ci": delta.half_width}
                base = found[other].mean  # the ratio prose quotes; None when the baseline served nothing
                entry[metric][f"tuned_over_{other}"] = found["tuned"].mean / base if base else None
        entry["seconds"] = time.perf_counter() - started
        out["horizons"].append(entry)
    return out


def render(result: dict) -> str:
    from tuner.search import ONE_CONFIG, PER_BUCKET
    from tuner.stats import delta_text, ratio_text

    lines = [f"{result['problem']} / {result['regime']}: seeds {result['seeds']}, capacity at "
             f"{result['attainment_target']:.0%} SLO attainment (simulated)", "",
             "| horizon (warm-up) | metric | tuned | per-bucket isolated-fastest | tuned / it | tuned − it (paired) "
             "| one config per operator | tuned / it | tuned − it (paired) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for entry in result["horizons"]:
        for metric in ("goodput", "capacity"):
            if metric not in entry:
                continue
            figures = entry[metric]

            def cell(name: str) -> str:
                f = figures[name]
                text = f"{f['mean']:.3g}" + ("" if f["ci"] is None else f" ± {f['ci']:.2g}")
                if f.get("overloaded_seeds"):
                    text += f" (overloaded {f['overloaded_seeds']}/{len(result['seeds'])})"
                return text

            tuned = figures["tuned"]["mean"]
            parts = [cell("tuned")]
            for other in (PER_BUCKET.name, ONE_CONFIG.name):
                d = figures[f"tuned_minus_{other}"]
                parts += [cell(other), ratio_text(tuned, figures[other]["mean"]), delta_text(d["mean"], d["ci"])]
            lines.append(f"| {entry['horizon_s']:g} s ({entry['warmup_s']:g} s) | {metric} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", type=Path, default=ROOT / "search_spaces" / "llm_decode.yaml")
    parser.add_argument("--regime", default="heavy")
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    parser.add_argument("--horizons", type=float, nargs="+", default=[20.0, 60.0, 180.0])
    parser.add_argument("--capacity-horizons", type=float, nargs="*", default=[20.0, 60.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    result = measure(args.problem, args.regime, args.storage, args.horizons, args.capacity_horizons, args.seeds)
    if args.record:  # one file per problem and regime: the docs show two
        record(f"bench_horizon_{result['problem']}_{result['regime']}", result, args.note, before)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
