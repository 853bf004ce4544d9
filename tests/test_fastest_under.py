"""The one rule for "the fastest config under a workspace cap" (``tuner.search.space.fastest_under``),
checked against picks worked by hand, and the three places that use it: the isolated-fastest
baseline, the footprint ladder and the sampler's cap move."""

from __future__ import annotations

import math

import pytest

from tuner.problem.model import Config
from tuner.search.space import CellCost, fastest_under


def cost(name: str, latency_s: float | None, workspace: float) -> CellCost:
    config = Config(family="f", name=name, params=(("X", name),), profile=None)  # type: ignore[arg-type]
    return CellCost(config, latency_s, latency_s, workspace, sm=1.0, dram=0.0)


#: "illegal" is the fastest and smallest, but cannot run the bucket (no latency there).
ILLEGAL = cost("illegal", None, 0.0)
SLOW_SMALL = cost("slow_small", 3.0, 10.0)
MID = cost("mid", 2.0, 20.0)
FAST_BIG = cost("fast_big", 1.0, 40.0)
FAST_BIG_TWIN = cost("fast_big_twin", 1.0, 40.0)


@pytest.mark.parametrize(("cap", "expected"), [
    (math.inf, "fast_big"),  # the fastest of all: the isolated-fastest pick
    (40.0, "fast_big"),  # the cap is inclusive
    (39.0, "mid"),  # the fastest of those needing <= 39 bytes
    (10.0, "slow_small"),
    (5.0, "slow_small"),  # nothing legal fits: the one needing the least, never the illegal one
])
def test_fastest_under_picks_by_hand(cap, expected):
    picked = fastest_under([ILLEGAL, SLOW_SMALL, MID, FAST_BIG, FAST_BIG_TWIN], cap)
    assert picked is not None and picked.config.name == expected


def test_an_illegal_config_is_never_picked_and_ties_go_to_the_first():
    assert fastest_under([ILLEGAL]) is None
    assert fastest_under([FAST_BIG_TWIN, FAST_BIG]).config.name == "fast_big_twin"  # type: ignore[union-attr]
    smaller_tie = cost("smaller_tie", 1.5, 10.0)  # as small as slow_small, and faster: the better fallback
    assert fastest_under([SLOW_SMALL, smaller_tie], cap=1.0).config.name == "smaller_tie"  # type: ignore[union-attr]


def test_the_baseline_the_ladder_and_the_sampler_follow_the_rule():
    """On a real problem: the isolated-fastest pick is the rule's over all configs; every
    rung of the footprint ladder is, cell by cell, the rule's pick among the candidates at
    one of the caps; the sampler's cap moves only ever propose legal configs in the
    buckets the service reaches."""
    import numpy as np

    from tuner.problem import load_problem
    from tuner.search import JointSpace
    from tuner.search.baselines import footprint_ladder
    from tuner.search.local import LocalSearchSampler
    from tuner.search.space import fastest_in_cell

    from tests.conftest import ROOT

    space = JointSpace.of(load_problem(ROOT / "search_spaces" / "llm_decode.yaml"))
    for i in range(len(space.cells)):
        if space.reached(i):
            assert fastest_in_cell(space, i) is fastest_under(space.costs[i])
    caps = sorted({c.workspace for costs in space.costs for c in costs if c.legal})
    ladder = footprint_ladder(space)
    assert len(ladder) >= 2
    for rung in ladder:
        point = space.point_of(rung)
        assert any(all(fastest_under([space.cost(i, n) for n in space.choices[i]], cap).config.name == name
                       for i, name in enumerate(point)) for cap in caps)
    sampler = LocalSearchSampler(space, lambda study: None, seed=0)
    rng = np.random.RandomState(0)
    for _ in range(200):
        point = tuple(space.choices[i][rng.randint(len(space.choices[i]))] for i in range(len(space.cells)))
        moved = sampler._cap_move(point, list(space.free))
        assert all(space.cost(i, name).legal for i, name in enumerate(moved) if space.reached(i))
