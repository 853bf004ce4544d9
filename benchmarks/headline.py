"""The README's tables, regenerated from a tuned database (never typed by hand): the full
one (:func:`render`) and the short first one (:func:`summary`).

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
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from recorded import add_options, record

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


HEADER = ("| problem | regime | traffic (declared; realised per seed) | goodput: tuned | per-bucket "
          "isolated-fastest | tuned / baseline | tuned − baseline, paired 95% CI | capacity at the SLO: tuned "
          "| per-bucket isolated-fastest | tuned / baseline | tuned − baseline, paired 95% CI "
          "| one config per operator (goodput; capacity) | median latency, tuned vs baseline | why |")


def measure(storage: str) -> dict:
    """Every (problem, regime) row of the database's table, as ``tuner tune`` stored it,
    with the median latencies and the mechanism worked out here."""
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.runtime.served import read_table
    from tuner.search import JointSpace
    from tuner.search.summary import mechanism
    from tuner.store import Store

    files = problem_files(ROOT / "search_spaces")
    with Store(storage) as store:
        names = store.problems()
    path = storage.removeprefix("sqlite:///")
    rows = []
    for name in names:
        if name not in files:
            continue
        problem = load_problem(files[name])
        table = read_table(path, problem=name)
        space = JointSpace.of(problem)
        for regime in table.regimes:
            regime_rows = table.regime_rows(regime)
            first = regime_rows[0]
            tuned = Assignment.from_rows(problem, regime_rows, table.source)
            base = Assignment.from_rows(
                problem, [SimpleNamespace(op=r.op, bucket=r.bucket, config=r.baseline_config) for r in regime_rows],
                table.source)
            rows.append({
                "problem": name, "regime": regime, "declared_rate_rps": problem.regimes[regime].arrivals.declared_rate,
                "realized_rates_rps": list(first.realized_rates_rps or []), "seeds": first.seeds,
                "goodput_rps": first.goodput_rps, "goodput_ci_rps": first.goodput_ci_rps,
                "baseline_goodput_rps": first.baseline_goodput_rps, "delta_ci_rps": first.delta_ci_rps,
                "overloaded_seeds": first.overloaded_seeds, "baseline_overloaded_seeds": first.baseline_overloaded_seeds,
                "capacity_rps": first.capacity_rps, "capacity_ci_rps": first.capacity_ci_rps,
                "baseline_capacity_rps": first.baseline_capacity_rps,
                "capacity_delta_ci_rps": first.capacity_delta_ci_rps,
                "one_config_goodput_rps": first.one_config_goodput_rps,
                "one_config_capacity_rps": first.one_config_capacity_rps,
                # the ratios prose quotes (None where the baseline's figure is 0 or missing)
                "goodput_ratio": _ratio(first.goodput_rps, first.baseline_goodput_rps),
                "capacity_ratio": _ratio(first.capacity_rps, first.baseline_capacity_rps),
                "goodput_delta_rps": first.goodput_rps - first.baseline_goodput_rps,
                "capacity_delta_rps": None if first.capacity_rps is None or first.baseline_capacity_rps is None
                else first.capacity_rps - first.baseline_capacity_rps,
                "cells": [{"op": r.op, "bucket": r.bucket, "config": r.config} for r in regime_rows],
                "latency_p50_s": latencies(storage, first.study_name, space, tuned, base),
                "mechanism": mechanism(space, tuned, base),
                # why the guard stored the baseline's configs here (None: the study's passed)
                "guard": first.guard,
            })
    return {"storage": storage, "rows": rows}


def render(report: dict) -> str:
    """The README's full table (benchmarks/figures.py renders it from the record)."""
    from tuner.stats import delta_text, ratio_text

    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        declared = "trace rate" if row["declared_rate_rps"] is None else f"{row['declared_rate_rps']:g}/s"
        overloaded = (f" (overloaded in {row['overloaded_seeds']}/{row['seeds']} tuned, "
                      f"{row['baseline_overloaded_seeds']}/{row['seeds']} baseline seeds)"
                      if row["overloaded_seeds"] or row["baseline_overloaded_seeds"] else "")
        lines.append(
            f"| {row['problem']} | {row['regime']} | {declared}; "
            f"{', '.join(f'{r:.3g}' for r in row['realized_rates_rps'])} "
            f"| {_figure(row['goodput_rps'], row['goodput_ci_rps'])}{overloaded} "
            f"| {row['baseline_goodput_rps']:.3g} | {ratio_text(row['goodput_rps'], row['baseline_goodput_rps'])} "
            f"| {delta_text(row['goodput_delta_rps'], row['delta_ci_rps'])} | {_capacities(row, ratio_text, delta_text)} "
            f"| {_maybe(row['one_config_goodput_rps'])}; {_maybe(row['one_config_capacity_rps'])} "
            f"| {_latency_text(row['latency_p50_s'])} | {_why(row)}{row['mechanism']} |")
    return "\n".join(lines)


SUMMARY_HEADER = ("| problem | regime | mechanism | capacity at the SLO, req/s: tuned vs per-bucket "
                  "isolated-fastest (paired difference ± 95% CI) | verdict |")


def summary(report: dict) -> str:
    """The README's first table: five columns, one line per problem for the regimes
    whose capacity difference is not significant, and one for those where it is (regimes
    with the same figures share a line), ordered by effect (gains, largest first; no
    difference; losses, largest last).

    Capacity decides the verdict: it does not depend on the window's length, while
    goodput above saturation does (the full table beside it has both)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in report["rows"]:
        verdict = _verdict(row)
        key = (row["problem"], "none" if verdict == "none" else f"{verdict}: {_capacity_text(row)}")
        groups.setdefault(key, []).append(row)
    ranked = sorted(groups.values(), key=lambda rows: (_RANK[_verdict(rows[0])], -_effect(_largest(rows))))
    lines = [SUMMARY_HEADER, "|---|---|---|---|---|"]
    for rows in ranked:
        lines.append(f"| {rows[0]['problem']} | {', '.join(r['regime'] for r in rows)} | {_mechanisms(rows)} "
                     f"| {_capacity_cell(rows)} | {_verdict_text(rows)} |")
    return "\n".join(lines)


_RANK = {"gain": 0, "none": 1, "loss": 2}


def _verdict(row: dict) -> str:
    """``gain`` or ``loss`` where the paired capacity difference excludes 0, else ``none``."""
    delta, ci = row["capacity_delta_rps"], row["capacity_delta_ci_rps"]
    if delta is None or ci is None or abs(delta) <= ci:
        return "none"
    return "gain" if delta > 0 else "loss"


def _effect(row: dict) -> float:
    return 0.0 if row["capacity_ratio"] is None else row["capacity_ratio"] - 1


def _largest(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: abs(_effect(r)))


def _percent(change: float) -> str:
    return f"{change * 100:+.2g}%"


def _delta_text(row: dict) -> str:
    from tuner.stats import delta_text

    return delta_text(row["capacity_delta_rps"], row["capacity_delta_ci_rps"])


def _capacity_text(row: dict) -> str:
    if row["capacity_rps"] is None or row["baseline_capacity_rps"] is None:
        return "—"
    return f"{row['capacity_rps']:.3g} vs {row['baseline_capacity_rps']:.3g} ({_delta_text(row)})"


def _capacity_cell(rows: list[dict]) -> str:
    """One regime's capacities; for several, the same figures once, the same paired
    difference once (``+0 ± 0 in each``), else the largest difference and where."""
    texts = {_capacity_text(r) for r in rows}
    if len(texts) == 1:
        return texts.pop()
    deltas = {_delta_text(r) for r in rows}
    if len(deltas) == 1 and None not in {r["capacity_delta_rps"] for r in rows}:
        return f"{deltas.pop()} in each"
    largest = _largest(rows)
    return f"largest difference, {largest['regime']}: {_capacity_text(largest)}"


def _mechanisms(rows: list[dict]) -> str:
    """What can make the assignments differ, in words (the full table's *why* names cells
    and workspaces): the mechanism's kinds, the workspace change for a single regime."""
    kinds: dict[str, str] = {}
    for row in rows:
        for clause in row["mechanism"].split("; "):
            kind, _, detail = clause.partition(": ")
            if not detail or not re.fullmatch(r"[A-Za-z][A-Za-z -]*", kind):
                continue  # which cells differ, a waves note's further cells: the full table says
            if kind == "memory" and len(rows) == 1:
                kinds[kind] = "memory (workspace " + " → ".join(
                    f"{float(v):g}" for v in detail.removeprefix("reserved workspace ").removesuffix(" GiB")
                    .split(" → ")) + " GiB)"
            else:
                kinds.setdefault(kind, kind)
    return ", ".join(kinds.values()) or "none: same configs"


def _verdict_text(rows: list[dict]) -> str:
    row = _largest(rows)
    verdict = _verdict(row)
    kept = sum(bool(r.get("guard")) for r in rows)
    if verdict == "none" and kept:
        return ("no difference: the baseline's configs kept (guard)" if kept == len(rows)
                else f"no difference: the baseline's configs kept in {kept} of {len(rows)} (guard)")
    if verdict == "none":
        return "no difference"
    text = f"{verdict}: {_percent(_effect(row))} capacity over {row['seeds']} seeds"
    delta, ci = row["goodput_delta_rps"], row["delta_ci_rps"]
    if verdict == "gain" and ci is not None and delta > ci:
        text += f"; goodput {row['goodput_rps']:.3g} vs {row['baseline_goodput_rps']:.3g} req/s"
    return text


def problem_table(report: dict, problem: str) -> str:
    """One problem's rows with their configs (docs/tuning.md shows the seed example's)."""
    def rate(value: float, ci: float | None, overloaded: int, seeds: int) -> str:
        text = f"{value:.3g}" + ("" if ci is None else f" ± {ci:.2g}") + " /s"
        return text + (f" (overloaded, {overloaded} of {seeds} seeds)" if overloaded else "")

    from tuner.stats import delta_text

    lines = ["| regime | op | config | realised rate per seed | tuned goodput | per-bucket isolated-fastest "
             "| tuned − baseline (paired) | capacity at the SLO: tuned | baseline | tuned − baseline (paired) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in (r for r in report["rows"] if r["problem"] == problem):
        ops = ", ".join(dict.fromkeys(c["op"] for c in row["cells"]))
        configs = ", ".join(f"`{c['config']}`" for c in row["cells"])
        lines.append(
            f"| {row['regime']} | {ops} | {configs} | {', '.join(f'{r:.3g}' for r in row['realized_rates_rps'])} /s "
            f"| {rate(row['goodput_rps'], row['goodput_ci_rps'], row['overloaded_seeds'], row['seeds'])} "
            f"| {rate(row['baseline_goodput_rps'], None, row['baseline_overloaded_seeds'], row['seeds'])} "
            f"| {delta_text(row['goodput_delta_rps'], row['delta_ci_rps'])} "
            f"| {rate(row['capacity_rps'], row['capacity_ci_rps'], 0, row['seeds'])} "
            f"| {rate(row['baseline_capacity_rps'], None, 0, row['seeds'])} "
            f"| {delta_text(row['capacity_delta_rps'], row['capacity_delta_ci_rps'])} |")
    return "\n".join(lines)


def _ratio(tuned: float | None, base: float | None) -> float | None:
    return None if tuned is None or not base else tuned / base


def _figure(mean: float, ci: float | None) -> str:
    return f"{mean:.3g}" + ("" if ci is None else f" ± {ci:.2g}")


def _maybe(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _capacities(row: dict, ratio_text, delta_text) -> str:
    """Four cells: tuned and baseline capacity, their ratio and paired difference."""
    if row["capacity_rps"] is None or row["baseline_capacity_rps"] is None:
        return "— | — | — | —"
    return (f"{_figure(row['capacity_rps'], row['capacity_ci_rps'])} | {row['baseline_capacity_rps']:.3g} "
            f"| {ratio_text(row['capacity_rps'], row['baseline_capacity_rps'])} "
            f"| {delta_text(row['capacity_delta_rps'], row['capacity_delta_ci_rps'])}")


def _latency_text(latency: dict | None) -> str:
    if latency is None:
        return "—"
    change = latency["tuned"] / latency["base"] - 1
    return f"{latency['tuned']:.3g} vs {latency['base']:.3g} s ({change:+.0%})"


def latencies(storage: str, study: str, space, tuned, base) -> dict | None:
    """Mean over seeds of the median latency of the tuned and the baseline assignments,
    as their trials recorded it (None when the baseline was not a trial)."""
    import optuna

    from tuner.search.trial_record import TrialRecord

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    medians = [(space.point(t.params), TrialRecord.of(t).latency_p50_s) for t in trials]
    found = {}
    for which, assignment in (("tuned", tuned), ("base", base)):
        point = space.point_of(assignment)
        found[which] = next((median for at, median in medians if at == point and median is not None), None)
    return None if found["tuned"] is None or found["base"] is None else found


def _why(row: dict) -> str:
    """Which paired difference is significant at 95%: goodput, capacity, both or neither;
    first, where the guard kept the baseline's configs, why."""
    if row.get("guard"):
        return f"{row['guard']}; "
    goodput = row["delta_ci_rps"] is not None and abs(row["goodput_rps"] - row["baseline_goodput_rps"]) > row["delta_ci_rps"]
    capacity = (row["capacity_delta_ci_rps"] is not None and row["capacity_rps"] is not None
                and row["baseline_capacity_rps"] is not None
                and abs(row["capacity_rps"] - row["baseline_capacity_rps"]) > row["capacity_delta_ci_rps"])
    if goodput and capacity:
        return ""
    if goodput or capacity:
        return f"significant in {'goodput' if goodput else 'capacity'} only: "
    return "not significant: "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON instead of the table")
    add_options(parser)
    args = parser.parse_args(argv)
    report = measure(args.storage)
    if args.record:
        record("headline", report, args.note)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
