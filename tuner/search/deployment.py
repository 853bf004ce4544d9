"""One engine setting for every regime: the start-up knobs a deployment runs with.

Issue 40. Each regime's study searches knobs and configs together
(:mod:`tuner.search.knob_axis`), but the engine reads its knobs once, at start-up
(:mod:`tuner.problem.knobs` cites where), so the table cannot switch them with the
regime: one combination serves them all. :func:`choose_deployment` picks it from the
finished studies. For each combination that every regime's study tried, each regime's
best trial under it (by the study's objective) is held to its capacity at the SLO, per
seed: how much traffic the deployment serves within the SLO, the figure a knob changes
most and the one issue 40's answers are ranked by (below saturation every setting serves
the regime's rate, and goodput ties). A regime counts by its ``weight`` (default 1)
relative to what the engine's defaults serve there, so a regime at 300 req/s does not
drown one at 3:

    score(c)[seed] = Σ_regimes weight · capacity(c)[seed] / mean(capacity(defaults))

The best mean score wins, and is adopted only when it beats the defaults' score with
the paired 95% interval above zero and no regime loses goodput or capacity against the
defaults beyond its own paired interval (a regime of weight 0 counts for nothing); otherwise the engine's defaults stay, with the
reason. Afterwards each regime's stored choice is held against the engine's defaults
with the per-bucket isolated-fastest configs, issue 40's answer (a), and a loss there in
any regime of weight above 0 sets the deployment aside for the defaults
(:func:`loss_against_defaults`: goodput and capacity; a p90 latency it adds is reported).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial

from ..problem.model import Problem
from ..problem.assignment import Assignment
from ..stats import delta_text, paired, paired_delta
from .evaluate import Evaluation
from .guard import figures
from .knob_axis import KnobAxis, KnobKey
from .ranking import Choice, select_best
from .space import JointSpace


#: What sets a deployment aside against the engine's defaults (:func:`loss_against_defaults`):
#: part of the key a knob problem's rows are written under, so rows written under an
#: earlier rule (which also held p90 latency) are computed again rather than kept.
SET_ASIDE_FOR = ("goodput", "capacity")

#: An assignment's capacity at the SLO in a regime, under a knob combination.
Capacity = Callable[[str, KnobKey, Assignment], Evaluation]


@dataclass(frozen=True)
class Deployment:
    """The knob values every regime's rows are served with, and why those."""

    knobs: KnobKey
    reason: str

    def text(self, axis: KnobAxis) -> str:
        return f"{axis.text(self.knobs)} ({self.reason})"


def choose_deployment(problem: Problem, trials: Mapping[str, Sequence[FrozenTrial]], n_seeds: int,
                      capacity: Capacity) -> Deployment:
    """The knob combination for every regime of ``trials`` (each regime's study's finished
    trials, or those of them a question allows: see the module's docstring); ``capacity``
    figures an assignment's capacity at the SLO in a regime under a key."""
    axis = JointSpace.of(problem).axis
    defaults = axis.defaults
    if axis.size == 1:
        return Deployment(defaults, "the problem lists no engine knob to choose")
    bests = _bests_per_combination(problem, trials, n_seeds, axis)
    if defaults not in bests:
        return Deployment(defaults, "the engine's defaults were not evaluated in every regime: nothing to hold "
                                    "another setting against")
    capacities = {key: {regime: capacity(regime, key, choice.assignment) for regime, choice in per_regime.items()}
                  for key, per_regime in bests.items()}
    capacities = {key: per_regime for key, per_regime in capacities.items()
                  if all(e.feasible and len(e.values) == n_seeds for e in per_regime.values())}
    if defaults not in capacities:
        return Deployment(defaults, "the engine's defaults have no capacity at the SLO to hold another setting against")
    scale = {regime: _positive(e.mean) for regime, e in capacities[defaults].items()}
    scores = {key: _score(per_regime, problem, scale) for key, per_regime in capacities.items()}
    best = max(scores, key=lambda key: (statistics.fmean(scores[key]), key == defaults))
    if best == defaults:
        return Deployment(defaults, "no other setting serves more at the SLO over the regimes")
    gain = paired(list(scores[best]), list(scores[defaults]), 0.95)
    times = statistics.fmean(scores[best]) / statistics.fmean(scores[defaults])
    regimes = f"{len(scale)} regime" + ("" if len(scale) == 1 else "s")
    measured = (f"weighted capacity at the SLO {times:.3f}× the engine defaults' "
                f"({delta_text(gain.mean, gain.half_width)} of their score over {regimes}, paired by seed)")
    shown = f"{axis.text(best)}: {measured}"
    if gain.low is None or gain.low <= 0:
        return Deployment(defaults, f"{shown}, not a gain beyond the paired interval")
    for regime in (name for name in scale if problem.regime(name).weight > 0):
        pairs = ((bests[best][regime].evaluation, bests[defaults][regime].evaluation, "goodput"),
                 (capacities[best][regime], capacities[defaults][regime], "capacity at the SLO"))
        for after, before, what in pairs:
            delta = paired_delta(after, before)
            if delta.high is not None and delta.high < 0:
                return Deployment(defaults, f"{shown}, but regime {regime!r} loses {delta} req/s {what}")
    return Deployment(best, measured)


def loss_against_defaults(tuned: Choice, defaults: Choice) -> str | None:
    """Why ``tuned`` (the deployment's stored choice in a regime) may not replace
    ``defaults`` (answer (a)): a loss in goodput or capacity at the SLO beyond the paired
    interval; None when there is none.

    The p90 latency is reported (:func:`latency_change`) but sets nothing aside, unlike
    the configs' guard (:mod:`tuner.search.guard`): a setting that admits more sequences
    trades per-request latency for throughput by construction (each decode step carries
    more of them), and the SLO is the user's statement of how much latency is acceptable;
    goodput and capacity already count every request that misses it. Holding p90 too made
    issue 40's joint table serve less than the knob-only tuner's setting it must never
    fall behind (CodeLlama-34B: 22.1 against 32.2 req/s at the SLO, for a p90 690 ± 660 ms
    higher at 20 req/s, a rate both serve within the SLO's attainment target)."""
    compared = figures(tuned, defaults)
    losses = [str(compared[name]) for name in SET_ASIDE_FOR if name in compared and compared[name].loss]
    return None if not losses else ", ".join(losses) + " worse than the engine's defaults"


def latency_change(tuned: Choice, defaults: Choice) -> str | None:
    """The p90 latency the deployment adds against the engine's defaults in a regime,
    beyond the paired interval (see :func:`loss_against_defaults`); None when none."""
    figure = figures(tuned, defaults).get("p90")
    if figure is None or not figure.loss:
        return None
    return f"{figure} against the engine's defaults (their goodput and capacity at the SLO held)"


def _bests_per_combination(problem: Problem, trials: Mapping[str, Sequence[FrozenTrial]], n_seeds: int,
                           axis: KnobAxis) -> dict[KnobKey, dict[str, Choice]]:
    """Per combination every regime's study tried (complete, feasible), each regime's best
    trial under it."""
    space = JointSpace.of(problem)
    out: dict[KnobKey, dict[str, Choice]] = {}
    for key in axis.keys():
        per_regime = {}
        for regime, finished in trials.items():
            best = select_best(space, finished, n_seeds, knobs=key)
            if best is None:
                break
            per_regime[regime] = best
        else:
            out[key] = per_regime
    return out


def _score(per_regime: Mapping[str, Evaluation], problem: Problem, scale: Mapping[str, float]) -> tuple[float, ...]:
    seeds = len(next(iter(per_regime.values())).values)
    return tuple(sum(problem.regime(regime).weight * e.values[k] / scale[regime] for regime, e in per_regime.items())
                 for k in range(seeds))


def _positive(value: float) -> float:
    """A regime's scale: the defaults' mean, or 1 where they served nothing (no division by 0)."""
    return value if value > 0 else 1.0
