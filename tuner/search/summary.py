"""Readable results of a tuning run: the config table and the goodput of each choice.

Every ratio is against THE baseline, the per-bucket isolated-fastest assignment, with
the paired difference over the same seeds, and says which mechanism can produce it
(:func:`mechanism`); the one-config-per-operator baseline is shown, labelled, beside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from ..problem.assignment import Assignment, spans
from ..problem.changes import SAME, Span, changes
from ..problem.model import Config, Problem
from ..console import terminal_console
from ..sim import bind
from ..sim.gpu import rounds
from ..sim.metrics import overload_note
from ..stats import paired_delta
from ..stats import ratio_text as ratio
from .baselines import PER_BUCKET, ROUTING_AWARE, ROUTING_AWARE_LABEL, SMALLEST
from .evaluate import Evaluation
from .launches import host_bound_note
from .space import JointSpace
from .outcome import RegimeOutcome
from .ranking import Choice


def _rate(mean: float, ci: float | None = None) -> str:
    return f"{mean:.2f}" + ("" if ci is None else f" ± {ci:.2f}")


def capacity_text(evaluation: Evaluation, ci: bool = True) -> str:
    """A capacity's mean (± its CI), or ``≥ X (lower bound)`` when some seed's search
    reached its ceiling with the SLO still met: then no interval or difference means anything."""
    if evaluation.lower_bound:
        return f"≥ {evaluation.mean:.3g} (lower bound)"
    return _rate(evaluation.mean, evaluation.ci if ci else None)


def capacity_line(tuned: Evaluation, base: Evaluation, label: str = PER_BUCKET.label, name: str = "baseline") -> str:
    """The tuned and baseline capacities compared, or both shown with why they are only
    lower bounds (:mod:`tuner.search.capacity`)."""
    shown = f"capacity at the SLO: tuned {capacity_text(tuned)}, {label} {capacity_text(base)}"
    if tuned.lower_bound or base.lower_bound:
        return f"{shown}: not compared, {tuned.limit or base.limit}"
    return (f"{shown}: tuned / {name} {ratio(tuned.mean, base.mean)}, "
            f"tuned − {name} {difference(tuned, base)}")


def difference(tuned: Evaluation, base: Evaluation) -> str:
    """``+0.21 ± 0.15 req/s`` — the paired per-seed difference and its 95% t-interval."""
    delta = paired_delta(tuned, base)
    if not delta.values:
        return "no paired difference (an assignment is infeasible)"
    return f"{delta} req/s"


def mechanism(space: JointSpace, tuned: Assignment, base: Assignment) -> str:
    """What can make ``tuned`` differ from ``base`` in this service: the cells that
    differ, the workspace each reserves (memory: more or less KV cache), and, where
    kernels share the GPU, changed SM or DRAM shares (SM sharing) and configs that run on
    an SM partition (timed on its SMs, where split counts and tiles degrade differently),
    and, where the engine launches eagerly, host-bound launches (:func:`host_bound_note`);
    otherwise only time per launch (shape)."""
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
    service = problem.service
    if (service.executors > 1 or service.neighbors or len(service.lanes()) > 1) and any(
            (a.sm, a.dram) != (b.sm, b.dram) for a, b in shares):
        parts.append("SM sharing: changed SM/DRAM shares of co-running kernels")
    rounds = _rounds_beside(space, tuned, base, changed)
    if rounds:
        parts.append(rounds)
    placed = sorted({(op.partition or service.partition).name for op in service.operators if op.name in ops}
                    - {"device"})
    if placed:
        parts.append(f"SM partition: changed configs run on {', '.join(placed)}, timed on its SMs")
    host = host_bound_note(space, tuned, base, changed)  # launch: eager, see tuner/search/launches.py
    if host:
        parts.append(host)
    if len(parts) == 1:
        parts.append("shape: time per launch only (no memory or sharing difference)")
    return "; ".join(parts)


#: Cells the waves note names before it counts the rest (it rides in a table cell).
_WAVE_NOTES = 2


def _held_beside(space: JointSpace, assignment: Assignment, lane: object) -> float:
    """The SM share the kernels beside ``lane`` hold at most: the busiest config of each
    other lane of ``assignment`` (one kernel runs per lane at a time) and each neighbour's."""
    problem = space.problem
    service = problem.service
    index = {cell: i for i, cell in enumerate(space.cells)}
    held = 0.0
    for other in service.lanes():
        if other != lane:
            held += max((space.cost(index[(o.name, b)], assignment.config(o.name, b).name).sm
                         for o in service.operators if (o.partition or service.partition) == other
                         for b in range(o.bucketing.size)), default=0.0)
    return held + sum(max((p[1] for p in n.profile.phases({}, service.device)), default=0.0)
                      for n in service.neighbors)


def _rounds_beside(space: JointSpace, tuned: Assignment, base: Assignment, changed: Sequence[tuple[str, int]]) -> str:
    """``waves: ...`` where a changed cell's CTA rounds differ between the two beside the
    SMs the other streams' kernels hold at most (:func:`_held_beside`, in the tuned
    assignment): a persistent grid sized to every SM runs a second round beside 16 NCCL
    channels, a carve-out does not. Worked from the configs (``sim.gpu.rounds``), not
    observed in a simulation."""
    problem = space.problem
    service, sms = problem.service, problem.service.device.sms
    index = {cell: i for i, cell in enumerate(space.cells)}
    notes = []
    for op_name, bucket in changed:
        held = math.floor(_held_beside(space, tuned, problem.operator(op_name).partition or service.partition)
                          * sms + 1e-6)
        if not 0 < held < sms:
            continue
        seen = []
        for label, assignment in (("baseline", base), ("tuned", tuned)):
            wave = space.cost(index[(op_name, bucket)], assignment.config(op_name, bucket).name).wave
            if wave is not None:
                s, w = wave
                seen.append((label, max(1, math.ceil(w - 1e-9)), rounds(s, w, sms - held, sms)))
        counts = {(alone, beside) for _, alone, beside in seen}
        if len(counts) > 1 and any(beside > alone for _, alone, beside in seen):
            shown = ", ".join(f"{label} {beside}" for label, _, beside in seen)
            alone = ", ".join(str(alone) for _, alone, _ in seen)
            notes.append(f"{op_name}[{bucket}] beside {held} SMs runs its CTAs in rounds: {shown} (alone: {alone})")
    if not notes:
        return ""
    more = f"; and {len(notes) - _WAVE_NOTES} more cells" if len(notes) > _WAVE_NOTES else ""
    return "waves: " + "; ".join(notes[:_WAVE_NOTES]) + more


def config_table(problem: Problem, outcomes: Sequence[RegimeOutcome]) -> Table:
    """Per (regime, operator) what the tuned configs change against THE baseline, as the
    dashboard's config matrix shows it: one line per run of buckets whose config differs
    (``M9..64: SPLIT_K 1→4``), the others counted as ``= baseline``. A config's name
    spells every parameter, and the runs' names side by side made the table about 200
    columns wide; this one fits a terminal (``tuner table show`` names every config)."""
    table = Table(title=f"{problem.name}: config table (all figures simulated)", title_justify="left",
                  caption=f"{SAME}: the {PER_BUCKET.label} config of the bucket; otherwise the parameters the "
                          "tuned config changes against it", caption_justify="left")
    table.add_column("regime")
    table.add_column("op")
    table.add_column("tuned configs by bucket", overflow="fold")  # a long change folds, never cut to "…"
    table.add_column("source")
    for outcome in outcomes:
        for op, chosen in outcome.tuned.assignment.ops:
            sources = ", ".join(sorted({str(c.profile.source) for c in chosen}))
            table.add_row(outcome.regime, op, config_cell(problem, op, chosen, outcome.baseline.assignment.configs(op)),
                          sources)
    return table


def config_cell(problem: Problem, op: str, chosen: tuple[Config, ...], baseline: tuple[Config, ...]) -> str:
    """One operator's line(s) of :func:`config_table`: each run of buckets whose config
    differs from ``baseline``'s with the parameters it changes, then how many buckets keep
    the baseline's config."""
    found = [Span(label, config.name, base.name, changes(base.param_dict, config.param_dict), buckets)
             for label, config, base, buckets in spans(problem, op, chosen, baseline)]
    lines = [f"{s.label}: {s.text()}" if s.label else s.text() for s in found if s.differs]
    same = sum(s.buckets for s in found if not s.differs)
    if same:
        lines.append(f"{same} other bucket{'s' * (same > 1)}: {SAME}" if lines and len(chosen) > 1 else SAME)
    return "\n".join(lines)


def print_outcomes(problem: Problem, outcomes: Sequence[RegimeOutcome], storage: str,
                   console: Console | None = None) -> None:
    """Print the chosen configs per (regime, operator) — runs of buckets with one config
    merged — then per regime the tuned goodput beside the baselines and the oracle, and
    where the rows went."""
    console = console or terminal_console()
    if not outcomes:
        return
    console.print(config_table(problem, outcomes))
    # prose: word-wrapped on a terminal; whole lines into a pipe or a file (grep finds them)
    soft = not console.is_terminal

    console.print(f"goodput and capacity, req/s: mean ± 95% CI over {outcomes[0].settings.seeds} seeds, same seeds "
                  f"for every assignment; ratios against the {PER_BUCKET.label} baseline (what triton.autotune keyed "
                  "on shape keeps), differences paired by seed; capacity = the highest rate at which "
                  f"{problem.service.slo.attainment:.0%} of requests meet the SLO", highlight=False, soft_wrap=soft)
    for o in outcomes:
        tuned, base = o.tuned.evaluation, o.baseline.evaluation
        parts = [
            *knob_lines(o),
            f"traffic: {realized(tuned if tuned.rates else base)}; {warmup_text(o)}",
            f"{PER_BUCKET.label} {_rate(base.mean, base.ci)}{_infeasible(base)}: tuned / baseline "
            f"{ratio(tuned.mean, base.mean)}, tuned − baseline {difference(tuned, base)}",
        ]
        flag = overload_text(tuned, base)
        if flag:
            parts.append(flag)
        if o.tuned.capacity is not None and o.baseline.capacity is not None:
            parts.append(capacity_line(o.tuned.capacity, o.baseline.capacity))
        failed = o.tuned.capacity_error or o.baseline.capacity_error
        if failed:
            parts.append(f"capacity at the SLO not found (goodput and rows stand without it): {failed}")
        parts.append(f"{_why(*_compared(o))}: {mechanism(o.space, o.tuned.assignment, o.baseline.assignment)}")
        aware = o.baselines.get(ROUTING_AWARE)
        if aware is not None:
            parts.append(_routing_split(o, aware))
        # THE baseline is the per-bucket one: the others (one config per operator, a straw man
        # beside it, and smallest-footprint) stay in the table's rows and `table show`
        other = o.baselines[SMALLEST.name].evaluation
        parts.append(f"{SMALLEST.label} {_rate(other.mean)}{_infeasible(other)} "
                     f"(tuned / it {ratio(tuned.mean, other.mean)})")
        if o.oracle is not None and o.oracle.best is not None:
            best = o.oracle.best.evaluation
            parts.append(f"oracle {_rate(best.mean)} (tuned / oracle {ratio(tuned.mean, best.mean)}; "
                         f"{o.oracle.size} assignments, {o.oracle.cost} simulations)")
        elif o.oracle is not None:
            parts.append(f"oracle not computed: the joint space has {o.oracle.size} assignments "
                         f"(more than --oracle-limit {o.oracle.limit})")
        parts.append(f"{o.trials} trials, {o.study_simulations} simulations")
        if o.guard is None:
            head = f"tuned {_rate(tuned.mean, tuned.ci)} (study maximised {o.objective})"
        else:  # the figures below are the stored configs', the baseline's
            trial = "" if o.candidate is None or o.candidate.trial is None else f", trial {o.candidate.trial}"
            head = (f"stored the {PER_BUCKET.label} configs, {_rate(tuned.mean, tuned.ci)} (study maximised "
                    f"{o.objective}; its best{trial}, did not pass the guard)")
            parts.insert(0, o.guard)
        console.print(f"  {o.regime}: {head}", highlight=False, soft_wrap=soft)
        for part in parts:
            console.print(f"    {part}", highlight=False, soft_wrap=soft)
    rows = sum(sum(1 for _ in o.tuned.assignment.cells()) for o in outcomes)
    console.print(f"{rows} rows written to {storage} (studies tuner:{problem.name}:REGIME; "
                  f"`tuner table show --storage {storage}`)", highlight=False, soft_wrap=soft)


def knob_lines(outcome: RegimeOutcome) -> list[str]:
    """The engine knobs a regime's figures were simulated with and why (a problem with
    ``service.knobs``), and where they are not the engine's own, the tuned capacity held
    against the engine's defaults with the per-bucket configs (issue 40's answer (a))."""
    if not outcome.problem.knobs:
        return []
    axis = outcome.space.axis
    lines = [f"engine knobs (start-up: one setting for every regime): {axis.text(outcome.knobs)}; "
             f"{outcome.deployment}"]
    if axis.size > 1:
        lines.append(f"configs searched under this setting in {outcome.trials_under_knobs} of the study's "
                     f"{outcome.trials} trials (the knob search's share among {axis.size} settings, then "
                     "continued under it alone)")
    defaults = outcome.defaults
    if defaults is not None and defaults.capacity is not None and outcome.tuned.capacity is not None:
        lines.append(capacity_line(outcome.tuned.capacity, defaults.capacity, name="(a)",
                                   label=f"(a) the engine's defaults with the {PER_BUCKET.label} configs"))
    return lines


def _routing_split(outcome: RegimeOutcome, aware: Choice) -> str:
    """The routing-aware baseline's figures and the gain split into its routing-aware
    part (that baseline over THE baseline, timed on uniform routing) and its load-aware
    part (tuned over that baseline)."""
    routing = outcome.problem.regime(outcome.regime).routing
    figures = {"goodput": (outcome.tuned.evaluation.mean, aware.evaluation.mean, outcome.baseline.evaluation.mean)}
    tuned, known, base = outcome.tuned.capacity, aware.capacity, outcome.baseline.capacity
    if tuned and known and base and not (tuned.lower_bound or known.lower_bound or base.lower_bound):
        figures["capacity"] = (tuned.mean, known.mean, base.mean)
    split = "; ".join(f"{what}: routing-aware {ratio(known, base)}, load-aware {ratio(tuned, known)}"
                      for what, (tuned, known, base) in figures.items())
    source = routing.source if routing is not None else "?"
    return (f"{ROUTING_AWARE_LABEL} (MoE kernels timed on this regime's routing, {source}) "
            f"{_rate(aware.evaluation.mean)}{_infeasible(aware.evaluation)}: {split}")


def realized(evaluation: Evaluation) -> str:
    """``realised 8.9, 9.4, 8.1 req/s`` — each seed's judged window, the same for every assignment."""
    if not evaluation.rates:
        return "realised rate unknown"
    return "realised " + ", ".join(f"{r:.3g}" for r in evaluation.rates) + " req/s per seed"


def warmup_text(outcome: RegimeOutcome) -> str:
    """The measurement window of the regime's simulations, and the warm-up served but not judged."""
    warmup = outcome.problem.regime(outcome.regime).warmup_for(outcome.horizon_s)
    return f"{outcome.horizon_s:g} s windows, the first {warmup:g} s served but not judged"


def overload_text(tuned: Evaluation, base: Evaluation) -> str:
    """The overload warning, or "" when neither assignment's backlog grew in any seed."""
    return overload_note(tuned.overloaded, base.overloaded, len(tuned.rates) or len(base.rates))


def _compared(outcome: RegimeOutcome) -> tuple[Evaluation, Evaluation]:
    """The pair whose significance the mechanism line speaks for: the study's objective."""
    if outcome.objective == "capacity" and outcome.tuned.capacity and outcome.baseline.capacity:
        return outcome.tuned.capacity, outcome.baseline.capacity
    return outcome.tuned.evaluation, outcome.baseline.evaluation


def _why(tuned: Evaluation, base: Evaluation) -> str:
    """``why`` when the paired difference is significant at 95%, else say it is not."""
    if paired_delta(tuned, base).excludes_zero:
        return "why"
    return "no significant difference"


def _infeasible(evaluation: Evaluation) -> str:
    return "" if evaluation.feasible else " (infeasible)"
