"""What engine knobs give, alone and with the configs tuned under them.

Issue 40 asks for four answers on the same seeded workloads. :func:`sweep_knobs` gives the
first two for every combination:
(a) the engine's defaults (each knob list's first value) with the per-bucket
isolated-fastest configs, what a user runs today, and (b) the best knob combination with
those same configs, what a knob-only tuner (vLLM's ``auto_tune.sh``, SGLang's server
argument search) gives. The configs are the baseline's whatever the knobs: the
isolated-fastest config of a bucket is timed alone at the bucket's shape, which no knob
changes, so only the knobs vary between the rows. Each combination is a deployment of
its own (:meth:`Problem.with_knobs`), simulated on the same seeds, and compared with the
defaults by the paired difference per seed, on goodput at the regime's rate and on
capacity at the SLO. :func:`four_answers` adds (c) the configs tuned for the defaults and
(d) the configs tuned for each combination, the best kept: a study per combination, knobs
by grid and configs by Optuna, each combination's configs searched in full (``tuner tune``
searches both in one study per regime instead: :mod:`tuner.search.knob_axis`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..problem.knobs import KnobValue
from ..problem.model import Problem
from ..problem.scenario import Scenario
from ..stats import Delta, paired_delta
from .baselines import PER_BUCKET
from .evaluate import Evaluation, evaluate
from .ranking import Choice
from .settings import TuneSettings
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
    is_default: bool = False


def sweep_knobs(scenario: Scenario, progress: Callable[[int, int], None] | None = None,
                capacities: dict[tuple, Evaluation] | None = None) -> list[KnobAnswer]:
    """Every combination of the scenario's problem's knobs in its regime, the defaults first.

    ``capacities``, shared across the regimes of one sweep, keeps each combination's
    capacity per traffic shape: capacity does not depend on the regime's rate, so regimes
    that differ only in load search it once (as ``tuner tune`` does).

    Raises:
        SearchError: the problem lists no knobs, or some bucket has no legal config.
    """
    problem, shape = scenario.problem, scenario.spec.shape_key
    if not problem.knobs:
        raise _no_knobs(problem)
    baseline = PER_BUCKET.assignment(JointSpace.of(problem))
    combinations = list(problem.knobs.combinations())
    answers: list[KnobAnswer] = []
    memo = {} if capacities is None else capacities
    for done, values in enumerate(combinations):
        variant = scenario.on(problem.with_knobs(values))
        goodput = evaluate(variant, baseline, metric="goodput")
        key = (shape, scenario.horizon_s, scenario.seeds, tuple(values.items()))
        capacity = memo.get(key)
        if capacity is None:
            capacity = memo[key] = evaluate(variant, baseline, metric="capacity")
        if answers:
            first = answers[0]
            deltas = paired_delta(goodput, first.goodput), paired_delta(capacity, first.capacity)
        else:
            deltas = Delta((), 0.95), Delta((), 0.95)
        answers.append(KnobAnswer(values, goodput, capacity, *deltas, is_default=not answers))
        if progress is not None:
            progress(done + 1, len(combinations))
    return answers


def best_by_capacity(answers: Sequence[KnobAnswer]) -> KnobAnswer:
    """The combination with the highest mean capacity at the SLO (the defaults on a tie)."""
    return max(answers, key=lambda answer: (answer.capacity.mean, answer is answers[0]))


@dataclass(frozen=True)
class Answer:
    """One of issue 40's four answers in a regime: the knob values and the assignment,
    with goodput at the regime's rate and capacity at the SLO (per seed)."""

    label: str
    values: dict[str, KnobValue]
    choice: Choice

    @property
    def capacity(self) -> Evaluation:
        assert self.choice.capacity is not None, "a regime's outcome fills in both figures"
        return self.choice.capacity


@dataclass(frozen=True)
class FourAnswers:
    """(a) the engine's defaults with the per-bucket isolated-fastest configs, what a user
    runs today; (b) the best knobs with those configs, a knob-only tuner; (c) the
    defaults with the configs tuned for them, today's tuned table; (d) the best knobs with
    the configs tuned for them. "Best" is the highest mean capacity at the SLO over the
    combinations, on the same seeds."""

    regime: str
    answers: tuple[Answer, Answer, Answer, Answer]

    def difference(self, after: Answer, before: Answer) -> Delta:
        """``after``'s capacity minus ``before``'s, paired by seed."""
        return paired_delta(after.capacity, before.capacity)

    def against_defaults(self, answer: Answer) -> Delta:
        """``answer``'s capacity minus (a)'s, paired by seed."""
        return self.difference(answer, self.answers[0])

    def interaction(self) -> Delta:
        """(d) − (b) − (c) + (a) per seed: what knobs and configs give together beyond the sum
        of what each gives alone (0: they add up)."""
        a, b, c, d = (answer.capacity.values for answer in self.answers)
        return Delta(tuple(dv - bv - cv + av for av, bv, cv, dv in zip(a, b, c, d)), 0.95)


def four_answers(problem: Problem, regime: str, settings: TuneSettings,
                 progress: Callable[[int, int], None] | None = None) -> FourAnswers:
    """Tune the configs under every knob combination (a study per combination, in memory,
    the same seeds and trials each), and read issue 40's four answers from the outcomes:
    a nested search, knobs by grid and configs by Optuna (``tuner tune`` runs one study over both).

    Raises:
        SearchError: the problem lists no knobs, or some combination has no feasible assignment.
    """
    import optuna

    from .outcome import tune_regime

    problem.regime(regime)
    if not problem.knobs:
        raise _no_knobs(problem)
    combinations = list(problem.knobs.combinations())
    outcomes = []
    for done, values in enumerate(combinations):
        outcome = tune_regime(problem.with_knobs(values), regime, optuna.storages.InMemoryStorage(), settings)
        outcomes.append((values, outcome))
        if progress is not None:
            progress(done + 1, len(combinations))

    def best(pick: Callable[[Any], Choice]) -> tuple[dict[str, KnobValue], Choice]:
        values, outcome = max(outcomes, key=lambda pair: (_capacity(pick(pair[1])), pair is outcomes[0]))
        return values, pick(outcome)

    default_values, default = outcomes[0]
    return FourAnswers(regime, (
        Answer("(a) engine defaults, per-bucket isolated-fastest configs", default_values, default.baseline),
        Answer("(b) best knobs, per-bucket isolated-fastest configs", *best(lambda o: o.baseline)),
        Answer("(c) engine defaults, tuned configs", default_values, default.tuned),
        Answer("(d) best knobs, configs tuned with them", *best(lambda o: o.tuned)),
    ))


def _capacity(choice: Choice) -> float:
    return choice.capacity.mean if choice.capacity is not None else float("-inf")


def _no_knobs(problem: Problem) -> Exception:
    from ..errors import SearchError

    return SearchError(f"{problem.path}: service.knobs lists no engine knob to sweep (e.g. "
                       "max_num_seqs: [256, 128, 512]; see docs/problem-files.md#engine-knobs)")
