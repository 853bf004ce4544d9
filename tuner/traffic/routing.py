"""Mixture-of-experts routing as part of the traffic: how an iteration's tokens spread
over the experts, which decides a fused-MoE kernel's padded blocks and weight reads.

A regime declares a :class:`Routing`: each expert's *load*, the probability that a token
is routed to it. A token goes to ``top_k`` distinct experts, so the loads sum to
``top_k`` and none exceeds 1. Isolated MoE tuners (vLLM's ``benchmark_moe.py``) time
configs on uniform random routing; serving traffic is skewed (a few popular experts),
and that changes which BLOCK_SIZE_M wastes fewer padded rows.

Per iteration the simulator draws each expert's token count for the batch's ``T``
tokens as a binomial ``Bin(T, load_e)``: exact per-expert marginals of any router that
gives expert e a token with probability ``load_e``; the experts are drawn independently,
so the routed total varies around ``T · top_k`` by its binomial spread (an idealisation:
a real router's total is exactly ``T · top_k``). The draws come from one stream per
workload seed, consumed in iteration order, so every assignment simulated on the same
seed sees the same counts for as long as its iterations match (common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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

    def __post_init__(self) -> None:
        problem = routing_problem(self.loads, self.top_k)
        if problem is not None:
            raise ValueError(problem)

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

    def counts(self, rng: np.random.Generator, tokens: int) -> tuple[int, ...]:
        """One iteration's per-expert token counts for ``tokens`` tokens."""
        if tokens <= 0:
            return tuple([0] * len(self.loads))
        return tuple(int(c) for c in rng.binomial(tokens, self.loads))


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
