"""What a regime's figures say, in words, and which problems the first page shows first.

A reader of the first page should learn in seconds where tuning changed something: a
problem whose every regime reads 1.000× is no reason to scroll past three screens to the
one significant gain. So the problems are ordered by their largest *significant* effect
(a paired difference whose 95% CI excludes 0), and each regime gets a verdict — the
significant changes with their size, then what can produce them (the mechanism
``tuner tune`` reports, :func:`tuner.search.summary.mechanism`, with the memory clause
worked out into how many requests fit) — instead of leaving the reader to compare
intervals. A goodput measured in an overloaded window depends on the window's length,
so it is said but does not rank a problem; capacity does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..store.row import TableRow
from . import cells
from .board import regimes_of
from ..stats import figure, percent


#: the kinds of clause :func:`tuner.search.summary.mechanism` writes besides memory (a
#: ``waves`` clause itself holds ``; ``-separated notes, which the short form drops)
MECHANISMS = ("SM sharing", "waves", "SM partition", "shape")


@dataclass(frozen=True)
class Effect:
    """One figure of a regime, tuned against THE baseline (per-bucket isolated-fastest).

    ``half_width`` is the paired per-seed difference's 95% half-width (None with one
    seed: nothing is significant then); ``overloaded``: a goodput from a window where some
    seed's backlog grew, so it depends on the window's length.
    """

    measure: str
    tuned: float
    base: float
    half_width: float | None
    overloaded: bool = False

    @property
    def difference(self) -> float:
        return self.tuned - self.base

    @property
    def significant(self) -> bool:
        """The paired 95% CI excludes 0 (a zero-width interval: every seed gave the same
        non-zero difference)."""
        return self.half_width is not None and abs(self.difference) > self.half_width

    @property
    def relative(self) -> float:
        """tuned / baseline − 1; ±inf against a baseline of 0."""
        if self.base > 0:
            return self.difference / self.base
        return 0.0 if self.difference == 0 else math.copysign(math.inf, self.difference)

    @property
    def ranks(self) -> bool:
        """Whether it may order the problems: significant and a steady-state figure."""
        return self.significant and not (self.measure == "goodput" and self.overloaded)

    def text(self) -> str:
        """``+62% capacity (792 vs 488 req/s)``; ``goodput 722 vs 0 req/s`` without a ratio."""
        both = f"{figure(self.tuned)} vs {figure(self.base)} req/s"
        said = (f"{percent(self.relative)} {self.measure} ({both})" if math.isfinite(self.relative)
                else f"{self.measure} {both}")
        return said + (" in an overloaded window" if self.overloaded else "")


def effects(rows: Sequence[TableRow]) -> list[Effect]:
    """A regime's capacity at the SLO and goodput against THE baseline (those its rows hold)."""
    first = rows[0]
    found = []
    if first.capacity_rps is not None and first.baseline_capacity_rps is not None:
        found.append(Effect("capacity", first.capacity_rps, first.baseline_capacity_rps, first.capacity_delta_ci_rps))
    found.append(Effect("goodput", first.goodput_rps, first.baseline_goodput_rps, first.delta_ci_rps,
                        cells.is_overloaded(first)))
    return found


def largest_effect(rows: Sequence[TableRow]) -> float:
    """The largest |tuned / baseline − 1| over the regimes of ``rows`` among the effects
    that may rank (:attr:`Effect.ranks`); 0 when none is significant."""
    return max((abs(e.relative) for regime_rows in regimes_of(list(rows)).values()
                for e in effects(regime_rows) if e.ranks), default=0.0)


def problem_order(rows: Sequence[TableRow]) -> list[str]:
    """The problems of ``rows``, largest significant effect first (a gain or a loss);
    those without one keep the table's order, after them."""
    problems = list(dict.fromkeys(r.problem for r in rows))
    largest = {p: largest_effect([r for r in rows if r.problem == p]) for p in problems}
    return sorted(problems, key=lambda p: -largest[p])


def kind(rows: Sequence[TableRow]) -> str:
    """``gain``, ``loss``, ``mixed`` or ``none``: the signs of a regime's significant effects."""
    signs = {e.difference > 0 for e in effects(rows) if e.significant}
    return "none" if not signs else "mixed" if len(signs) == 2 else "gain" if signs == {True} else "loss"


def verdict(rows: Sequence[TableRow], why: str | None = None) -> str:
    """A regime in words: ``+62% capacity (792 vs 488 req/s) — memory: lean admits 2×
    more requests at once (…)``, or ``no significant difference (6 of 85 cells differ)``.
    ``why`` (:func:`mechanism_text`) follows the significant effects."""
    if rows and rows[0].guard:
        return rows[0].guard  # the baseline's configs are stored: the rejected study's figures are in it
    significant = [e for e in effects(rows) if e.significant]
    if not significant:
        differing = sum(r.config != r.baseline_config for r in rows)
        return "no significant difference" + (
            f" ({differing} of {len(rows)} cells differ)" if differing else ": the same configs as the baseline")
    return "; ".join(e.text() for e in significant) + (f" — {why}" if why else "")


def _gib(value: float) -> str:
    return f"{figure(value / 2**30)} GiB"


def memory_text(problem: Any, tuned: Any, base: Any, who: str) -> str | None:
    """What the reserved workspaces leave for requests' state, when they differ: with a
    fixed state per request, how many requests fit at once (``memory: lean admits 2× more
    requests at once (8 vs 4; workspace 0 vs 16 GiB)``); else the share of memory freed."""
    from ..sim import bind

    service = problem.service
    reserved = [bind(service, a, problem.size_fields).reserved_workspace for a in (tuned, base)]
    if abs(reserved[0] - reserved[1]) <= 0.5 * 2**20:  # the threshold of tuner tune's mechanism
        return None
    room = [service.memory.budget - service.memory.fixed - r for r in reserved]
    workspace = f"workspace {_gib(reserved[0])} vs {_gib(reserved[1])}"
    per_request = service.memory.per_request
    if per_request.is_constant and per_request.evaluate({}) > 0:
        fit = [max(0, math.floor(r / per_request.evaluate({}) + 1e-9)) for r in room]
        if fit[1] > 0 and fit[0] != fit[1]:
            factor = fit[0] / fit[1]
            how = f"{factor:.3g}× more" if factor > 1 else f"{1 / factor:.3g}× fewer"
            return f"memory: {who} admits {how} requests at once ({fit[0]} vs {fit[1]}; {workspace})"
    if room[1] > 0:
        return f"memory: {workspace}, {percent(room[0] / room[1] - 1)} room for requests' state"
    return f"memory: {workspace}"


def mechanism_text(board: Any, rows: Sequence[TableRow]) -> tuple[str, str] | None:
    """What can produce a regime's difference, short and in full: the mechanism ``tuner
    tune`` reports (:func:`tuner.search.summary.mechanism`) with its memory clause worked
    out (:func:`memory_text`); the short form keeps that clause and names the others by
    their kind (``SM sharing``, ``waves``), the cells last. None without the problem file."""
    from ..search.summary import mechanism
    from ..search.space import JointSpace

    first = rows[0]
    problem = board.problem(first.problem)
    tuned = None if problem is None else board.assignment(problem, list(rows))
    if tuned is None:
        return None
    base = board.baseline(problem)
    changed = list(dict.fromkeys(r.config for r in rows if r.config != r.baseline_config))
    who = changed[0] if len(changed) == 1 else "the tuned configs"

    def compute() -> tuple[str, str]:
        cells_clause, *clauses = mechanism(JointSpace.of(problem), tuned, base).split("; ")
        memory = memory_text(problem, tuned, base, who)
        kept = [c for c in clauses if not c.startswith("memory:")]
        full = "; ".join(([memory] if memory else []) + kept + [cells_clause])
        kinds = dict.fromkeys(c.partition(":")[0] for c in kept if c.partition(":")[0] in MECHANISMS)
        return "; ".join(([memory] if memory else []) + list(kinds) + [cells_clause]), full
    return board.cached(("mechanism", problem.path, problem.file_hash, tuned, base), compute)
