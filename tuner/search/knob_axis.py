"""The engine knobs as parameters of a study: one search over knobs and kernel configs.

Issue 40: a regime's study searches the problem's ``service.knobs`` and its per-bucket
configs together, a trial being one knob combination with one joint assignment. Optuna
stores a knob as the categorical parameter ``knob:NAME`` over the values a command line
writes (``2048``; ``1,2,4,8``; ``default``); a knob with one value is not a parameter.
A trial's *key* is its knob values in the problem's knob order, so two trials are the
same point when their configs and their keys agree. Buckets are drawn over the widest
deployment (:meth:`KnobSpace.widest`), so every combination has the same cells and one
:class:`~tuner.search.space.JointSpace` names the configs of all of them.

A trial of a study made before its problem listed knobs has no knob parameters: it ran
the engine's defaults, and reads so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial

from ..problem.knobs import KnobSpace, KnobValue, show
from ..problem.model import Problem

#: The prefix of a knob's parameter name in a study (``knob:max_num_batched_tokens``).
PREFIX = "knob:"

#: A trial's knob values, in the problem's knob order (() for a problem without knobs).
KnobKey = tuple[KnobValue, ...]
#: The most knob variants a problem keeps (each with what its own memo holds).
MAX_VARIANTS = 512



@dataclass(frozen=True)
class KnobAxis:
    """The knob parameters of a problem's studies."""

    knobs: KnobSpace

    @property
    def defaults(self) -> KnobKey:
        """Each knob's first value: the engine's own setting."""
        return tuple(values[0] for _, values in self.knobs.choices)

    @property
    def size(self) -> int:
        return self.knobs.size()

    def keys(self) -> list[KnobKey]:
        """Every combination's key, the defaults first."""
        return [tuple(values.values()) for values in self.knobs.combinations()]

    def values(self, key: KnobKey) -> dict[str, KnobValue]:
        """The key as ``{name: value}`` (what :meth:`Problem.with_knobs` takes)."""
        return dict(zip(self.knobs.names, key))

    def key_of(self, values: Mapping[str, KnobValue]) -> KnobKey:
        """The key of ``{name: value}``; knobs not named take their defaults."""
        return tuple(values.get(name, default) for name, default in zip(self.knobs.names, self.defaults))

    def distributions(self) -> dict[str, CategoricalDistribution]:
        """Optuna's distribution per knob with more than one value."""
        return {PREFIX + name: CategoricalDistribution([show(v) for v in values])
                for name, values in self.knobs.choices if len(values) > 1}

    def params(self, key: KnobKey) -> dict[str, str]:
        """Optuna's parameters of a key (knobs with one value are not parameters)."""
        listed = dict(self.knobs.choices)
        return {PREFIX + name: show(value) for name, value in zip(self.knobs.names, key) if len(listed[name]) > 1}

    def key(self, params: Mapping[str, object]) -> KnobKey | None:
        """The key Optuna's ``params`` name (no knob parameter: the default), or None when
        a knob parameter names a value the problem does not list (another version)."""
        out = []
        for name, values in self.knobs.choices:
            written = params.get(PREFIX + name)
            if written is None:
                out.append(values[0])
                continue
            found = [value for value in values if show(value) == written]
            if not found:
                return None
            out.append(found[0])
        return tuple(out)

    def trial_key(self, trial: FrozenTrial) -> KnobKey | None:
        return self.key(trial.params)

    def suggest(self, trial: optuna.Trial) -> KnobKey:
        """The trial's knob values (its enqueued or sampled parameters)."""
        params = {name: trial.suggest_categorical(name, d.choices)  # type: ignore[misc]
                  for name, d in self.distributions().items()}
        key = self.key(params)
        assert key is not None, "a suggested value is one of the distribution's"
        return key

    def variant(self, problem: Problem, key: KnobKey) -> Problem:
        """``problem`` as the engine runs with ``key`` (itself for the defaults), built
        once per loaded problem and key."""
        if key == self.defaults:
            return problem
        variants: dict[KnobKey, Problem] = problem.memo.setdefault("knob_variants", {})
        cached = variants.get(key)
        if cached is not None:
            return cached
        if len(variants) >= MAX_VARIANTS:  # each may hold its joint space: bounded, as before
            variants.clear()
        variant = variants[key] = problem.with_knobs(self.values(key))
        variant.memo["varies"] = (problem, key)
        return variant

    def text(self, key: KnobKey) -> str:
        """``max_num_seqs=64, max_num_batched_tokens=2048`` (the engine's defaults: ``engine defaults``)."""
        if key == self.defaults:
            return "engine defaults"
        return ", ".join(f"{name}={show(value)}" for name, value in zip(self.knobs.names, key))


def base_of(problem: Problem) -> tuple[Problem, KnobKey] | None:
    """The loaded problem ``problem`` is a knob variant of (:meth:`KnobAxis.variant`) and
    its key; None for a problem as loaded (a seed pool serves its variants by key)."""
    return problem.memo.get("varies")


def with_key(trials: Sequence[FrozenTrial], axis: KnobAxis, key: KnobKey) -> list[FrozenTrial]:
    """The trials that ran with knob values ``key``."""
    return [t for t in trials if axis.trial_key(t) == key]
