"""Substitution attribution on common random numbers.

For one regime, base assignment A and candidate B, and every operator ``op`` whose config
differs (sorted by name):

* **add**: ``goodput(A with op := B[op]) - goodput(A)`` — the change alone, on the base;
* **remove**: ``goodput(B) - goodput(B with op := A[op])`` — what the change is worth
  with all the others already made;
* **effect**: their per-seed average (for two operators this is the Shapley value);
* **interaction**: ``(goodput(B) - goodput(A)) - Σ add`` — what no single change explains.

Every assignment runs on the same seeds (the workload depends only on regime, seed and
horizon), so differences are paired and identical assignments give identical metrics.
Each distinct assignment is simulated once per seed within a call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..problem.model import Config, Problem
from ..sim import Metrics, simulate
from .stats import Delta, paired

Assignment = Mapping[str, Config]


@dataclass(frozen=True)
class Runs:
    """Per-seed figures of one assignment in one regime."""

    goodput: tuple[float, ...]
    latency_p99: tuple[float | None, ...]
    memory_peak: tuple[float, ...]

    @staticmethod
    def of(metrics: Sequence[Metrics]) -> Runs:
        return Runs(tuple(m.goodput_rps for m in metrics), tuple(m.latency_p99_s for m in metrics),
                    tuple(m.memory_peak_bytes for m in metrics))

    @property
    def mean_goodput(self) -> float:
        return sum(self.goodput) / len(self.goodput)


@dataclass(frozen=True)
class Comparison:
    """Base and candidate in one regime on the same seeds."""

    regime: str
    seeds: tuple[int, ...]
    horizon_s: float | None
    base: Mapping[str, str]
    candidate: Mapping[str, str]
    base_runs: Runs
    candidate_runs: Runs
    confidence: float

    @property
    def total(self) -> Delta:
        return paired(self.candidate_runs.goodput, self.base_runs.goodput, self.confidence)

    @property
    def changed(self) -> tuple[str, ...]:
        return _changed(self.base, self.candidate)


@dataclass(frozen=True)
class Effect:
    """One operator's substitution, both ways."""

    op: str
    base_config: str
    candidate_config: str
    add: Delta
    remove: Delta

    @property
    def effect(self) -> Delta:
        return Delta(tuple((a + r) / 2 for a, r in zip(self.add.values, self.remove.values)), self.add.confidence)


@dataclass(frozen=True)
class Attribution:
    comparison: Comparison
    effects: tuple[Effect, ...]  # sorted by operator name

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
        """Most harmful first (lowest mean effect); ties by operator name."""
        return tuple(sorted(self.effects, key=lambda e: (e.effect.mean, e.op)))

    @property
    def blamed(self) -> str | None:
        """The operator whose change costs the most goodput, or None when none costs any."""
        ranked = self.ranked
        return ranked[0].op if ranked and ranked[0].effect.mean < 0 else None


def _key(assignment: Assignment) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((op, c.name) for op, c in assignment.items()))


#: Runs many ``(assignment, seed)`` simulations of one regime and horizon at once (in
#: worker processes, say), returning their metrics in the same order.
BatchSimulator = Callable[[Sequence[tuple[Assignment, int]]], Sequence[Metrics]]


class _Runner:
    """Simulations of one call, each distinct (assignment, seed) once (local, never shared)."""

    def __init__(self, problem: Problem, regime: str, seeds: Sequence[int], horizon_s: float | None,
                 batch: BatchSimulator | None = None) -> None:
        self.problem, self.regime, self.seeds, self.horizon_s = problem, regime, tuple(seeds), horizon_s
        self.batch = batch
        self._done: dict[tuple[tuple[str, str], ...], Runs] = {}

    def prefetch(self, assignments: Sequence[Assignment]) -> None:
        """Simulate every assignment not yet run in one batch (when a batch simulator is set)."""
        todo = list({_key(a): a for a in assignments if _key(a) not in self._done}.values())
        if self.batch is None or not todo:
            return
        metrics = list(self.batch([(a, s) for a in todo for s in self.seeds]))
        n = len(self.seeds)
        for i, assignment in enumerate(todo):
            self._done[_key(assignment)] = Runs.of(metrics[i * n:(i + 1) * n])

    def seed(self, key: tuple[tuple[str, str], ...], runs: Runs) -> None:
        self._done[key] = runs

    def __call__(self, assignment: Assignment) -> Runs:
        key = _key(assignment)
        if key not in self._done:
            self._done[key] = Runs.of([
                simulate(self.problem, assignment, self.regime, seed=s, horizon_s=self.horizon_s).metrics
                for s in self.seeds
            ])
        return self._done[key]


def _names(assignment: Assignment) -> dict[str, str]:
    return {op: assignment[op].name for op in sorted(assignment)}


def _changed(base: Mapping[str, str], candidate: Mapping[str, str]) -> tuple[str, ...]:
    """The operators whose config names differ, sorted."""
    return tuple(sorted(op for op in base if base[op] != candidate[op]))


def compare(problem: Problem, base: Assignment, candidate: Assignment, regime: str, seeds: Sequence[int],
            horizon_s: float | None = None, confidence: float = 0.95) -> Comparison:
    """Simulate base and candidate on the same seeds."""
    run = _Runner(problem, regime, seeds, horizon_s)
    return _compare(run, base, candidate, confidence)


def _compare(run: _Runner, base: Assignment, candidate: Assignment, confidence: float) -> Comparison:
    return Comparison(regime=run.regime, seeds=run.seeds, horizon_s=run.horizon_s, base=_names(base),
                      candidate=_names(candidate), base_runs=run(base), candidate_runs=run(candidate),
                      confidence=confidence)


def attribute(problem: Problem, base: Assignment, candidate: Assignment, regime: str, seeds: Sequence[int],
              horizon_s: float | None = None, confidence: float = 0.95,
              comparison: Comparison | None = None, batch: BatchSimulator | None = None) -> Attribution:
    """Attribute the candidate's goodput change to its operator changes (see the module doc).

    ``comparison`` (from :func:`compare`, same arguments) saves re-running base and candidate;
    ``batch`` runs all the simulations at once (the dashboard spreads them over processes).
    """
    run = _Runner(problem, regime, seeds, horizon_s, batch)
    if comparison is not None:
        run.seed(_key(base), comparison.base_runs)
        run.seed(_key(candidate), comparison.candidate_runs)
    changed = _changed(_names(base), _names(candidate))
    run.prefetch([base, candidate, *({**base, op: candidate[op]} for op in changed),
                  *({**candidate, op: base[op]} for op in changed)])
    if comparison is None:
        comparison = _compare(run, base, candidate, confidence)
    base_g, cand_g = comparison.base_runs.goodput, comparison.candidate_runs.goodput
    effects = []
    for op in comparison.changed:
        added = run({**base, op: candidate[op]}).goodput
        removed = run({**candidate, op: base[op]}).goodput
        effects.append(Effect(op, base[op].name, candidate[op].name,
                              paired(added, base_g, confidence), paired(cand_g, removed, confidence)))
    return Attribution(comparison, tuple(effects))
