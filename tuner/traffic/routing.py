"""Mixture-of-experts routing as part of the traffic: how an iteration's tokens spread
over the experts, which decides a fused-MoE kernel's padded blocks and weight reads.

A regime declares a :class:`Routing`: each expert's *load*, the probability that a token
is routed to it. A token goes to ``top_k`` distinct experts, so the loads sum to
``top_k`` and none exceeds 1. Isolated MoE tuners (vLLM's ``benchmark_moe.py``) time
configs on uniform random routing; serving traffic is skewed (a few popular experts),
and that changes which BLOCK_SIZE_M wastes fewer padded rows.

Per iteration the simulator draws the per-expert token counts of the batch's ``T``
tokens as systematic sampling does (Madow): lay the loads end to end on ``[0, top_k)``
and give each token one uniform ``u``; it goes to the experts whose intervals hold
``u, u + 1, …, u + top_k - 1``. That is exactly ``top_k`` distinct experts per token, and
expert e gets a token with probability exactly ``load_e``, so every count has its
binomial marginal ``Bin(T, load_e)`` and the counts sum to ``T · top_k``. What it
idealises: which experts a token pairs with follows the experts' order on the line (a
real router's co-selections follow the token); a fused-MoE kernel's cost depends on the
counts, not on the pairs. The counts of all ``T`` tokens are one multinomial draw over
the segments the loads cut the unit circle into, so an iteration costs O(experts), not
O(T). The draws come from one stream per workload seed, consumed in iteration order,
so every assignment simulated on the same seed sees the same counts for as long as its
iterations match (common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: How far the loads' sum may stray from top_k (rounding of a published table).
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Routing:
    """Per-expert loads (each the probability a token goes to that expert; they sum to
    ``top_k``) and where they come from."""

    loads: tuple[float, ...]
    top_k: int
    source: str = "uniform"
    # the segments the loads cut the unit circle into, and which experts cover each
    _segments: np.ndarray = field(init=False, repr=False, compare=False)
    _cover: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = routing_problem(self.loads, self.top_k)
        if problem is not None:
            raise ValueError(problem)
        ends = np.cumsum(self.loads) * (self.top_k / math.fsum(self.loads))
        starts = np.concatenate(([0.0], ends[:-1]))
        cuts = np.unique(np.concatenate(([0.0, 1.0], np.mod(ends, 1.0))).round(12))
        lengths = np.diff(cuts)
        middles = cuts[:-1] + lengths / 2
        # expert e covers a segment when one of middle, middle + 1, ... lies in [start_e, end_e)
        points = middles[None, :, None] + np.arange(self.top_k)[None, None, :]
        cover = ((points >= starts[:, None, None]) & (points < ends[:, None, None])).any(axis=2)
        object.__setattr__(self, "_segments", lengths / lengths.sum())
        object.__setattr__(self, "_cover", cover.astype(np.int64))

    @classmethod
    def uniform(cls, experts: int, top_k: int) -> Routing:
        """Every expert equally likely: what ``benchmark_moe.py`` tunes on."""
        return cls(tuple([top_k / experts] * experts), top_k, "uniform")

    @classmethod
    def from_shares(cls, shares: Sequence[float], top_k: int, source: str) -> Routing:
        """Loads from per-expert shares of the routed tokens (summing to 1), as expert-load
        measurements are usually published."""
        total = math.fsum(shares)
        return cls(tuple(top_k * share / total for share in shares), top_k, source)

    @property
    def experts(self) -> int:
        return len(self.loads)

    def expected(self, tokens: int) -> tuple[int, ...]:
        """Each expert's expected count for ``tokens`` tokens, rounded so they still sum
        to ``tokens · top_k`` (largest remainders first): the routing an isolated tuner
        that knew the traffic's routing would time a config on."""
        exact = [tokens * load for load in self.loads]
        counts = [min(tokens, math.floor(x)) for x in exact]
        short = tokens * self.top_k - sum(counts)
        for e in sorted(range(len(exact)), key=lambda e: (counts[e] - exact[e], e))[:max(0, short)]:
            counts[e] += 1
        return tuple(counts)

    def counts(self, rng: np.random.Generator, tokens: int) -> tuple[int, ...]:
        """One iteration's per-expert token counts for ``tokens`` tokens (see the module)."""
        if tokens <= 0:
            return tuple([0] * len(self.loads))
        return tuple(int(c) for c in self._cover @ rng.multinomial(tokens, self._segments))


def routing_problem(loads: Sequence[float], top_k: int) -> str | None:
    """Why ``loads`` cannot be a router's (None when they can)."""
    if len(loads) < 2:
        return f"a router needs at least 2 experts, got {len(loads)}"
    if not 1 <= top_k <= len(loads):
        return f"top_k must be between 1 and the {len(loads)} experts, got {top_k}"
    for e, load in enumerate(loads):
        if not (math.isfinite(load) and 0.0 <= load <= 1.0 + SUM_TOLERANCE):
            return f"expert {e}'s load {load!r} is not a probability (0 to 1)"
    total = math.fsum(loads)
    if abs(total - top_k) > SUM_TOLERANCE * top_k:
        return f"the loads sum to {total:.4g}, but each token goes to top_k = {top_k} experts"
    return None
