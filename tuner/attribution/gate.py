"""The regression gate: a per-regime non-inferiority test on paired seeds.

With ``d_i = m(CAND, seed i) - m(BASE, seed i)`` for the gate's metric ``m`` (goodput, or
capacity at the SLO, which does not depend on the window's length) and ``B`` the base's mean, a regime passes when the one-sided ``confidence`` lower bound of mean(d) is at
least ``-tolerance × B``: we are that confident the candidate is not worse by more than
the tolerance. It fails otherwise (including when the seeds are too noisy to tell).
The gate passes when every regime passes; regimes are judged independently.

A failing regime is attributed by (operator, bucket) cell and summarised per operator:
the blame names the operator whose changed buckets, substituted together, cost the most
goodput, and the bucket when one bucket is responsible (see :mod:`.attribute`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..problem.scenario import Scenario
from .attribute import Attribution, Comparison, attribute, compare


@dataclass(frozen=True)
class RegimeVerdict:
    """The gate's verdict on one regime: passed when the one-sided lower confidence bound
    of the candidate's difference is above ``-tolerance`` times the base's figure."""

    comparison: Comparison
    tolerance: float
    confidence: float
    lower_bound: float  # one-sided lower confidence bound of the mean goodput difference (req/s)
    passed: bool
    attribution: Attribution | None = None

    @property
    def regime(self) -> str:
        return self.comparison.regime

    @property
    def base_value(self) -> float:
        return self.comparison.base_runs.mean

    @property
    def relative_change(self) -> float | None:
        b = self.base_value
        return None if b == 0 else self.comparison.total.mean / b

    @property
    def relative_lower_bound(self) -> float | None:
        b = self.base_value
        return None if b == 0 else self.lower_bound / b


@dataclass(frozen=True)
class GateResult:
    """The gate over every regime asked for: it passes when every regime does."""

    verdicts: tuple[RegimeVerdict, ...]  # sorted by regime

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def failed(self) -> tuple[RegimeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)


def decide(comparison: Comparison, tolerance: float, confidence: float) -> RegimeVerdict:
    """The verdict on one regime's comparison (see :class:`RegimeVerdict`).

    Raises:
        TunerError: fewer than 2 seeds (no confidence bound).
    """
    total = comparison.total
    lower = total.lower_bound(confidence)
    if lower is None:
        raise TunerError("the gate needs at least 2 seeds")
    margin = tolerance * comparison.base_runs.mean
    return RegimeVerdict(comparison, tolerance, confidence, lower, lower >= -margin)


def gate(problem: Problem, base: Mapping[str, Assignment], candidate: Mapping[str, Assignment],
         seeds: Sequence[int], horizon_s: float | None = None, tolerance: float = 0.02, confidence: float = 0.95,
         attribute_all: bool = False, metric: str = "goodput") -> GateResult:
    """Judge every regime of ``base`` (``regime -> assignment``) by ``metric`` — goodput at
    the regime's rates, or capacity at the SLO on its traffic shape; attribute the failing
    ones by bucket (every one with ``attribute_all``, as the Markdown report needs)."""
    if not 0 <= tolerance < 1:
        raise TunerError(f"--tolerance must be in [0, 1) but got {tolerance}")
    if not 0.5 <= confidence < 1:
        raise TunerError(f"--confidence must be in [0.5, 1) but got {confidence}")
    if len(seeds) < 2:
        raise TunerError(f"--seeds must be at least 2 for a paired comparison but got {len(seeds)}")
    verdicts = []
    for regime in sorted(base):
        scenario = Scenario.of(problem, regime, seeds, horizon_s)
        comparison = compare(scenario, base[regime], candidate[regime], confidence, metric)
        verdict = decide(comparison, tolerance, confidence)
        if attribute_all or not verdict.passed:
            attribution = attribute(scenario, base[regime], candidate[regime], confidence, comparison=comparison,
                                    by_bucket=True)
            verdict = RegimeVerdict(comparison, tolerance, confidence, verdict.lower_bound, verdict.passed,
                                    attribution)
        verdicts.append(verdict)
    return GateResult(tuple(verdicts))
