"""The README's first table, regenerated from a tuned database (never typed by hand).

For every problem and regime in the database's config table: the tuned goodput beside
THE baseline (per-bucket isolated-fastest) on the same seeds, their ratio, the paired
per-seed difference with its 95% t-interval (as stored by ``tuner tune``), the
one-config-per-operator baseline (labelled), the arrival rate each seed's workload
realised, the median latency of each (from the study's trials: equal goodput can hide a
faster service), and which mechanism can produce the difference (memory: the workspace
each reserves; SM sharing: co-running kernels whose shares changed; shape: only time per
launch), worked out from the two assignments.

Usage::

    python benchmarks/headline.py                                  # results.db.example
    python benchmarks/headline.py --storage sqlite:///results.db   # another database
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def problem_files(directory: Path) -> dict[str, Path]:
    """Problem name → file, for the shipped problem files."""
    import yaml

    out = {}
    for path in sorted(directory.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if isinstance(document, dict) and "name" in document:
            out[str(document["name"])] = path
    return out


def realized_rates(problem, regime: str, seeds: int, horizon_s: float) -> list[float]:
    chosen = problem.regimes[regime]
    return [len(chosen.workload(seed, problem.service.jitter, horizon_s)) / horizon_s for seed in range(seeds)]


def rows_markdown(storage: str) -> list[str]:
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.runtime.table import read_table
    from tuner.search import JointSpace
    from tuner.search.report import mechanism
    from tuner.stats import delta_text, ratio_text
    from tuner.store import Store

    files = problem_files(ROOT / "search_spaces")
    lines = ["| problem | regime | traffic (declared; realised per seed) | tuned | per-bucket isolated-fastest "
             "| tuned / baseline | tuned − baseline, paired 95% CI | one config per operator "
             "| median latency, tuned vs baseline | why |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    with Store(storage) as store:
        names = store.problems()
    path = storage.removeprefix("sqlite:///")
    for name in names:
        if name not in files:
            continue
        problem = load_problem(files[name])
        table = read_table(path, problem=name)
        space = JointSpace.of(problem)
        for regime in table.regimes:
            rows = table.regime_rows(regime)
            first = rows[0]
            tuned = Assignment.from_rows(problem, rows, table.source)
            base = Assignment.from_rows(
                problem, [SimpleNamespace(op=r.op, bucket=r.bucket, config=r.baseline_config) for r in rows],
                table.source)
            rates = realized_rates(problem, regime, first.seeds, first.horizon_s)
            delta = first.goodput_rps - first.baseline_goodput_rps
            one = "—" if first.one_config_goodput_rps is None else f"{first.one_config_goodput_rps:.3g}"
            declared = "trace rate" if problem.regimes[regime].arrivals.declared_rate is None else \
                f"{problem.regimes[regime].arrivals.declared_rate:g}/s"
            lines.append(
                f"| {name} | {regime} | {declared}; {', '.join(f'{r:.3g}' for r in rates)} "
                f"(mean {statistics.fmean(rates):.3g}) | {first.goodput_rps:.3g}"
                f"{'' if first.goodput_ci_rps is None else f' ± {first.goodput_ci_rps:.2g}'} "
                f"| {first.baseline_goodput_rps:.3g} | {ratio_text(first.goodput_rps, first.baseline_goodput_rps)} "
                f"| {delta_text(delta, first.delta_ci_rps)} | {one} | {latencies(storage, first.study_name, space, tuned, base)} "
                f"| {_why(delta, first.delta_ci_rps)}{mechanism(space, tuned, base)} |")
    return lines


def latencies(storage: str, study: str, space, tuned, base) -> str:
    """Mean over seeds of the median latency of the tuned and the baseline assignments,
    as their trials recorded it (``—`` when the baseline was not a trial)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    found = {}
    for which, assignment in (("tuned", tuned), ("base", base)):
        point = space.point_of(assignment)
        found[which] = next((t.user_attrs.get("latency_p50_s") for t in trials
                             if space.point(t.params) == point and "latency_p50_s" in t.user_attrs), None)
    if found["tuned"] is None or found["base"] is None:
        return "—"
    change = found["tuned"] / found["base"] - 1
    return f"{found['tuned']:.3g} vs {found['base']:.3g} s ({change:+.0%})"


def _why(delta: float, ci: float | None) -> str:
    significant = ci is not None and abs(delta) > ci
    return "" if significant else "not significant: "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    args = parser.parse_args(argv)
    print("\n".join(rows_markdown(args.storage)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
