"""MoE routing in the traffic (``service.router``, ``regimes.*.routing``): the loads a
problem file declares, the per-iteration expert counts the simulator draws, and the
one-line errors for routings no router can produce.

Expectations come from the binomial law each count follows (mean ``T·p``, variance
``T·p·(1-p)``), not from the sampler's code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.errors import ProblemError
from tuner.traffic.routing import Routing, routing_problem
from tuner.traffic.workload import Jitter, make_workload
from tuner.traffic import Poisson


def test_uniform_and_published_shares_become_loads_summing_to_top_k() -> None:
    assert Routing.uniform(8, 2).loads == (0.25,) * 8
    skewed = Routing.from_shares([0.4, 0.2, 0.2, 0.2], top_k=2, source="a table")
    assert skewed.loads == pytest.approx((0.8, 0.4, 0.4, 0.4)) and skewed.experts == 4


@pytest.mark.parametrize("loads,top_k,reason", [
    ((0.5, 0.5, 0.5), 2, "sum to 1.5, but each token goes to top_k = 2"),
    ((1.5, 0.5), 2, "expert 0's load 1.5 is not a probability"),
    ((1.0,), 1, "at least 2 experts"),
    ((0.5, 0.5), 3, "top_k must be between 1 and the 2 experts"),
])
def test_a_routing_no_router_can_produce_is_refused(loads, top_k, reason) -> None:
    assert reason in routing_problem(loads, top_k)
    with pytest.raises(ValueError, match=reason.split(",")[0]):
        Routing(loads, top_k)


def test_expected_counts_keep_the_routed_total() -> None:
    # 7 tokens x loads (0.8, 0.6, 0.4, 0.2) = 5.6, 4.2, 2.8, 1.4: floors 5, 4, 2, 1 (12 of 14);
    # the two largest remainders (0.8 and 0.6: experts 2 and 0) get one more each
    assert Routing((0.8, 0.6, 0.4, 0.2), 2).expected(7) == (6, 4, 3, 1)
    assert sum(Routing.uniform(128, 8).expected(5)) == 40


def test_each_experts_count_follows_its_binomial_law() -> None:
    routing = Routing.from_shares([0.5, 0.25, 0.125, 0.125], top_k=2, source="test")
    rng = np.random.default_rng(7)
    tokens, draws = 512, 4000
    counts = np.array([routing.counts(rng, tokens) for _ in range(draws)])
    for e, p in enumerate(routing.loads):   # loads 1.0, 0.5, 0.25, 0.25
        mean, var = tokens * p, tokens * p * (1 - p)
        assert abs(counts[:, e].mean() - mean) <= 5 * math.sqrt(var / draws) + 1e-12
    assert (counts[:, 0] == tokens).all()   # load 1: every token goes there
    assert (counts.sum(axis=1) == tokens * 2).all()   # each token to exactly top_k experts
    assert (counts <= tokens).all()
    assert routing.counts(rng, 0) == (0, 0, 0, 0)


def test_every_assignment_of_a_seed_draws_the_same_counts() -> None:
    """Common random numbers: the workload carries a seed, not a generator, so each
    simulation starts the routing stream afresh; another seed draws another stream; the
    arrivals are those of a workload without routing (a fourth seed stream, not a shift)."""
    routing = Routing.uniform(8, 2)

    def workload(seed: int, with_routing: bool = True):
        return make_workload(Poisson(10.0), None, Jitter(), 5.0, seed, routing=routing if with_routing else None)

    def stream(w) -> list[tuple[int, ...]]:
        rng = np.random.default_rng(w.routing_seed)
        return [routing.counts(rng, t) for t in (3, 50, 700)]

    assert stream(workload(1)) == stream(workload(1))
    assert stream(workload(1)) != stream(workload(2))
    assert np.array_equal(workload(1).arrivals_s, workload(1, with_routing=False).arrivals_s)
    assert workload(1, with_routing=False).routing_seed is None


MOE = """
name: moe
service:
  batching: continuous
  max_batch: 4
  max_tokens: 64
  router: {{experts: 4, top_k: 2}}
  memory: {{budget: 10 GiB, fixed: 1 GiB, per_request: MiB * (prompt + output)}}
  operators:
    - {{name: experts, family: f, shape: {{T: tokens}}}}
  slo: {{ttft: 1 s, tpot: 1 s}}
families:
  f:
    space: {{v: [1]}}
    configs: [{{name: one, params: {{v: 1}}, profile: {{latency: 1 ms, sm: 0.5}}}}]
regimes:
  skewed:
    arrivals: {{process: poisson, rate: 5}}
    sizes: {{prompt: {{dist: fixed, value: 8}}, output: {{dist: fixed, value: 4}}}}
    horizon: 5 s
{routing}
"""


def write(tmp_path, text: str):
    from tuner.problem import load_problem

    path = tmp_path / "moe.yaml"
    path.write_text(text)
    return load_problem(path)


def test_a_regime_declares_its_routing_with_a_source(tmp_path) -> None:
    problem = write(tmp_path, MOE.format(routing="    routing: {shares: [0.4, 0.3, 0.2, 0.1], source: a table}"))
    routing = problem.regimes["skewed"].routing
    assert routing.loads == pytest.approx((0.8, 0.6, 0.4, 0.2)) and routing.source == "a table"
    uniform = write(tmp_path, MOE.format(routing=""))
    assert uniform.regimes["skewed"].routing == Routing.uniform(4, 2)
    # the routing is part of the traffic's shape: capacities are not shared across routings
    assert problem.regimes["skewed"].shape_key != uniform.regimes["skewed"].shape_key


@pytest.mark.parametrize("routing,message", [
    ("    routing: {shares: [0.5, 0.3, 0.1, 0.05, 0.05], source: t}",
     "regimes.skewed.routing.shares: 5 experts, but service.router has 4"),
    ("    routing: {loads: [0.5, 0.5, 0.5, 0.25], source: t}",
     "regimes.skewed.routing.loads: the loads sum to 1.75, but each token goes to top_k = 2 experts"),
    ("    routing: {shares: [0.5, 0.3, 0.1, 0.05], source: t}",
     "regimes.skewed.routing.shares: the shares sum to 0.95, not 1"),
    ("    routing: {loads: [0.5, 0.5, 0.5, 0.5], source: t, modle: mixtral}",
     "regimes.skewed.routing"),
    ("    routing: {loads: [0.5, 0.5, 0.5, 0.5]}", "regimes.skewed.routing"),
])
def test_a_bad_routing_is_one_line_naming_the_key(tmp_path, routing: str, message: str) -> None:
    with pytest.raises(ProblemError) as raised:
        write(tmp_path, MOE.format(routing=routing))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_routing_without_a_router_is_refused(tmp_path) -> None:
    text = MOE.format(routing="    routing: uniform").replace("  router: {experts: 4, top_k: 2}\n", "")
    with pytest.raises(ProblemError, match="regimes.skewed.routing: no service.router declares the experts"):
        write(tmp_path, text)


def test_a_simulation_with_a_router_runs_and_repeats_itself(tmp_path) -> None:
    from tuner.problem.assignment import Assignment
    from tuner.sim import simulate

    problem = write(tmp_path, MOE.format(routing="    routing: {shares: [0.4, 0.3, 0.2, 0.1], source: t}"))
    runs = [simulate(problem, Assignment.default(problem), "skewed", seed=3).metrics for _ in range(2)]
    assert runs[0] == runs[1] and runs[0].completed > 0


ROUTED_FAMILY = """
name: moe_family
device: {{name: h100}}
service:
  batching: continuous
  max_batch: 4
  max_tokens: 64
  router: {{experts: 8, top_k: 2}}
  memory: {{budget: 10 GiB, fixed: 1 GiB, per_request: MiB * (prompt + output)}}
  operators:
    - {{name: experts, family: moe, shape: {{M: {m}, N: 256, K: 512}}}}
  slo: {{ttft: 1 s, tpot: 1 s}}
families:
  moe:
    kernel: fused_moe
    options: {{experts: {experts}, top_k: 2}}
    space: {{BLOCK_SIZE_M: [16], BLOCK_SIZE_N: [64], BLOCK_SIZE_K: [64], GROUP_SIZE_M: [1], num_warps: [4], num_stages: [2]}}
regimes:
  one:
    arrivals: {{process: poisson, rate: 5}}
    sizes: {{prompt: {{dist: fixed, value: 8}}, output: {{dist: fixed, value: 4}}}}
    horizon: 5 s
"""


@pytest.mark.parametrize("m,experts,message", [
    ("tokens", 16, "families.moe.options.experts: 16, but service.router has experts 8"),
    ("batch", 8, "service.operators[0].shape.M: a routed MoE operator's M must be tokens"),
])
def test_a_moe_family_off_the_router_is_one_line(tmp_path, m: str, experts: int, message: str) -> None:
    with pytest.raises(ProblemError) as raised:
        write(tmp_path, ROUTED_FAMILY.format(m=m, experts=experts))
    assert message in str(raised.value) and "\n" not in str(raised.value)


CONCENTRATED = """
name: moe_baselines
device: {name: h100}
service:
  batching: continuous
  max_batch: 64
  max_tokens: 64
  router: {experts: 8, top_k: 2}
  memory: {budget: 10 GiB, fixed: 1 GiB, per_request: MiB * (prompt + output)}
  operators:
    - {name: experts, family: moe, shape: {M: tokens, N: 1024, K: 2048}, buckets: {M: [64]}}
  slo: {ttft: 1 s, tpot: 1 s}
families:
  moe:
    kernel: fused_moe
    options: {experts: 8, top_k: 2}
    space: {BLOCK_SIZE_M: [16, 32], BLOCK_SIZE_N: [64], BLOCK_SIZE_K: [64, 128], GROUP_SIZE_M: [1], num_warps: [4], num_stages: [4]}
regimes:
  concentrated:
    arrivals: {process: poisson, rate: 5}
    sizes: {prompt: {dist: fixed, value: 8}, output: {dist: fixed, value: 4}}
    horizon: 5 s
    routing: {loads: [1, 1, 0, 0, 0, 0, 0, 0], source: every token to experts 0 and 1}
"""


def test_the_routing_aware_baseline_times_the_regimes_routing(tmp_path) -> None:
    """The bucket's 64 tokens, top-2 of 8: THE baseline times each config on uniform
    routing (16 (token, expert) pairs per expert), the routing-aware one on the regime's
    (64 pairs on each of experts 0 and 1). Each must keep the config its routing makes
    fastest, timed here straight from the profiles; on this space the two differ (the
    concentrated batch has 4x the rows per expert, so larger tiles pay), or the test
    would not tell them apart."""
    from tuner.search.baselines import PER_BUCKET, routing_aware
    from tuner.search.space import JointSpace

    problem = write(tmp_path, CONCENTRATED)
    shape = {"M": 64, "N": 1024, "K": 2048}

    def fastest(counts: tuple[int, ...]) -> str:
        def seconds(config) -> float:
            timing = config.profile.at(shape, extras=(("expert_counts", counts),))
            return sum(t.latency_s for t in timing.timings)
        return min(problem.families["moe"].configs, key=seconds).name

    space = JointSpace.of(problem)
    uniform = PER_BUCKET.assignment(space).config("experts", 0).name
    aware = routing_aware(space, problem.regimes["concentrated"].routing).config("experts", 0).name
    assert uniform == fastest((16,) * 8)
    assert aware == fastest((64, 64, 0, 0, 0, 0, 0, 0))
    assert aware != uniform
