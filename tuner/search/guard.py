"""The guard between a study and the table: a regime stores the study's configs only where
they demonstrably beat what the user would otherwise run.

Why: a study maximises its objective at the regime's rate and breaks ties by median
latency, and nothing held its winner to THE baseline afterwards — the per-bucket
isolated-fastest configs, what ``triton.autotune(key=...)`` keeps. Two shipped problems
stored tables that served less traffic than it (toy_llm at 0.975x its capacity), chosen
for a latency that no interval separated. FlashInfer's autotuner switches away from its
default only beyond a margin (flashinfer#3555); here the margin is the paired 95%
interval over the seeds both were simulated on.

The rule, per regime: the study's assignment is stored only if

* its objective (goodput, or capacity at the SLO), or its capacity at the SLO, beats the
  baseline's with the paired interval above zero, and
* neither goodput, nor capacity at the SLO, nor the 90th-percentile latency (where both
  were measured) is worse than the baseline's beyond its paired interval;

otherwise the baseline's configs are stored, with the reason. Capacity counts as a gain
under a goodput study too: below saturation both assignments serve the regime's rate and
goodput ties, while the capacity says which keeps headroom (the seed example's bursty
regime: goodput tied at 300 req/s, capacity +66%); with no loss anywhere it is never
worse than the baseline. One seed gives no interval, so it can show no gain: tune with
two or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..stats import Delta, paired, paired_delta
from .baselines import PER_BUCKET
from .ranking import Choice

#: What the guard compares, as people read it.
LABELS = {"goodput": "goodput", "capacity": "capacity at the SLO", "p90": "p90 latency"}


@dataclass(frozen=True)
class Figure:
    """One paired comparison, tuned − baseline, and which way is better."""

    name: str
    delta: Delta
    unit: str
    higher_is_better: bool = True

    @property
    def gain(self) -> bool:
        """Better beyond the interval (never with one seed: there is no interval)."""
        low, high = self.delta.low, self.delta.high
        if low is None or high is None:
            return False
        return low > 0 if self.higher_is_better else high < 0

    @property
    def loss(self) -> bool:
        """Worse beyond the interval."""
        low, high = self.delta.low, self.delta.high
        if low is None or high is None:
            return False
        return high < 0 if self.higher_is_better else low > 0

    def __str__(self) -> str:
        return f"{LABELS[self.name]} {self.delta} {self.unit}"


@dataclass(frozen=True)
class Guarded:
    """What a regime stores: ``stored`` is the study's choice, or THE baseline's with
    ``reason`` saying why (None when the study's configs passed, or equal the baseline's)."""

    stored: Choice
    reason: str | None = None

    @property
    def kept_baseline(self) -> bool:
        return self.reason is not None


def guard(tuned: Choice, baseline: Choice, objective: str) -> Guarded:
    """The choice a regime stores, by the rule in the module's docstring."""
    if tuned.assignment == baseline.assignment or not baseline.evaluation.feasible:
        return Guarded(tuned)  # nothing to guard, or no baseline to lose to
    refusal = _refusal(figures(tuned, baseline), objective)
    if refusal is None:
        return Guarded(tuned)
    return Guarded(baseline, f"kept the {PER_BUCKET.label} configs: {refusal}")


def figures(tuned: Choice, baseline: Choice) -> dict[str, Figure]:
    """The paired comparisons both choices allow: goodput always; capacity where both
    searches found one (not a lower bound); p90 latency where both measured it on every
    seed (in ms) and neither was overloaded on any: where the backlog grows through the
    window, a request's latency grows with how late in the window it arrives, so the p90
    measures the window's length as much as the service, the same caveat goodput carries
    there (compare capacities). Issue 40: at 20 req/s on the Llama-2-7B deployment both the
    engine's defaults and 256 sequences fell behind on every seed, and a +220 ± 140 ms p90
    set aside a setting that served 22% more at the SLO."""
    out = {"goodput": Figure("goodput", paired_delta(tuned.evaluation, baseline.evaluation), "req/s")}
    a, b = tuned.capacity, baseline.capacity
    if a is not None and b is not None and a.feasible and b.feasible and not (a.lower_bound or b.lower_bound):
        out["capacity"] = Figure("capacity", paired_delta(a, b), "req/s")
    tails_a, tails_b = tuned.evaluation.latency_p90_s, baseline.evaluation.latency_p90_s
    steady = not (tuned.evaluation.overloaded or baseline.evaluation.overloaded)
    if steady and tails_a and len(tails_a) == len(tails_b) and all(map(math.isfinite, tails_a + tails_b)):
        out["p90"] = Figure("p90", paired([1e3 * t for t in tails_a], [1e3 * t for t in tails_b], 0.95), "ms",
                            higher_is_better=False)
    return out


def _refusal(compared: dict[str, Figure], objective: str) -> str | None:
    """Why the study's configs may not be stored, or None."""
    main = compared.get(objective)
    if main is None:
        return f"no {LABELS[objective]} of both to compare"
    if main.delta.half_width is None:
        return f"{main} from one seed shows no gain (no interval; tune with --seeds 2 or more)"
    # a capacity gain counts under a goodput study too (see the module's docstring)
    candidates = [main] if objective == "capacity" or "capacity" not in compared else [main, compared["capacity"]]
    gains = [str(f) for f in candidates if f.gain]
    losses = [str(f) for f in compared.values() if f.loss]
    if losses:
        return (f"{', '.join(gains)}, but " if gains else "") + _joined(losses, "a loss", "losses")
    if not gains:
        return _joined([str(f) for f in candidates], "not a gain", "not gains")
    return None


def _joined(texts: list[str], one: str, several: str) -> str:
    return f"{texts[0]} is {one}" if len(texts) == 1 else f"{' and '.join(texts)} are {several}"
