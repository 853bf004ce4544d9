"""Baselines: the assignments a user would run without tuner, as objects.

A :class:`Baseline` turns a problem's :class:`~tuner.search.space.JointSpace` into one
:class:`~tuner.problem.assignment.Assignment`, judged alone (no simulation). Every
regime evaluates them on the same seeded workloads as its trials; the table, the tune
report, the dashboard and the gate compare against :data:`PER_BUCKET` — THE baseline:

* :class:`PerBucketIsolatedFastest` — per (operator, bucket), the config fastest alone
  at the bucket's representative shape: what ``triton.autotune(key=[M, …])`` keeps per
  key value and a vLLM M-keyed table looks up, bucket by bucket.
* :class:`OneConfigPerOperator` — per operator, the config fastest alone at one shape
  (the problem's ``service.baseline_batch``, by default the largest batch) used for
  every shape: an autotuner keyed on nothing, or on the first shape it met. Labelled
  as such wherever it is shown; it is not what a careful user runs.
* :class:`SmallestFootprint` — per cell, the least workspace (ties: the faster).
* :func:`routing_aware` — for a regime whose MoE routing is not uniform: the per-bucket
  isolated-fastest with MoE kernels timed on that routing (what an isolated tuner that
  knew the traffic's routing would keep), so a gain splits into its routing-aware part
  (this baseline over THE baseline, which times on uniform routing as vLLM's
  ``benchmark_moe.py`` does) and its load-aware part (tuned over this baseline).

The exhaustive oracle is not a baseline here: it needs simulations (see ``study``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..errors import IllegalConfigError, SearchError
from ..problem.assignment import Assignment
from ..problem.model import Config
from ..traffic.routing import Routing
from .space import JointSpace, fastest_in_cell, seconds_alone, smallest_in_cell


class Baseline(Protocol):
    """A rule that picks one assignment without simulating the service.

    ``name`` is the stable key stored in tables and JSON (``per_bucket_isolated_fastest``);
    ``label`` is what people read. ``assignment`` raises :class:`SearchError` when some
    cell has no legal config under the rule.
    """

    name: str
    label: str

    def assignment(self, space: JointSpace) -> Assignment: ...


def _by_cell(space: JointSpace, pick: Callable[[int], Config]) -> Assignment:
    """The assignment whose cell ``i`` holds ``pick(i)``."""
    return space.assemble([pick(index) for index in range(len(space.cells))])


@dataclass(frozen=True)
class PerBucketIsolatedFastest:
    """THE baseline: in every (operator, bucket) cell, the config fastest alone at the
    bucket's shape, as ``triton.autotune(key=...)`` or a vLLM M-keyed table keeps it."""

    name: str = "per_bucket_isolated_fastest"
    label: str = "per-bucket isolated-fastest"

    def assignment(self, space: JointSpace) -> Assignment:
        return _by_cell(space, lambda i: fastest_in_cell(space, i, what=self.label).config)


@dataclass(frozen=True)
class SmallestFootprint:
    """In every cell, the legal config needing the least workspace: the memory-frugal end
    of the trade-off the search explores."""

    name: str = "smallest_footprint"
    label: str = "smallest-footprint"

    def assignment(self, space: JointSpace) -> Assignment:
        return _by_cell(space, lambda i: smallest_in_cell(space, i, what=self.label).config)


@dataclass(frozen=True)
class OneConfigPerOperator:
    """One config per operator for every bucket: the fastest alone at the service's
    ``baseline_batch`` (what a deployment without shape buckets runs)."""

    name: str = "one_config_per_operator"
    label: str = "one config per operator (isolated-fastest at service.baseline_batch)"

    def assignment(self, space: JointSpace) -> Assignment:
        """Each operator's fastest legal config at ``service.baseline_batch`` (ties: file order).

        Raises:
            SearchError: an operator has no config that can run that batch.
        """
        problem = space.problem
        at = problem.service.baseline_batch_variables(problem.size_fields)
        per_op = {}
        for op in problem.service.operators:
            best: tuple[float, int, Config] | None = None
            for index, config in enumerate(problem.families[op.family].configs):
                try:
                    score = (seconds_alone(problem, op.name, config, at), index, config)
                except IllegalConfigError:
                    continue
                if best is None or score[:2] < best[:2]:
                    best = score
            if best is None:
                raise SearchError(f"{problem.path}: no config of family {op.family!r} can run operator "
                                  f"{op.name!r} at service.baseline_batch, so there is no {self.name} baseline")
            per_op[op.name] = best[2]
        return Assignment.uniform(problem, per_op)


ROUTING_AWARE = "routing_aware_isolated_fastest"
ROUTING_AWARE_LABEL = "routing-aware isolated-fastest"


def routing_aware(space: JointSpace, routing: Routing) -> Assignment:
    """The per-bucket isolated-fastest assignment of ``space``'s problem with its MoE
    kernels timed on ``routing`` (see :func:`tuner.search.space.cell_cost`)."""
    routed = JointSpace.of(space.problem, routing)
    return space.assemble([fastest_in_cell(routed, i, what=ROUTING_AWARE_LABEL).config for i in range(len(routed.cells))])


PER_BUCKET = PerBucketIsolatedFastest()
ONE_CONFIG = OneConfigPerOperator()
SMALLEST = SmallestFootprint()

#: The baselines every regime reports, THE baseline first.
BASELINES: tuple[Baseline, ...] = (PER_BUCKET, ONE_CONFIG, SMALLEST)


def footprint_ladder(space: JointSpace, levels: int = 8) -> list[Assignment]:
    """Per workspace cap, each cell's fastest candidate within the cap.

    The engine reserves the assignment's *peak* workspace (the largest of any cell), so
    for a given cap the memory side is fixed and, as far as memory goes, every cell
    should take its fastest config that fits under it. The ladder walks the caps from
    the smallest footprint to the isolated-fastest, at most ``levels`` of them (spread
    evenly over the distinct workspace sizes), de-duplicated. A cell with no config
    under a cap takes its smallest one.
    """
    caps = sorted({c.workspace for costs in space.costs for c in costs if c.legal})
    if not caps:
        return []
    if len(caps) > levels:
        caps = [caps[round(i * (len(caps) - 1) / (levels - 1))] for i in range(levels)]
    ladder: list[Assignment] = []
    for cap in caps:
        assignment = capped(space, cap)
        if assignment is not None and assignment not in ladder:
            ladder.append(assignment)
    return ladder


def capped(space: JointSpace, cap: float) -> Assignment | None:
    """Each cell's fastest candidate with at most ``cap`` workspace (its smallest when
    none fits); None when some cell has no legal config at all."""
    picks = [space.fastest_under(i, cap) for i in range(len(space.cells))]
    if any(p is None for p in picks):
        return None
    return _by_cell(space, lambda i: picks[i].config)  # type: ignore[union-attr]

