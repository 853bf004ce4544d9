"""Readable results of a tuning run: the config table and the goodput of each choice."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..problem.model import Problem
from .study import RegimeOutcome


def _rate(mean: float, ci: float | None = None) -> str:
    return f"{mean:.2f}" + ("" if ci is None else f" ± {ci:.2f}")


def _ratio(a: float, b: float) -> str:
    return "—" if b <= 0 else f"{a / b:.3f}×"


def print_outcomes(problem: Problem, outcomes: Sequence[RegimeOutcome], storage: str,
                   console: Console | None = None) -> None:
    """Print the chosen configs per (regime, operator), then per regime the tuned goodput
    beside the baselines and the oracle, and where the rows went."""
    console = console or Console(width=None if Console().is_terminal else 200)
    if not outcomes:
        return
    configs = Table(title=f"{problem.name}: config table (all figures simulated)", title_justify="left")
    for column in ("regime", "op", "config", "params", "source"):
        configs.add_column(column)
    for outcome in outcomes:
        assignment = outcome.space.assignment(outcome.tuned.point)
        for op, config in assignment.items():
            params = ", ".join(f"{k}={v}" for k, v in config.params)
            configs.add_row(outcome.regime, op, config.name, params, str(config.profile.source))
    console.print(configs)

    console.print(f"goodput, req/s: mean ± 95% CI over {outcomes[0].settings.seeds} seeds, same seeds for every "
                  "assignment", highlight=False)
    for o in outcomes:
        tuned, fastest, footprint = o.tuned.evaluation, o.isolated_fastest.evaluation, o.smallest_footprint.evaluation
        parts = [
            f"tuned {_rate(tuned.mean, tuned.ci)}",
            f"isolated-fastest {_rate(fastest.mean)}{_infeasible(fastest)} (tuned / isolated-fastest "
            f"{_ratio(tuned.mean, fastest.mean)})",
            f"smallest-footprint {_rate(footprint.mean)}{_infeasible(footprint)}",
        ]
        if o.oracle is not None and o.oracle.best is not None:
            best = o.oracle.best.evaluation
            parts.append(f"oracle {_rate(best.mean)} (tuned / oracle {_ratio(tuned.mean, best.mean)}; "
                         f"{o.oracle.size} assignments, {o.oracle.cost} simulations)")
        elif o.oracle is not None:
            parts.append(f"oracle not computed: the joint space has {o.oracle.size} assignments "
                         f"(more than --oracle-limit {o.oracle.limit})")
        parts.append(f"{o.trials} trials, {o.study_simulations} simulations")
        console.print(f"  {o.regime}: {parts[0]}", highlight=False)
        for part in parts[1:]:
            console.print(f"    {part}", highlight=False)
    rows = sum(len(o.space.operators) for o in outcomes)
    console.print(f"{rows} rows written to {storage} (studies tuner:{problem.name}:REGIME; "
                  f"`tuner table show --storage {storage}`)", highlight=False)


def _infeasible(evaluation) -> str:
    return "" if evaluation.feasible else " (infeasible)"
