"""Readable results of a tuning run: the config table and the goodput of each choice.

Every ratio is against THE baseline, the per-bucket isolated-fastest assignment, with
the paired difference over the same seeds, and says which mechanism can produce it
(:func:`mechanism`); the one-config-per-operator baseline is shown, labelled, beside.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..problem.assignment import Assignment, runs
from ..problem.model import Problem
from ..sim import bind
from ..stats import paired_delta
from ..stats import ratio_text as ratio
from .baselines import ONE_CONFIG, PER_BUCKET, SMALLEST
from .evaluate import Evaluation
from .space import JointSpace
from .study import RegimeOutcome


def _rate(mean: float, ci: float | None = None) -> str:
    return f"{mean:.2f}" + ("" if ci is None else f" ± {ci:.2f}")


def difference(tuned: Evaluation, base: Evaluation) -> str:
    """``+0.21 ± 0.15 req/s`` — the paired per-seed difference and its 95% t-interval."""
    delta = paired_delta(tuned, base)
    if not delta.values:
        return "no paired difference (an assignment is infeasible)"
    return f"{delta} req/s"


def mechanism(space: JointSpace, tuned: Assignment, base: Assignment) -> str:
    """What can make ``tuned`` differ from ``base`` in this service: the cells that
    differ, the workspace each reserves (memory: more or less KV cache), and, where
    kernels share the GPU, changed SM or DRAM shares (SM sharing); otherwise only time
    per launch (shape)."""
    problem = space.problem
    changed = tuned.changed(base)
    if not changed:
        return "same configs in every bucket"
    ops = tuned.changed_ops(base)
    reserved = [bind(problem.service, a, problem.size_fields).reserved_workspace for a in (tuned, base)]
    parts = [f"{len(changed)} of {len(space.cells)} cells differ ({', '.join(ops)})"]
    if abs(reserved[0] - reserved[1]) > 0.5 * 2**20:
        parts.append(f"memory: reserved workspace {reserved[1] / 2**30:.3f} → {reserved[0] / 2**30:.3f} GiB")
    index = {cell: i for i, cell in enumerate(space.cells)}
    shares = [(space.cost(index[c], tuned.config(*c).name), space.cost(index[c], base.config(*c).name))
              for c in changed]
    if (problem.service.executors > 1 or problem.service.neighbors) and any(
            (a.sm, a.dram) != (b.sm, b.dram) for a, b in shares):
        parts.append("SM sharing: changed SM/DRAM shares of co-running kernels")
    if len(parts) == 1:
        parts.append("shape: time per launch only (no memory or sharing difference)")
    return "; ".join(parts)


def print_outcomes(problem: Problem, outcomes: Sequence[RegimeOutcome], storage: str,
                   console: Console | None = None) -> None:
    """Print the chosen configs per (regime, operator) — runs of buckets with one config
    merged — then per regime the tuned goodput beside the baselines and the oracle, and
    where the rows went."""
    console = console or Console(width=None if Console().is_terminal else 200)
    if not outcomes:
        return
    configs = Table(title=f"{problem.name}: config table (all figures simulated)", title_justify="left")
    for column in ("regime", "op", "configs by bucket", "source"):
        configs.add_column(column)
    for outcome in outcomes:
        for op, chosen in outcome.tuned.assignment.ops:
            sources = ", ".join(sorted({str(c.profile.source) for c in chosen}))
            configs.add_row(outcome.regime, op, " ".join(runs(problem, op, chosen)), sources)
    console.print(configs)

    console.print(f"goodput, req/s: mean ± 95% CI over {outcomes[0].settings.seeds} seeds, same seeds for every "
                  f"assignment; ratios against the {PER_BUCKET.label} baseline (what triton.autotune keyed on "
                  "shape keeps), differences paired by seed", highlight=False)
    for o in outcomes:
        tuned, base = o.tuned.evaluation, o.baseline.evaluation
        parts = [
            f"{PER_BUCKET.label} {_rate(base.mean, base.ci)}{_infeasible(base)}: tuned / baseline "
            f"{ratio(tuned.mean, base.mean)}, tuned − baseline {difference(tuned, base)}",
            f"{_why(tuned, base)}: {mechanism(o.space, o.tuned.assignment, o.baseline.assignment)}",
        ]
        for key in (ONE_CONFIG.name, SMALLEST.name):
            other = o.baselines[key].evaluation
            label = ONE_CONFIG.label if key == ONE_CONFIG.name else SMALLEST.label
            parts.append(f"{label} {_rate(other.mean)}{_infeasible(other)} (tuned / it {ratio(tuned.mean, other.mean)})")
        if o.oracle is not None and o.oracle.best is not None:
            best = o.oracle.best.evaluation
            parts.append(f"oracle {_rate(best.mean)} (tuned / oracle {ratio(tuned.mean, best.mean)}; "
                         f"{o.oracle.size} assignments, {o.oracle.cost} simulations)")
        elif o.oracle is not None:
            parts.append(f"oracle not computed: the joint space has {o.oracle.size} assignments "
                         f"(more than --oracle-limit {o.oracle.limit})")
        parts.append(f"{o.trials} trials, {o.study_simulations} simulations")
        console.print(f"  {o.regime}: tuned {_rate(tuned.mean, tuned.ci)}", highlight=False)
        for part in parts:
            console.print(f"    {part}", highlight=False)
    rows = sum(sum(1 for _ in o.tuned.assignment.cells()) for o in outcomes)
    console.print(f"{rows} rows written to {storage} (studies tuner:{problem.name}:REGIME; "
                  f"`tuner table show --storage {storage}`)", highlight=False)


def _why(tuned: Evaluation, base: Evaluation) -> str:
    """``why`` when the paired difference is significant at 95%, else say it is not."""
    if paired_delta(tuned, base).excludes_zero:
        return "why"
    return "no significant difference"


def _infeasible(evaluation: Evaluation) -> str:
    return "" if evaluation.feasible else " (infeasible)"
