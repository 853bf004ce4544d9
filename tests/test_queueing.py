"""The service layer against closed-form queueing results (long horizons, fixed seeds).

With one operator, one request per batch and kernels too small to interfere, the
service is an M/G/c queue whose c servers are the requests memory admits at once.
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import single_stage
from tuner.problem.assignment import Assignment
from tuner.sim import simulate


def erlang_c(c: int, offered: float) -> float:
    """Probability that an arrival waits in M/M/c (offered load a = λ/μ)."""
    rho = offered / c
    term = 1.0
    total = 1.0
    for k in range(1, c):
        term *= offered / k
        total += term
    top = term * offered / c / (1 - rho)
    return top / (total + top)


def mmc_sojourn_cdf(t: float, c: int, lam: float, mu: float) -> float:
    """P(T ≤ t) for the sojourn T = W + S of M/M/c FIFO.

    W is 0 with probability 1 − C, else Exp(γ) with γ = cμ − λ; S ~ Exp(μ) independent,
    and P(Exp(γ) + Exp(μ) > t) = (γ e^{−μt} − μ e^{−γt}) / (γ − μ).
    """
    erlang = erlang_c(c, lam / mu)
    gamma = c * mu - lam
    tail_no_wait = math.exp(-mu * t)
    tail_wait = (gamma * math.exp(-mu * t) - mu * math.exp(-gamma * t)) / (gamma - mu)
    return 1.0 - ((1 - erlang) * tail_no_wait + erlang * tail_wait)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(write_problem, rho):
    service = 0.010
    lam = rho / service
    problem = write_problem(single_stage("10 ms", slots=1, rate=lam, horizon="3000 s"))
    metrics = simulate(problem, Assignment.default(problem), "steady", seed=11).metrics
    expected = rho * service / (2 * (1 - rho))  # P-K with deterministic service (C_s² = 0)
    assert metrics.wait_mean_s == pytest.approx(expected, rel=0.03)
    assert metrics.latency_p50_s >= service


def test_mmc_mean_wait_matches_erlang_c(write_problem):
    c, service, lam = 4, 0.010, 320.0  # ρ = 0.8
    mu = 1 / service
    problem = write_problem(single_stage("10 ms", slots=c, executors=8, rate=lam,
                                         jitter={"kind": "exponential", "cv": 1}, horizon="1500 s"))
    metrics = simulate(problem, Assignment.default(problem), "steady", seed=5).metrics
    expected = erlang_c(c, lam / mu) / (c * mu - lam)
    assert metrics.admitted_max == c  # memory, not executors, sets the servers
    assert metrics.wait_mean_s == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("deadline_ms", [15, 30, 60])
def test_mmc_deadline_attainment_matches_sojourn_distribution(write_problem, deadline_ms):
    c, service, lam = 4, 0.010, 320.0
    problem = write_problem(single_stage("10 ms", slots=c, executors=8, rate=lam, deadline=f"{deadline_ms} ms",
                                         jitter={"kind": "exponential", "cv": 1}, horizon="1500 s"))
    metrics = simulate(problem, Assignment.default(problem), "steady", seed=5).metrics
    expected = mmc_sojourn_cdf(deadline_ms / 1000, c, lam, 1 / service)
    assert metrics.slo_attainment == pytest.approx(expected, abs=0.02)
    assert metrics.goodput_rps == pytest.approx(expected * lam, rel=0.04)
