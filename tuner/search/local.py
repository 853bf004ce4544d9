"""An Optuna sampler that searches the (operator, bucket) space by local moves.

Why not TPE: a problem has one categorical parameter per cell — over a hundred for a
transformer layer keyed on M — and a study has tens of trials. TPE's start-up trials
are random points of that space, nearly all far worse than the warm starts, and its
per-parameter densities need far more trials than that. The structure does the work
instead: cells interact only through the peak workspace the engine reserves and
through co-running, and each cell's choices are already the configs no other dominates
(:mod:`tuner.search.space`). So every proposal is a neighbour of the best trial so far:

* **cap** — lower the peak workspace one step: the cells above the next-lower cap take
  their fastest config under it (the memory trade-off, one notch at a time); or raise it
  one step, every cell taking its fastest config under the higher cap;
* **operator** — move every bucket of one operator one step along its choices, towards
  less workspace or towards less time alone (its buckets usually agree);
* **cell** — one cell to another of its choices;
* **knob** — where the problem lists engine knobs (:mod:`tuner.search.knob_axis`), a
  quarter of the proposals move one knob to another value and keep the configs; a
  sampler *pinned* to one knob setting (a study continued under the deployed setting)
  moves configs only.

Operator and cell moves touch only the cells the incumbent's simulations launched
(when the study recorded them): a config in a bucket the service never reached in this
regime changes nothing but, through workspace, memory — which cap moves cover.

Proposals already evaluated (or in flight) are skipped; the random stream is seeded, so
the same study and seed propose the same points. Enqueued trials (the warm starts) keep
their own parameters, as with any Optuna sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from ..problem.assignment import Assignment
from .knob_axis import KnobKey
from .space import JointSpace, JointPoint

#: (move, probability) of each kind of proposal that changes configs.
MOVES = (("cap", 0.3), ("operator", 0.3), ("cell", 0.4))

#: How often a proposal changes a knob instead, when the problem has engine knobs.
KNOB_MOVE = 0.25

#: What a sampler starts its moves from: the best assignment so far, its knob values, and
#: the cells its simulations launched (None: not recorded).
Incumbent = tuple[Assignment, KnobKey, "frozenset[int] | None"]


class LocalSearchSampler(optuna.samplers.BaseSampler):
    """Neighbours of the incumbent (see the module doc).

    Args:
        space: the joint space; its ``names`` are the parameters sampled.
        incumbent: the best point of a study so far, or None before any finished trial.
        seed: seeds the proposals.
        pinned: the knob values every proposal keeps (None: knobs move too); the
            incumbent is then the best trial run with them.
    """

    def __init__(self, space: JointSpace, incumbent: Callable[[optuna.Study], Incumbent | None], seed: int,
                 pinned: KnobKey | None = None) -> None:
        self.space = space
        self._incumbent = incumbent
        self._pinned = pinned
        self._rng = np.random.RandomState(seed)
        self._distributions = {**distributions(space), **space.axis.distributions()}
        self._caps = sorted({c.workspace for costs in space.costs for c in costs if c.legal})

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, object]:
        if not search_space:
            return {}
        space = self.space
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                          TrialState.RUNNING, TrialState.WAITING))
        seen = {k for t in trials if t.number != trial.number and (k := space.point_key(t.params)) is not None}
        found = self._incumbent(study)
        if found is not None:
            best, knobs, visited = found
            start = space.point_of(best)
        else:
            start, knobs, visited = tuple(c[0] for c in space.choices), self._pinned or space.axis.defaults, None
        movable = self._movable(visited)
        for _ in range(64):
            proposal = self._knob_move(start, knobs) if self._moves_knobs() else (self._move(start, movable), knobs)
            if proposal not in seen:
                return self._params(*proposal)
        keys = space.axis.keys() if self._pinned is None else [self._pinned]
        for _ in range(64):  # every neighbour tried: a random point, one not tried if one turns up
            point = tuple(choices[self._rng.randint(len(choices))] for choices in space.choices)
            proposal = point, keys[self._rng.randint(len(keys))]
            if proposal not in seen:
                break
        return self._params(*proposal)

    def _params(self, point: JointPoint, knobs: KnobKey) -> dict[str, object]:
        return {**self.space.params(point), **self.space.axis.params(knobs)}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> object:
        choices = param_distribution.choices  # type: ignore[attr-defined]
        return choices[self._rng.randint(len(choices))]

    # --- moves ---------------------------------------------------------------------

    def _move(self, point: JointPoint, movable: list[int]) -> JointPoint:
        kinds, weights = zip(*MOVES)
        kind = kinds[self._rng.choice(len(kinds), p=weights)]
        return getattr(self, f"_{kind}_move")(point, movable)

    def _cap_move(self, point: JointPoint, movable: list[int]) -> JointPoint:
        space = self.space
        costs = [space.cost(i, name) for i, name in enumerate(point)]
        peak = max((c.workspace for c in costs), default=0.0)
        lower = [cap for cap in self._caps if cap < peak]
        higher = [cap for cap in self._caps if cap > peak]
        if lower and (not higher or self._rng.rand() < 0.7):
            cap = lower[-1]
            return tuple(name if cost.workspace <= cap else self._fastest(i, cap, name)
                         for i, (name, cost) in enumerate(zip(point, costs)))
        if higher:
            return tuple(self._fastest(i, higher[0], name) for i, name in enumerate(point))
        return self._cell_move(point, movable)

    def _operator_move(self, point: JointPoint, movable: list[int]) -> JointPoint:
        space = self.space
        ops = sorted({space.cells[i][0] for i in movable})
        if not ops:
            return point
        op = ops[self._rng.randint(len(ops))]
        by = "workspace" if self._rng.rand() < 0.5 else "latency_s"
        out = list(point)
        for i in movable:
            choices = space.choices[i]
            if space.cells[i][0] != op:
                continue
            ordered = sorted(choices, key=lambda n: (getattr(space.cost(i, n), by), n))
            here = ordered.index(point[i]) if point[i] in ordered else len(ordered)
            out[i] = ordered[max(0, here - 1)] if here > 0 else ordered[0]
        return tuple(out)

    def _moves_knobs(self) -> bool:
        """Whether the next proposal changes a knob (the configs kept) rather than configs
        (the knobs kept): :data:`KNOB_MOVE` of the time when the problem has knobs."""
        return self._pinned is None and self.space.axis.size > 1 and self._rng.rand() < KNOB_MOVE

    def _knob_move(self, point: JointPoint, knobs: KnobKey) -> tuple[JointPoint, KnobKey]:
        """**knob** — one knob of the incumbent to another of its values, the configs kept:
        under a new chunk size or batch limit the incumbent's configs are the natural
        first guess, and the config moves then adapt them."""
        choices = self.space.axis.knobs.choices
        movable = [i for i, (_, values) in enumerate(choices) if len(values) > 1]
        i = movable[self._rng.randint(len(movable))]
        others = [value for value in choices[i][1] if value != knobs[i]]
        out = list(knobs)
        out[i] = others[self._rng.randint(len(others))]
        return point, tuple(out)

    def _movable(self, visited: frozenset[int] | None) -> list[int]:
        """Free cells the incumbent's runs launched (all free cells when not recorded)."""
        free = self.space.free
        chosen = [i for i in free if i in visited] if visited else list(free)
        return chosen or list(free)

    def _cell_move(self, point: JointPoint, movable: list[int]) -> JointPoint:
        if not movable:
            return point
        i = movable[self._rng.randint(len(movable))]
        others = [n for n in self.space.choices[i] if n != point[i]]
        out = list(point)
        out[i] = others[self._rng.randint(len(others))]
        return tuple(out)

    def _fastest(self, index: int, cap: float, current: str) -> str:
        """The cell's fastest candidate under ``cap`` (:meth:`JointSpace.fastest_under`),
        or ``current`` in a cell with no legal candidate."""
        fastest = self.space.fastest_under(index, cap)
        return current if fastest is None else fastest.config.name


def distributions(space: JointSpace) -> dict[str, CategoricalDistribution]:
    """Optuna's distribution per free cell: its choices (the candidates, the baselines'
    picks among them), which every warm start and proposal is made of. Optuna stores the
    distribution with every parameter of every trial, so it stays this short."""
    return {space.names[i]: CategoricalDistribution(list(space.choices[i])) for i in space.free}


def suggest(trial: optuna.Trial, space: JointSpace) -> Assignment:
    """The trial's assignment: one categorical per free cell, the others their one choice."""
    params = {name: trial.suggest_categorical(name, d.choices)  # type: ignore[misc]
              for name, d in distributions(space).items()}
    point = space.point(params)
    assert point is not None
    return space.assignment(point)


def names_of(trials: Sequence[FrozenTrial], space: JointSpace) -> set[tuple[JointPoint, KnobKey]]:
    """The distinct (point, knob values) the trials evaluated (trials of another space left out)."""
    return {k for t in trials if (k := space.point_key(t.params)) is not None}
