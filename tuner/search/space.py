"""The joint search space of a problem, and the per-operator baselines an autotuner would pick.

A *joint assignment* is one config per operator. The search names configs, never
builds them: a point of the space is a tuple of config names in operator order, which
is what Optuna stores (one categorical parameter per operator, named after it).

Both baselines judge a config alone, at one shape: the operator's shape at the
**representative batch** — the problem's ``service.baseline_batch`` (the batch an
autotuner keyed on shape would first meet in this service, e.g. a typical decode step),
by default the largest batch the engine runs. The isolated-fastest config there is what
``@triton.autotune`` keyed on that shape would keep. Workspace is always judged at the
largest batch, where the engine reserves it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..errors import IllegalConfigError
from ..problem.model import Config, Problem
from ..errors import SearchError

#: A joint assignment as the search stores it: config names in operator order.
Point = tuple[str, ...]


@dataclass(frozen=True)
class JointSpace:
    """The operators of a problem and the config names each may take.

    Attributes:
        operators: operator names, in service order (the order of :data:`Point`).
        choices: per operator, its family's config names in file order.
    """

    problem: Problem
    operators: tuple[str, ...]
    choices: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, problem: Problem) -> JointSpace:
        ops = tuple(op.name for op in problem.service.operators)
        choices = tuple(tuple(c.name for c in problem.family_of(op).configs) for op in ops)
        return cls(problem, ops, choices)

    @property
    def size(self) -> int:
        """Number of joint assignments (the product of the per-operator choices)."""
        return math.prod(len(c) for c in self.choices)

    def points(self) -> Iterator[Point]:
        """Every joint assignment, in a stable order (file order, first operator slowest)."""
        return itertools.product(*self.choices)

    def point(self, params: Mapping[str, object]) -> Point | None:
        """The point Optuna's ``params`` name, or None when they do not belong to this space."""
        values = []
        for op, names in zip(self.operators, self.choices):
            value = params.get(op)
            if value not in names:
                return None
            values.append(value)
        return tuple(values)  # type: ignore[arg-type]

    def params(self, point: Point) -> dict[str, str]:
        return dict(zip(self.operators, point))

    def assignment(self, point: Point) -> dict[str, Config]:
        """Configs for a point (names are checked on the way in, so they exist)."""
        result = {}
        for op, name in zip(self.operators, point):
            config = self.problem.family_of(op).find(name=name)
            assert config is not None, (op, name)
            result[op] = config
        return result


def representative_variables(problem: Problem) -> dict[str, float]:
    """Batch variables of the representative batch (``service.baseline_batch``, by default
    the largest batch the engine runs)."""
    return problem.service.baseline_batch_variables(problem.size_fields)


def isolated_latency(problem: Problem, op_name: str, config: Config) -> float:
    """Seconds ``config`` takes alone for ``op_name`` at the representative batch: the sum
    of the phase seconds of every launch it makes (launch overhead excluded).

    Raises:
        IllegalConfigError: the config cannot run that shape.
    """
    op = next(o for o in problem.service.operators if o.name == op_name)
    variables = op.variables(representative_variables(problem))
    launches = config.profile.launches(variables, problem.service.device, op_name)
    return sum(phase[0] for _, phases in launches for phase in phases)


def workspace_at_largest(problem: Problem, op_name: str, config: Config) -> float:
    """Global workspace bytes ``config`` needs for ``op_name`` at the largest batch."""
    op = next(o for o in problem.service.operators if o.name == op_name)
    return config.profile.workspace_bytes(op.variables(problem.service.largest_batch_variables(problem.size_fields)))


def isolated_fastest(space: JointSpace) -> Point:
    """Per operator, the legal config with the lowest isolated latency (ties: file order)."""
    return _per_operator(space, lambda op, c: (isolated_latency(space.problem, op, c),), "isolated-fastest")


def smallest_footprint(space: JointSpace) -> Point:
    """Per operator, the legal config with the least workspace at the largest batch
    (ties: the faster alone, then file order)."""
    problem = space.problem
    return _per_operator(
        space,
        lambda op, c: (workspace_at_largest(problem, op, c), isolated_latency(problem, op, c)),
        "smallest-footprint",
    )


def footprint_ladder(space: JointSpace, levels: int = 8) -> list[Point]:
    """Per workspace cap, each operator's fastest legal config within the cap.

    The engine reserves the assignment's *peak* workspace (the largest of any operator),
    so for a given cap the memory side is fixed and, as far as memory goes, every
    operator should take its fastest config that fits under it. The ladder walks the
    caps from the smallest footprint to the isolated-fastest, at most ``levels`` of
    them (spread evenly over the distinct workspace sizes), fastest cap first
    de-duplicated. An operator with no config under a cap takes its smallest one.
    """
    problem = space.problem
    table: list[list[tuple[float, float, int, str]]] = []  # per op: (workspace, latency, index, name)
    for op, names in zip(space.operators, space.choices):
        family = problem.family_of(op)
        rows = []
        for index, name in enumerate(names):
            config = family.find(name=name)
            try:
                workspace = workspace_at_largest(problem, op, config)
                rows.append((workspace, isolated_latency(problem, op, config), index, name))
            except IllegalConfigError:
                continue
        if not rows:
            return []
        table.append(rows)
    caps = sorted({ws for rows in table for ws, *_ in rows})
    if len(caps) > levels:
        caps = [caps[round(i * (len(caps) - 1) / (levels - 1))] for i in range(levels)]
    ladder: list[Point] = []
    for cap in caps:
        point = []
        for rows in table:
            fitting = [r for r in rows if r[0] <= cap] or [min(rows)]
            point.append(min(fitting, key=lambda r: (r[1], r[2]))[3])
        if tuple(point) not in ladder:
            ladder.append(tuple(point))
    return ladder


def _per_operator(space: JointSpace, key, what: str) -> Point:
    chosen = []
    for op, names in zip(space.operators, space.choices):
        family = space.problem.family_of(op)
        best: tuple | None = None
        for index, name in enumerate(names):
            config = family.find(name=name)
            try:
                score = (*key(op, config), index)
            except IllegalConfigError:
                continue
            if best is None or score < best[0]:
                best = (score, name)
        if best is None:
            raise SearchError(
                f"{space.problem.path}: no config of family {family.name!r} can run operator {op!r} at the "
                f"largest batch, so there is no {what} baseline; check the family's shape limits"
            )
        chosen.append(best[1])
    return tuple(chosen)
