"""The README's first table, regenerated from a tuned database (never typed by hand).

For every problem and regime in the database's config table, as ``tuner tune`` stored
it: the arrival rate each seed's judged window realised; the tuned goodput beside THE
baseline (per-bucket isolated-fastest) on the same seeds, their ratio and the paired
per-seed difference with its 95% t-interval, marked *overloaded* where either
assignment's backlog grew through the window (there goodput depends on the window's
length); the capacity at the SLO of both (the highest rate at which the SLO's attainment
target holds), its ratio and paired difference; the one-config-per-operator baseline
(labelled); the median latency of each (from the study's trials: equal goodput can hide a
faster service); and which mechanism can produce the difference (memory: the workspace
each reserves; SM sharing: co-running kernels whose shares changed; shape: only time per
launch), worked out from the two assignments.

Usage::

    python benchmarks/headline.py                                  # results.db.example
    python benchmarks/headline.py --storage sqlite:///results.db   # another database
"""

from __future__ import annotations

import argparse
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


def rows_markdown(storage: str) -> list[str]:
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.runtime.table import read_table
    from tuner.search import JointSpace
    from tuner.search.report import mechanism
    from tuner.stats import delta_text, ratio_text
    from tuner.store import Store

    files = problem_files(ROOT / "search_spaces")
    lines = ["| problem | regime | traffic (declared; realised per seed) | goodput: tuned | per-bucket "
             "isolated-fastest | tuned / baseline | tuned − baseline, paired 95% CI | capacity at the SLO: tuned "
             "| per-bucket isolated-fastest | tuned / baseline | tuned − baseline, paired 95% CI "
             "| one config per operator (goodput; capacity) | median latency, tuned vs baseline | why |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
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
            rates = first.realized_rates_rps or []
            delta = first.goodput_rps - first.baseline_goodput_rps
            declared = "trace rate" if problem.regimes[regime].arrivals.declared_rate is None else \
                f"{problem.regimes[regime].arrivals.declared_rate:g}/s"
            overloaded = (f" (overloaded in {first.overloaded_seeds}/{first.seeds} tuned, "
                          f"{first.baseline_overloaded_seeds}/{first.seeds} baseline seeds)"
                          if first.overloaded_seeds or first.baseline_overloaded_seeds else "")
            lines.append(
                f"| {name} | {regime} | {declared}; {', '.join(f'{r:.3g}' for r in rates)} "
                f"| {_figure(first.goodput_rps, first.goodput_ci_rps)}{overloaded} "
                f"| {first.baseline_goodput_rps:.3g} | {ratio_text(first.goodput_rps, first.baseline_goodput_rps)} "
                f"| {delta_text(delta, first.delta_ci_rps)} | {_capacities(first, ratio_text, delta_text)} "
                f"| {_maybe(first.one_config_goodput_rps)}; {_maybe(first.one_config_capacity_rps)} "
                f"| {latencies(storage, first.study_name, space, tuned, base)} "
                f"| {_why(first)}{mechanism(space, tuned, base)} |")
    return lines


def _figure(mean: float, ci: float | None) -> str:
    return f"{mean:.3g}" + ("" if ci is None else f" ± {ci:.2g}")


def _maybe(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _capacities(row, ratio_text, delta_text) -> str:
    """Four cells: tuned and baseline capacity, their ratio and paired difference."""
    if row.capacity_rps is None or row.baseline_capacity_rps is None:
        return "— | — | — | —"
    return (f"{_figure(row.capacity_rps, row.capacity_ci_rps)} | {row.baseline_capacity_rps:.3g} "
            f"| {ratio_text(row.capacity_rps, row.baseline_capacity_rps)} "
            f"| {delta_text(row.capacity_rps - row.baseline_capacity_rps, row.capacity_delta_ci_rps)}")


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


def _why(row) -> str:
    """Which paired difference is significant at 95%: goodput, capacity, both or neither."""
    goodput = row.delta_ci_rps is not None and abs(row.goodput_rps - row.baseline_goodput_rps) > row.delta_ci_rps
    capacity = (row.capacity_delta_ci_rps is not None and row.capacity_rps is not None
                and row.baseline_capacity_rps is not None
                and abs(row.capacity_rps - row.baseline_capacity_rps) > row.capacity_delta_ci_rps)
    if goodput and capacity:
        return ""
    if goodput or capacity:
        return f"significant in {'goodput' if goodput else 'capacity'} only: "
    return "not significant: "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    args = parser.parse_args(argv)
    print("\n".join(rows_markdown(args.storage)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
