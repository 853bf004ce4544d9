"""What engine knobs alone give: every knob combination with the per-bucket isolated-fastest configs.

Issue 40 asks for four answers on the same seeded workloads; this is the first two:
(a) the engine's defaults (each knob list's first value) with the per-bucket
isolated-fastest configs, what a user runs today, and (b) the best knob combination with
those same configs, what a knob-only tuner (vLLM's ``auto_tune.sh``, SGLang's server
argument search) gives. The configs are the baseline's whatever the knobs: the
isolated-fastest config of a bucket is timed alone at the bucket's shape, which no knob
changes, so only the knobs vary between the rows. Each combination is a deployment of
its own (:meth:`Problem.with_knobs`), simulated on the same seeds, and compared with the
defaults by the paired difference per seed, on goodput at the regime's rate and on
capacity at the SLO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..problem.knobs import KnobValue
from ..problem.model import Problem
from ..stats import Delta, paired_delta
from .baselines import PER_BUCKET
from .evaluate import Evaluation, evaluate
from .space import JointSpace


@dataclass(frozen=True)
class KnobAnswer:
    """One knob combination in one regime: goodput at the regime's rate and capacity at
    the SLO, each with its paired difference from the defaults (the first answer)."""

    values: dict[str, KnobValue]
    goodput: Evaluation
    capacity: Evaluation
    goodput_delta: Delta
    capacity_delta: Delta

    @property
    def is_default(self) -> bool:
        return not self.goodput_delta.values and not self.capacity_delta.values


def sweep_knobs(problem: Problem, regime: str, seeds: Sequence[int], horizon_s: float | None,
                progress: Callable[[int, int], None] | None = None,
                capacities: dict[tuple, Evaluation] | None = None) -> list[KnobAnswer]:
    """Every combination of ``problem``'s knobs in ``regime``, the defaults first.

    ``capacities``, shared across the regimes of one sweep, keeps each combination's
    capacity per traffic shape: capacity does not depend on the regime's rate, so regimes
    that differ only in load search it once (as ``tuner tune`` does).

    Raises:
        SearchError: the problem lists no knobs, or some bucket has no legal config.
    """
    from ..errors import SearchError

    problem.regime(regime)
    if not problem.knobs:
        raise SearchError(f"{problem.path}: service.knobs lists no engine knob to sweep (e.g. "
                          "max_num_seqs: [256, 128, 512]; see docs/problem-files.md#engine-knobs)")
    baseline = PER_BUCKET.assignment(JointSpace.of(problem))
    combinations = list(problem.knobs.combinations())
    answers: list[KnobAnswer] = []
    memo = {} if capacities is None else capacities
    shape = problem.regime(regime).shape_key
    for done, values in enumerate(combinations):
        variant = problem.with_knobs(values)
        goodput = evaluate(variant, baseline, regime, seeds, horizon_s, metric="goodput")
        key = (shape, horizon_s, tuple(seeds), tuple(values.items()))
        capacity = memo.get(key)
        if capacity is None:
            capacity = memo[key] = evaluate(variant, baseline, regime, seeds, horizon_s, metric="capacity")
        if answers:
            first = answers[0]
            deltas = paired_delta(goodput, first.goodput), paired_delta(capacity, first.capacity)
        else:
            deltas = Delta((), 0.95), Delta((), 0.95)
        answers.append(KnobAnswer(values, goodput, capacity, *deltas))
        if progress is not None:
            progress(done + 1, len(combinations))
    return answers


def best_by_capacity(answers: Sequence[KnobAnswer]) -> KnobAnswer:
    """The combination with the highest mean capacity at the SLO (the defaults on a tie)."""
    return max(answers, key=lambda answer: (answer.capacity.mean, answer is answers[0]))
