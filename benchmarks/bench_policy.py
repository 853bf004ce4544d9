"""The runtime dispatcher inside the simulator, against fixed choices, on rates that swing.

Two day-like workloads, each a regime added to a shipped problem (the file is copied
next to its traces, so the copy reads the same data):

* ``seed_example`` + a diurnal regime: 40 → 760 → 40 req/s, 20 s period, 40 s window;
* ``llm_decode`` + a diurnal regime: 0.5 → 9.5 → 0.5 req/s over 240 s, request sizes
  drawn from the Azure conversation trace.

For each, on seeds 0..K−1 (the same workload for every policy): the tuned table of a
database (default ``results.db.example``) served by the ``Dispatcher`` on simulated time
(switching regimes with the observed load), every regime's row held fixed, THE baseline
(per-bucket isolated-fastest) and the one-config-per-operator baseline. Goodput is
simulated (req/s), mean over the seeds.

Usage::

    python benchmarks/bench_policy.py                  # 3 seeds, results.db.example
    python benchmarks/bench_policy.py --seeds 1 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from recorded import add_options, load_average, record

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"

WORKLOADS = {
    "seed_example": ("seed_example.yaml", {
        "description": "40 to 760 req/s and back every 20 s",
        "arrivals": {"process": "diurnal", "rate": 400, "amplitude": 0.9, "period": "20 s", "phase": -1.5708},
        "horizon": "40 s"}),
    "llm_decode": ("llm_decode.yaml", {
        "description": "0.5 to 9.5 req/s and back over 4 minutes, conversation-trace sizes",
        "arrivals": {"process": "diurnal", "rate": 5.0, "amplitude": 0.9, "period": "240 s", "phase": -1.5708},
        "sizes": {"prompt": {"dist": "empirical", "trace": "traces/azure_llm_conv_2023.csv",
                             "column": "ContextTokens"},
                  "output": {"dist": "empirical", "trace": "traces/azure_llm_conv_2023.csv",
                             "column": "GeneratedTokens"}},
        "horizon": "240 s"}),
}


def with_daily(name: str, directory: Path):
    """The shipped problem with a ``daily`` regime, loaded from a copy beside its traces."""
    from tuner.problem import load_problem

    file, regime = WORKLOADS[name]
    document = yaml.safe_load((SPACES / file).read_text())
    document["regimes"]["daily"] = regime
    (directory / "traces").symlink_to(SPACES / "traces")
    path = directory / file
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return load_problem(path)


def measure(name: str, storage: str, seeds: int) -> dict[str, object]:
    from tuner.problem.assignment import Assignment
    from tuner.runtime import Dispatcher
    from tuner.runtime.served import read_table
    from tuner.search import ONE_CONFIG, PER_BUCKET, JointSpace
    from tuner.sim import DispatcherSwitch, NoSwitch, simulate_switching

    with tempfile.TemporaryDirectory() as tmp:
        problem = with_daily(name, Path(tmp))
        table = read_table(storage.removeprefix("sqlite:///"), problem=name)
        rows = {regime: Assignment.from_rows(problem, table.regime_rows(regime), table.source)
                for regime in table.regimes}
        space = JointSpace.of(problem)
        fixed = {**rows, "baseline": PER_BUCKET.assignment(space), "one_config": ONE_CONFIG.assignment(space)}

        def run(policy) -> tuple[float, int]:
            runs = [simulate_switching(problem, fixed, policy(), "daily", seed=seed).metrics for seed in range(seeds)]
            return statistics.fmean(m.goodput_rps for m in runs), sum(m.config_switches for m in runs)

        table_goodput, switches = run(lambda: DispatcherSwitch(Dispatcher(table)))
        static = {key: run(lambda key=key: NoSwitch(key))[0] for key in fixed}
    best = max(rows, key=lambda key: static[key])
    return {"problem": name, "seeds": seeds, "table": table_goodput, "switches": switches,
            "best_row": best, "best_row_goodput": static[best], "rows": {k: static[k] for k in rows},
            "per_bucket_isolated_fastest": static["baseline"], "one_config_per_operator": static["one_config"]}


def render(report: dict[str, object]) -> str:
    """The README's and docs/runtime.md's table (benchmarks/figures.py renders it from the record)."""
    lines = ["| workload | table (switches, all seeds) | best fixed row | per-bucket isolated-fastest "
             "| one config per operator |", "|---|---|---|---|---|"]
    for r in report["workloads"]:
        description = WORKLOADS[r["problem"]][1]["description"]
        lines.append(f"| {r['problem']}, {description} | {r['table']:.4g} ({r['switches']}) "
                     f"| {r['best_row_goodput']:.4g} (`{r['best_row']}`) | {r['per_bucket_isolated_fastest']:.4g} "
                     f"| {r['one_config_per_operator']:.4g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    report = {"storage": args.storage, "seeds": args.seeds,
              "workloads": [measure(name, args.storage, args.seeds) for name in WORKLOADS]}
    if args.record:
        record("bench_policy", report, args.note, before)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(render(report))
    print(f"(simulated goodput, req/s, mean over seeds 0–{args.seeds - 1}; table from {args.storage})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
