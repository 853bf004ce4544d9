"""The joint search space: one categorical choice per (operator, bucket) cell.

Inside the search a joint assignment has one form, :class:`~tuner.problem.assignment.Assignment`;
this module is its boundary with Optuna: :meth:`JointSpace.key` reads a trial's
parameters as ``(Assignment, knob values)`` and :meth:`JointSpace.params_of` writes an
assignment as parameters. The local-search sampler alone works in the space's
coordinates, a *point*: a tuple of config names in cell order (operators in service
order, buckets in order), which its moves index by cell. Optuna stores one categorical
parameter per *free* cell — a cell with more than one choice — named ``op`` for an
operator with one bucket and ``op@LABEL`` otherwise; a cell with one choice is not a
parameter (it has nothing to learn, and every parameter is a database write per trial).

Each cell's choices are its family's legal configs that no other config *dominates*
(prunes like ``triton.autotune``'s ``prune_configs_by``, before any simulation). Config
``a`` dominates ``b`` in a bucket when ``a`` is no slower alone at both ends of the
bucket (its lowest and its representative shape) and needs no more workspace there —
and, when kernels share the GPU (several executors or a neighbour stream), also takes
no larger share of the SMs and of DRAM bandwidth — and is better in one of them. Cells
interact only through the workspace the engine reserves (the peak over cells) and
through co-running, so a dominated config can only lose; ties keep the earlier config.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import IllegalConfigError, SearchError
from ..problem.assignment import Assignment, Cell
from ..problem.model import Config, Problem
from ..traffic.routing import Routing
from .knob_axis import KnobAxis, KnobKey

#: The sampler's coordinates of a joint assignment: config names in cell order.
JointPoint = tuple[str, ...]



@dataclass(frozen=True)
class CellCost:
    """What a config costs alone in one bucket (None latency: illegal there), and the
    ``(s, waves)`` of its longest phase dispatched in CTA waves (None: fluid), which
    decide how many rounds it runs where other streams hold SMs (``sim.gpu.rounds``)."""

    config: Config
    latency_s: float | None
    lowest_latency_s: float | None
    workspace: float
    sm: float
    dram: float
    wave: tuple[float, float] | None = None
    launches: int = 1

    @property
    def legal(self) -> bool:
        return self.latency_s is not None


def seconds_alone(problem: Problem, op: str, config: Config, variables: Mapping[str, float]) -> float:
    """Seconds ``config`` takes alone for ``op`` at these *batch* variables (its shape
    follows from them): the sum of the phase seconds of every launch it makes (launch
    overhead excluded). For a bucket's shape use :func:`cell_cost`.

    Raises:
        IllegalConfigError: the config cannot run that shape.
    """
    launches = config.profile.launches(problem.operator(op).variables(variables), problem.service.device, op)
    return sum(phase[0] for _, phases in launches for phase in phases)


def cell_cost(problem: Problem, op: str, bucket: int, config: Config, routing: Routing | None = None) -> CellCost:
    """Latency at the bucket's representative and lowest shapes, workspace at the
    representative shape, and the largest SM and DRAM shares of its launches. Without a
    ``routing`` an MoE kernel is timed on uniform routing (as vLLM's ``benchmark_moe.py``
    does); with one, on that routing's expected expert counts at the bucket's tokens."""
    operator = problem.operator(op)
    largest = problem.service.largest_batch_variables(problem.size_fields)
    at: dict[str, Any] = operator.bucket_variables(largest, bucket)
    low: dict[str, Any] = operator.bucket_variables(largest, bucket, at="lowest")
    if routing is not None:
        for values in (at, low):
            values["expert_counts"] = routing.expected(int(values.get("M", values.get("tokens", 0))))
    try:
        launches = config.profile.launches(at, problem.service.device, op)
        latency = sum(p[0] for _, phases in launches for p in phases)
        lowest = sum(p[0] for _, phases in config.profile.launches(low, problem.service.device, op)
                     for p in phases)
        workspace = config.profile.workspace_bytes(at)
    except IllegalConfigError:
        return CellCost(config, None, None, math.inf, 1.0, 1.0)
    sm = max((p[1] for _, phases in launches for p in phases), default=0.0)
    dram = max((p[2] for _, phases in launches for p in phases), default=0.0)
    discrete = [p for _, phases in launches for p in phases if p[4] > 0.0]
    longest = max(discrete, key=lambda p: p[0]) if discrete else None
    wave = None if longest is None else (longest[1], longest[4])
    return CellCost(config, latency, lowest, workspace, sm, dram, wave, len(launches))


@dataclass(frozen=True)
class JointSpace:
    """The cells of a problem, each config's cost per cell, and the candidates searched.

    Attributes:
        cells: ``(operator, bucket)`` in service then bucket order (the order of a point).
        costs: per cell, every config of the family with its cost, in file order.
    """

    problem: Problem
    cells: tuple[Cell, ...]
    costs: tuple[tuple[CellCost, ...], ...]

    @classmethod
    def of(cls, problem: Problem, routing: Routing | None = None) -> JointSpace:
        """The space of a problem, computed once per loaded problem (it times every
        config in every bucket: seconds for a transformer layer); with a ``routing``, its
        MoE kernels timed on that routing instead of uniform routing (see :func:`cell_cost`)."""
        spaces: dict[Routing | None, JointSpace] = problem.memo.setdefault("joint_spaces", {})
        cached = spaces.get(routing)
        if cached is not None:
            return cached
        cells = tuple((op.name, b) for op in problem.service.operators for b in range(op.bucketing.size))
        costs = tuple(tuple(cell_cost(problem, op, b, c, routing) for c in problem.family_of(op).configs)
                      for op, b in cells)
        space = spaces[routing] = cls(problem, cells, costs)
        return space

    @cached_property
    def choices(self) -> tuple[tuple[str, ...], ...]:
        """Per cell, the names of its legal, non-dominated configs, plus the per-bucket
        baselines' picks (the fastest at the representative shape, the smallest
        footprint: one may tie with a config that dominates it), in file order."""
        shared = self.problem.service.executors > 1 or bool(self.problem.service.neighbors)
        out = []
        for index, costs in enumerate(self.costs):
            legal = [c for c in costs if c.legal]
            if not legal or not self.reached(index):
                # nothing runs here, or the service never does: keep the family default
                # (a constraint says why where the service would launch it)
                out.append((costs[0].config.name,))
                continue
            eager = self.problem.service.launch == "eager"  # fewer launches cost less host time
            kept = {c.config.name for i, c in enumerate(legal)
                    if not any(_dominates(o, c, shared, j < i, eager) for j, o in enumerate(legal) if j != i)}
            kept |= {fastest_in_cell(self, index).config.name, smallest_in_cell(self, index).config.name}
            out.append(tuple(c.config.name for c in legal if c.config.name in kept))
        return tuple(out)

    def reached(self, index: int) -> bool:
        """Whether the service can run a batch in the cell's bucket (within its memory
        budget: :meth:`tuner.problem.buckets.Bucketing.reachable`)."""
        op, bucket = self.cells[index]
        bucketing = self.problem.operator(op).bucketing
        return bucketing.reachable(bucketing.buckets[bucket])

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Optuna's parameter name per cell."""
        out = []
        for op, bucket in self.cells:
            bucketing = self.problem.operator(op).bucketing
            out.append(op if bucketing.size == 1 else f"{op}@{bucketing.buckets[bucket].label}")
        return tuple(out)

    @cached_property
    def _family_names(self) -> tuple[frozenset[str], ...]:
        return tuple(frozenset(c.config.name for c in costs) for costs in self.costs)

    @property
    def size(self) -> int:
        """Number of joint assignments searched (the product of the per-cell choices)."""
        return math.prod(len(c) for c in self.choices)

    @cached_property
    def axis(self) -> KnobAxis:
        """The problem's engine knobs, searched with the configs (:mod:`tuner.search.knob_axis`)."""
        return KnobAxis(self.problem.knobs)

    @property
    def joint_size(self) -> int:
        """Number of (knob combination, joint assignment) points a study can try."""
        return self.size * self.axis.size

    def key(self, params: Mapping[str, object]) -> tuple[Assignment, KnobKey] | None:
        """The assignment and knob values Optuna's ``params`` name; None when either does
        not belong to this problem (a trial of another version of it)."""
        found = self.point_key(params)
        return None if found is None else (self.assignment(found[0]), found[1])

    def point_key(self, params: Mapping[str, object]) -> tuple[JointPoint, KnobKey] | None:
        """:meth:`key` in the sampler's coordinates."""
        point, knobs = self.point(params), self.axis.key(params)
        return None if point is None or knobs is None else (point, knobs)

    def params_of(self, assignment: Assignment) -> dict[str, str]:
        """Optuna's parameters of an assignment (its free cells' config names)."""
        return self.params(self.point_of(assignment))

    def points(self) -> Iterator[JointPoint]:
        """Every joint assignment searched, in a stable order (first cell slowest)."""
        return itertools.product(*self.choices)

    @cached_property
    def free(self) -> tuple[int, ...]:
        """Indices of the cells with more than one choice (the Optuna parameters)."""
        return tuple(i for i, choices in enumerate(self.choices) if len(choices) > 1)

    def point(self, params: Mapping[str, object]) -> JointPoint | None:
        """The point Optuna's ``params`` name (any config of a free cell's family; the
        other cells their one choice), or None when they do not belong to this space."""
        values = [choices[0] for choices in self.choices]
        for i in self.free:
            value = params.get(self.names[i])
            if value not in self._family_names[i]:
                return None
            values[i] = value  # type: ignore[assignment]
        return tuple(values)

    def params(self, point: JointPoint) -> dict[str, str]:
        """Optuna's parameters of a point (its free cells)."""
        return {self.names[i]: point[i] for i in self.free}

    def contains(self, assignment: Assignment) -> bool:
        """Whether a trial can hold ``assignment``: every cell has one of its choices."""
        return all(name in choices for name, choices in zip(self.point_of(assignment), self.choices))

    def assignment(self, point: JointPoint) -> Assignment:
        """The configs a point names (names are checked on the way in, so they exist);
        one value per point, kept, so that the search's maps key on the same object."""
        made = self._assignments.get(point)
        if made is None:
            made = self._assignments[point] = self.assemble(
                [by_name[name] for by_name, name in zip(self._configs_by_name, point)])
        return made

    def assemble(self, configs: Sequence[Config]) -> Assignment:
        """The assignment of one config per cell, in cell order."""
        by_op: dict[str, list[Config]] = {}
        for (op, _), config in zip(self.cells, configs, strict=True):
            by_op.setdefault(op, []).append(config)
        return Assignment(tuple((op, tuple(configs)) for op, configs in by_op.items()))

    @cached_property
    def _configs_by_name(self) -> tuple[dict[str, Config], ...]:
        """Per cell, its configs by name (the first of a name, as a scan would find)."""
        return tuple({c.config.name: c.config for c in reversed(costs)} for costs in self.costs)

    @cached_property
    def _assignments(self) -> dict[JointPoint, Assignment]:
        return {}

    def point_of(self, assignment: Assignment) -> JointPoint:
        """The names of an assignment's configs in cell order (it may lie outside the
        searched choices: a baseline is evaluated wherever it is)."""
        return tuple(config.name for _, config in assignment.cells())

    def cost(self, index: int, name: str) -> CellCost:
        return next(c for c in self.costs[index] if c.config.name == name)

    def fastest_under(self, index: int, cap: float = math.inf) -> CellCost | None:
        """Among the cell's candidates (:attr:`choices`), the fastest legal one needing at
        most ``cap`` workspace, by :func:`fastest_under`'s rule; the footprint ladder's and
        the sampler's pick. None when no candidate is legal (a bucket never reached, whose
        one candidate is the family's default)."""
        return fastest_under([self.cost(index, name) for name in self.choices[index]], cap)


def _dominates(a: CellCost, b: CellCost, shared: bool, earlier: bool, eager: bool = False) -> bool:
    """``a`` is at least as good as ``b`` on every axis and better on one (or equal on
    all and listed earlier, so one of two identical configs stays)."""
    axes = [(a.latency_s, b.latency_s), (a.lowest_latency_s, b.lowest_latency_s), (a.workspace, b.workspace)]
    if shared:
        axes += [(a.sm, b.sm), (a.dram, b.dram)]
    if eager:  # under service.launch: eager each launch costs host time (docs/problem-files.md)
        axes.append((a.launches, b.launches))
    if any(x > y for x, y in axes):  # type: ignore[operator]
        return False
    return any(x < y for x, y in axes) or earlier  # type: ignore[operator]


def smallest_in_cell(space: JointSpace, index: int, what: str = "smallest-footprint") -> CellCost:
    """The cell's legal config needing the least workspace (ties: the faster alone, then
    file order)."""
    legal = [c for c in space.costs[index] if c.legal]
    if not legal or not space.reached(index):
        return fastest_in_cell(space, index, what=what)  # the default, or raises naming the cell
    return min(legal, key=lambda c: (c.workspace, c.latency_s))


def fastest_under(costs: Sequence[CellCost], cap: float = math.inf) -> CellCost | None:
    """The one rule for "the fastest config under a workspace cap": among the legal
    ``costs``, the lowest latency at the cell's representative shape among those needing
    at most ``cap`` workspace (ties: the first); when none fits, the one needing the least
    (ties: the faster, then the first), since an engine that must go above the cap goes as
    little above it as it can. None when none is legal."""
    legal = [c for c in costs if c.legal]
    if not legal:
        return None
    fitting = [c for c in legal if c.workspace <= cap]
    if not fitting:
        return min(legal, key=lambda c: (c.workspace, c.latency_s))
    return min(fitting, key=lambda c: c.latency_s)  # type: ignore[arg-type,return-value]


def fastest_in_cell(space: JointSpace, index: int, what: str = "isolated-fastest") -> CellCost:
    """The cell's fastest legal config of all (:func:`fastest_under` without a cap): the
    isolated-fastest baseline's pick, and a candidate of every cell; the family's default
    in a bucket the service never reaches (nothing is launched there to be fast).

    Raises:
        SearchError: no config can run the cell's bucket (naming it and the ``what``
            baseline that cannot exist).
    """
    if not space.reached(index):
        return space.costs[index][0]
    fastest = fastest_under(space.costs[index])
    if fastest is None:
        op, bucket = space.cells[index]
        family = space.problem.family_of(op)
        raise SearchError(
            f"{space.problem.path}: no config of family {family.name!r} can run operator {op!r} in bucket "
            f"{space.problem.operator(op).bucketing.buckets[bucket].label or 0}, so there is no {what} "
            "baseline; check the family's shape limits"
        )
    return fastest
