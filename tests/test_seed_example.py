"""The seed example (SEED.md): the 8 ms variant wins light traffic, the 10 ms one heavy.

Expected figures come from queueing theory, not from earlier runs. Each variant is an
M/D/c queue: c = requests memory admits (lean: (72-40)/4 = 8; fast: (72-40-8·2)/4 = 4).
"""

from __future__ import annotations

import math

import pytest

from tests.test_queueing import erlang_c
from tuner.problem import resolve_assignment
from tuner.sim import simulate

GIB = 2**30


def run(problem, variant: str, regime: str):
    return simulate(problem, resolve_assignment(problem, [f"stage={variant}"]), regime, seed=2024).metrics


def test_memory_admits_eight_lean_or_four_fast_requests(seed_example):
    memory = seed_example.service.memory
    lean, fast = seed_example.families["stage"].configs
    for config, slots in ((lean, 8), (fast, 4)):
        reserved = config.profile.workspace.evaluate({}) * seed_example.service.executors
        assert math.floor((memory.budget - memory.fixed - reserved) / (4 * GIB)) == slots


def test_light_load_the_fast_variant_has_lower_latency_and_no_lower_goodput(seed_example):
    lean, fast = run(seed_example, "lean", "light"), run(seed_example, "fast", "light")
    # λ = 100/s: ρ = 0.125 (lean, c=8) and 0.2 (fast, c=4); P(wait) = Erlang C ≪ 0.5, so
    # the median request does not wait and p50 is the service time itself.
    assert erlang_c(8, 100 * 0.010) < 0.01 and erlang_c(4, 100 * 0.008) < 0.01
    assert fast.latency_p50_s == pytest.approx(0.008) and lean.latency_p50_s == pytest.approx(0.010)
    assert fast.goodput_rps >= lean.goodput_rps


def test_heavy_load_the_lean_variant_completes_at_least_1_4x_more_requests_in_time(seed_example):
    lam, deadline = 720.0, 0.100
    lean, fast = run(seed_example, "lean", "heavy"), run(seed_example, "fast", "heavy")
    # Fast: capacity c/S = 4/0.008 = 500/s < λ, so goodput ≤ 500/s whatever the queue does.
    fast_bound = 4 / 0.008
    # Lean: M/D/8 at ρ = 0.9; its wait is stochastically below M/M/8's, whose tail is
    # P(W > t) = C(8, a) e^{-(cμ-λ)t}. A request misses only if it waits over d - S.
    miss = erlang_c(8, lam * 0.010) * math.exp(-(8 / 0.010 - lam) * (deadline - 0.010))
    lean_expected = lam * (1 - miss)
    assert fast.goodput_rps <= fast_bound
    assert lean.goodput_rps >= 0.97 * lean_expected  # 3% for Poisson noise over 60 s
    assert lean_expected / fast_bound >= 1.4
    assert lean.goodput_rps >= 1.4 * fast.goodput_rps
