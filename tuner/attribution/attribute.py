"""Substitution attribution on common random numbers.

For one regime, a base assignment A and a candidate B (each one config per operator and
shape bucket) differ in some (operator, bucket) cells. They are grouped into *units*: by
default one per changed operator, all of its changed buckets substituted together; with
``by_bucket`` one per changed cell (labelled ``op@LABEL``, e.g. ``qkv@M17..32``). Units
are sorted by operator name, then bucket. For every unit:

* **add**: ``goodput(A with the unit's cells := B's) - goodput(A)`` — the change alone,
  on the base;
* **remove**: ``goodput(B) - goodput(B with the unit's cells := A's)`` — what the change
  is worth with all the others already made;
* **effect**: their per-seed average (for two units this is the Shapley value);
* **interaction**: ``(goodput(B) - goodput(A)) - Σ add`` — what no single unit explains.

Operators are always summarised as well (:attr:`Attribution.operators`): each changed
operator's buckets substituted at once, so by bucket the summary is the default unit.
The blamed operator is the one whose summary effect is most negative; a bucket is named
with it when one bucket is responsible (:attr:`Attribution.blamed_cell`).

Every assignment runs on the same seeds (the workload depends only on regime, seed and
horizon), so differences are paired and identical assignments give identical metrics.
Each distinct assignment is simulated once per seed within a call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..problem.scenario import Scenario
from ..search.capacity import capacity_at
from ..sim import Metrics, simulate
from ..stats import Delta, paired


@dataclass(frozen=True)
class Runs:
    """Per-seed figures of one assignment in one regime: ``values`` in the compared metric
    (goodput, or capacity at the SLO), latency and memory of the run behind each."""

    values: tuple[float, ...]
    latency_p99: tuple[float | None, ...]
    memory_peak: tuple[float, ...]
    overloaded: int = 0

    @staticmethod
    def of(metrics: Sequence[Metrics], values: Sequence[float] | None = None) -> Runs:
        """Goodput runs (``values`` None: the seeds' overload flags count) or another metric's."""
        return Runs(tuple(m.goodput_rps for m in metrics) if values is None else tuple(values),
                    tuple(m.latency_p99_s for m in metrics), tuple(m.memory_peak_bytes for m in metrics),
                    sum(m.overloaded for m in metrics) if values is None else 0)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)


@dataclass(frozen=True)
class Comparison:
    """Base and candidate in one regime on the same seeds."""

    regime: str
    seeds: tuple[int, ...]
    horizon_s: float | None
    base: Assignment
    candidate: Assignment
    base_runs: Runs
    candidate_runs: Runs
    confidence: float
    metric: str = "goodput"

    @property
    def total(self) -> Delta:
        return paired(self.candidate_runs.values, self.base_runs.values, self.confidence)

    @property
    def changed(self) -> tuple[tuple[str, int], ...]:
        """The (operator, bucket) cells whose configs differ, by operator name then bucket."""
        return _changed(self.base, self.candidate)

    @property
    def changed_ops(self) -> tuple[str, ...]:
        """The operators with a changed bucket, sorted by name."""
        return tuple(dict.fromkeys(op for op, _ in self.changed))


@dataclass(frozen=True)
class Effect:
    """One unit's substitution, both ways.

    Attributes:
        op: the operator.
        buckets: the buckets substituted (the operator's changed ones, or one).
        bucket_labels: their labels (``""`` for an operator's only bucket).
        label: the unit's name: ``op``, or ``op@LABEL`` for one bucket by bucket.
        base_config, candidate_config: the configs of those buckets in base and
            candidate: a name when they share one, else ``LABEL:name`` per bucket.
        add, remove: see the module doc.
    """

    op: str
    buckets: tuple[int, ...]
    bucket_labels: tuple[str, ...]
    label: str
    base_config: str
    candidate_config: str
    add: Delta
    remove: Delta

    @property
    def effect(self) -> Delta:
        return Delta(tuple((a + r) / 2 for a, r in zip(self.add.values, self.remove.values)), self.add.confidence)

    @property
    def cell_label(self) -> str | None:
        """``op@LABEL`` when the unit is one bucket of an operator with several, else None."""
        if len(self.buckets) == 1 and self.bucket_labels[0]:
            return f"{self.op}@{self.bucket_labels[0]}"
        return None


@dataclass(frozen=True)
class Attribution:
    """A regime's goodput difference between two assignments, with the effect of each
    changed unit (operator, or bucket with ``by_bucket``) substituted alone."""

    comparison: Comparison
    effects: tuple[Effect, ...]  # the units, sorted by operator name then bucket
    operators: tuple[Effect, ...]  # per changed operator, all its changed buckets at once; sorted by name
    by_bucket: bool = False

    @property
    def regime(self) -> str:
        return self.comparison.regime

    @property
    def total(self) -> Delta:
        return self.comparison.total

    @property
    def interaction(self) -> Delta:
        total = self.total.values
        sums = [sum(e.add.values[i] for e in self.effects) for i in range(len(total))]
        return Delta(tuple(t - s for t, s in zip(total, sums)), self.total.confidence)

    @property
    def ranked(self) -> tuple[Effect, ...]:
        """The units, most harmful first (lowest mean effect); ties by operator, then bucket."""
        return _ranked(self.effects)

    @property
    def ranked_operators(self) -> tuple[Effect, ...]:
        """The operator summaries, most harmful first; ties by operator name."""
        return _ranked(self.operators)

    @property
    def blamed_operator(self) -> Effect | None:
        """The operator summary that costs the most goodput, or None when none costs any."""
        ranked = self.ranked_operators
        return ranked[0] if ranked and ranked[0].effect.mean < 0 else None

    @property
    def blamed(self) -> str | None:
        """The name of the operator whose change costs the most goodput, or None."""
        op = self.blamed_operator
        return None if op is None else op.op

    @property
    def blamed_cell(self) -> Effect | None:
        """The one bucket responsible for the blamed operator's loss, as a one-bucket
        :class:`Effect`: the operator's only changed bucket (when it has several buckets),
        or, by bucket, the only one of its cells whose effect is negative with an interval
        that excludes zero. None otherwise (no blame, one bucket in all, or several or no
        cells to blame, or one seed and no interval)."""
        op = self.blamed_operator
        if op is None:
            return None
        if len(op.buckets) == 1:
            return op if op.bucket_labels[0] else None
        if not self.by_bucket:
            return None
        harmful = [e for e in self.effects
                   if e.op == op.op and e.effect.mean < 0 and e.effect.excludes_zero]
        return harmful[0] if len(harmful) == 1 else None


def _ranked(effects: Sequence[Effect]) -> tuple[Effect, ...]:
    return tuple(sorted(effects, key=lambda e: (e.effect.mean, e.op, e.buckets)))


#: Runs many ``(assignment, seed)`` simulations of one regime and horizon at once (in
#: worker processes, say), returning their metrics in the same order.
BatchSimulator = Callable[[Sequence[tuple[Assignment, int]]], Sequence[Metrics]]


class _Runner:
    """Simulations of one call, each distinct (assignment, seed) once (local, never shared)."""

    def __init__(self, scenario: Scenario, batch: BatchSimulator | None = None, metric: str = "goodput") -> None:
        self.problem, self.regime, self.seeds, self.horizon_s = (scenario.problem, scenario.regime, scenario.seeds,
                                                                 scenario.horizon_s)
        self.batch = batch if metric == "goodput" else None  # a batch returns one run per seed
        self.metric = metric
        self._done: dict[Assignment, Runs] = {}

    def prefetch(self, assignments: Sequence[Assignment]) -> None:
        """Simulate every assignment not yet run in one batch (when a batch simulator is set)."""
        todo = [a for a in dict.fromkeys(assignments) if a not in self._done]
        if self.batch is None or not todo:
            return
        metrics = list(self.batch([(a, s) for a in todo for s in self.seeds]))
        n = len(self.seeds)
        for i, assignment in enumerate(todo):
            self._done[assignment] = Runs.of(metrics[i * n:(i + 1) * n])

    def seed(self, assignment: Assignment, runs: Runs) -> None:
        self._done[assignment] = runs

    def __call__(self, assignment: Assignment) -> Runs:
        if assignment not in self._done:
            if self.metric == "capacity":
                found = [capacity_at(self.problem, assignment, self.regime, s, self.horizon_s) for s in self.seeds]
                runs = [f.at_capacity.metrics if f.at_capacity is not None else
                        simulate(self.problem, assignment, self.regime, seed=s, horizon_s=self.horizon_s).metrics
                        for f, s in zip(found, self.seeds)]
                self._done[assignment] = Runs.of(runs, [f.capacity_rps for f in found])
            else:
                self._done[assignment] = Runs.of([
                    simulate(self.problem, assignment, self.regime, seed=s, horizon_s=self.horizon_s).metrics
                    for s in self.seeds
                ])
        return self._done[assignment]


def _changed(base: Assignment, candidate: Assignment) -> tuple[tuple[str, int], ...]:
    """The cells whose configs differ, sorted by operator name then bucket (the one rule
    for what changed, shared by :attr:`Comparison.changed` and the units)."""
    return tuple(sorted(base.changed(candidate)))


Unit = tuple[str, tuple[int, ...]]


def _units(base: Assignment, candidate: Assignment, by_bucket: bool) -> tuple[list[Unit], list[Unit]]:
    """``(units, operators)``: the substitution units and the per-operator summaries."""
    per_op: dict[str, list[int]] = {}
    for op, bucket in _changed(base, candidate):
        per_op.setdefault(op, []).append(bucket)
    operators = [(op, tuple(buckets)) for op, buckets in per_op.items()]
    if not by_bucket:
        return operators, operators
    return [(op, (bucket,)) for op, buckets in operators for bucket in buckets], operators


def _swap(target: Assignment, source: Assignment, unit: Unit) -> Assignment:
    """``target`` with the unit's cells taken from ``source``."""
    op, buckets = unit
    return target.replace({(op, b): source.config(op, b) for b in buckets})


def _configs_text(problem: Problem, assignment: Assignment, unit: Unit) -> str:
    op, buckets = unit
    configs = [assignment.config(op, b) for b in buckets]
    if all(c == configs[0] for c in configs):
        return configs[0].name
    labels = problem.operator(op).bucketing.buckets
    return " ".join(f"{labels[b].label}:{c.name}" for b, c in zip(buckets, configs))


def compare(scenario: Scenario, base: Assignment, candidate: Assignment, confidence: float = 0.95,
            metric: str = "goodput") -> Comparison:
    """Simulate base and candidate on the scenario's seeds (``metric``: goodput, or capacity at the SLO)."""
    run = _Runner(scenario, metric=metric)
    return _compare(run, base, candidate, confidence)


def _compare(run: _Runner, base: Assignment, candidate: Assignment, confidence: float) -> Comparison:
    return Comparison(regime=run.regime, seeds=run.seeds, horizon_s=run.horizon_s, base=base,
                      candidate=candidate, base_runs=run(base), candidate_runs=run(candidate),
                      confidence=confidence, metric=run.metric)


def attribute(scenario: Scenario, base: Assignment, candidate: Assignment, confidence: float = 0.95,
              comparison: Comparison | None = None, batch: BatchSimulator | None = None,
              by_bucket: bool = False, metric: str = "goodput") -> Attribution:
    """Attribute the candidate's goodput change to its config changes (see the module doc).

    ``by_bucket`` makes each changed (operator, bucket) cell a unit instead of each changed
    operator; ``comparison`` (from :func:`compare`, same arguments) saves re-running base
    and candidate; ``batch`` runs all the simulations at once (the dashboard spreads them
    over processes).
    """
    problem = scenario.problem
    run = _Runner(scenario, batch, comparison.metric if comparison else metric)
    if comparison is not None:
        run.seed(base, comparison.base_runs)
        run.seed(candidate, comparison.candidate_runs)
    units, operators = _units(base, candidate, by_bucket)
    everything = list(dict.fromkeys(units + operators))
    run.prefetch([base, candidate, *(_swap(base, candidate, u) for u in everything),
                  *(_swap(candidate, base, u) for u in everything)])
    if comparison is None:
        comparison = _compare(run, base, candidate, confidence)
    base_g, cand_g = comparison.base_runs.values, comparison.candidate_runs.values

    def effect(unit: Unit, as_cell: bool) -> Effect:
        op, buckets = unit
        labels = tuple(problem.operator(op).bucketing.buckets[b].label for b in buckets)
        added = run(_swap(base, candidate, unit)).values
        removed = run(_swap(candidate, base, unit)).values
        label = f"{op}@{labels[0]}" if as_cell and labels[0] else op
        return Effect(op, buckets, labels, label, _configs_text(problem, base, unit),
                      _configs_text(problem, candidate, unit),
                      paired(added, base_g, confidence), paired(cand_g, removed, confidence))

    summaries = tuple(effect(u, False) for u in operators)
    effects = tuple(effect(u, True) for u in units) if by_bucket else summaries
    return Attribution(comparison, effects, summaries, by_bucket)
