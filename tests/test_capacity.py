"""Capacity at the SLO (:mod:`tuner.search.capacity`) against closed-form queueing results,
its exact monotonicity properties, and the window-accounting of goodput.

The closed-form capacity λ* of a queue is the rate at which the stationary probability of
meeting the deadline equals the attainment target: P(sojourn ≤ d; λ*) = target, solved with
Brent's method. The simulated capacity of a seed is the geometric midpoint of a bracket of
relative width ≤ REL_TOL that holds that seed's crossing, so it lies within a factor
√(1 + REL_TOL) (≈ REL_TOL/2) of the crossing, and the crossings scatter around λ* by the
sampling error of the attainment over the judged window; the tolerance is the sum of both.
"""

from __future__ import annotations

import copy
import math
import statistics
from decimal import Decimal, localcontext
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from scipy.optimize import brentq
from scipy.stats import t as student_t

from tests.conftest import ROOT, SEED_EXAMPLE, single_stage
from tests.test_queueing import mmc_sojourn_cdf
from tuner.problem.scenario import Scenario
from tuner.problem import load_problem, resolve_assignment
from tuner.problem.assignment import Assignment
from tuner.search.capacity import (
    MAX_EXPAND, MAX_PROBE_ARRIVALS, REL_TOL, ceiling_rate, seed_capacity, start_rate,
)
from tuner.search.evaluate import evaluate
from tuner.stats import ci_half_width
from tuner.sim import simulate

TARGET = 0.9
SERVICE_S = 0.010
MU = 1 / SERVICE_S
# The midpoint of a bracket [low, high] with high/low ≤ 1 + REL_TOL is within this factor
# of any point of the bracket.
HALF_BRACKET = math.sqrt(1 + REL_TOL) - 1


# --- closed forms -------------------------------------------------------------------------


def md1_wait_cdf(t: float, lam: float, service: float) -> float:
    """P(W ≤ t) for the waiting time W of M/D/1 FIFO (Erlang's formula):

        (1 − ρ) Σ_{k=0}^{⌊t/D⌋} [λ(kD − t)]^k / k! · e^{−λ(kD − t)}.

    The terms alternate in sign and grow like e^{2λt} while the sum stays ≤ 1, so in
    floating point the cancellation loses ~2λt/ln 10 digits. The sum is taken in decimal
    arithmetic with that many digits more than double precision needs: exact enough for
    any t, so the self-check below can integrate the tail far out.
    """
    if t < 0:
        return 0.0
    rho = lam * service
    with localcontext() as ctx:
        ctx.prec = 30 + int(2 * lam * t / math.log(10))
        lam_d, t_d, service_d = Decimal(lam), Decimal(t), Decimal(service)
        total, factorial = Decimal(0), Decimal(1)
        for k in range(int(math.floor(t / service)) + 1):
            if k:
                factorial *= k
            x = lam_d * (k * service_d - t_d)
            total += (x**k if k else Decimal(1)) / factorial * (-x).exp()  # 0^0 = 1
        return float((1 - Decimal(rho)) * total)


def md1_mean_wait_by_integration(lam: float, service: float) -> float:
    """∫₀^∞ (1 − P(W ≤ t)) dt, by 10-point Gauss–Legendre on each [kD, (k+1)D] (where the
    CDF is one smooth expression), up to where the tail e^{−ηt} is below e^{−30}; η solves
    ρ(e^{ηD} − 1) = ηD (the decay rate of the M/D/1 waiting-time tail)."""
    rho = lam * service
    eta = brentq(lambda x: rho * math.expm1(x) - x, 1e-9, 50.0) / service
    nodes, weights = np.polynomial.legendre.leggauss(10)
    total = 0.0
    for k in range(math.ceil(30 / (eta * service))):
        mid, half = (k + 0.5) * service, 0.5 * service
        total += half * sum(w * (1 - md1_wait_cdf(mid + half * x, lam, service)) for x, w in zip(nodes, weights))
    return total


def solve_capacity(attainment, upper: float) -> float:
    """The rate in (0, upper) at which ``attainment(rate)`` equals TARGET."""
    return brentq(lambda lam: attainment(lam) - TARGET, 1e-6, upper * (1 - 1e-9), xtol=1e-10)


def slope_at(attainment, lam: float) -> float:
    """−d attainment / dλ at λ (central difference): converts attainment error into rate error."""
    h = 1e-3 * lam
    return (attainment(lam - h) - attainment(lam + h)) / (2 * h)


def sampling_halfwidth(lam: float, slope: float, window_s: float, seeds: int,
                       c: int, mu: float, ca2: float, cs2: float) -> float:
    """A model of the 95% half-width of the mean over ``seeds`` of the per-seed crossing
    rates, used when the seeds' own CI is missing or degenerate.

    Why it can be degenerate: every seed searches the same grid of rates (same start, same
    bisection), so when λ* sits near a grid point all seeds can return the same value and
    the sample CI is 0 although the crossings differ. The model: the attainment over a
    judged window of n = λ·window requests has the variance of a binomial proportion
    target(1 − target)/n, inflated because consecutive requests share a queue state. In
    heavy traffic (reflected Brownian motion with drift −(cμ − λ) and variance λ(Ca² + Cs²))
    the queue forgets its state over τ ≈ λ(Ca² + Cs²)/(cμ − λ)², i.e. ~2λτ requests at a
    time share one fate. (Checked against 20 seeds: the model gives the measured spread of
    M/D/1 crossings and ~1.7× that of M/M/4, so it errs on the loose side.) Dividing by the
    slope turns attainment error into rate error.
    """
    tau = lam * (ca2 + cs2) / (c * mu - lam) ** 2
    inflation = 1 + 2 * lam * tau
    sigma_attainment = math.sqrt(TARGET * (1 - TARGET) * inflation / (lam * window_s))
    quantile = student_t.ppf(0.975, seeds - 1) if seeds > 1 else 1.96
    return quantile * sigma_attainment / slope / math.sqrt(seeds)


def assert_capacity_matches(evaluation, expected: float, model_halfwidth: float) -> None:
    """|mean capacity − λ*| ≤ search tolerance + the CI over seeds (the model's half-width
    instead when the CI is None or under a quarter of what sampling alone should give)."""
    ci = evaluation.ci
    spread = ci if ci is not None and ci >= model_halfwidth / 4 else model_halfwidth
    tolerance = HALF_BRACKET * expected + spread
    assert abs(evaluation.mean - expected) <= tolerance, (
        f"simulated capacity {evaluation.mean:.2f} ± {spread:.2f} (values {evaluation.values}) "
        f"vs closed form {expected:.2f}: off by {abs(evaluation.mean - expected):.2f} > {tolerance:.2f}")


# --- 1. M/M/c ------------------------------------------------------------------------------


def test_mmc_capacity_matches_the_sojourn_time_distribution(write_problem):
    """M/M/4, exponential 10 ms service, deadline 30 ms, target 0.9: λ* solves
    mmc_sojourn_cdf(30 ms, 4, λ, μ) = 0.9 (Erlang C waiting time plus the exponential
    service, tests/test_queueing.py); λ* ≈ 281.9 req/s (ρ ≈ 0.70)."""
    c, deadline, horizon, seeds = 4, 0.030, 120.0, [1, 2, 3, 4]
    attainment = lambda lam: mmc_sojourn_cdf(deadline, c, lam, MU)  # noqa: E731
    expected = solve_capacity(attainment, c * MU)
    assert mmc_sojourn_cdf(deadline, c, expected, MU) == pytest.approx(TARGET, abs=1e-9)

    problem = write_problem(single_stage("10 ms", slots=c, executors=8, rate=300.0, deadline="30 ms",
                                         jitter={"kind": "exponential", "cv": 1}, horizon=f"{horizon:g} s"))
    assert problem.service.slo.attainment == TARGET  # the default target
    # (The search starts at the regime's rate; starting above λ* keeps every probe below 2λ*.)
    found = evaluate(Scenario.of(problem, "steady", seeds, horizon), Assignment.default(problem), metric="capacity")

    window = horizon * 0.9  # the judged part of the window (10% warm-up)
    model = sampling_halfwidth(expected, slope_at(attainment, expected), window, len(seeds), c, MU, 1.0, 1.0)
    assert_capacity_matches(found, expected, model)


# --- 2. M/D/1 ------------------------------------------------------------------------------


def test_md1_waiting_time_cdf_integrates_to_the_pollaczek_khinchine_mean():
    """Self-check of md1_wait_cdf: ∫(1 − F) = E[W] = ρD / (2(1 − ρ)) (P-K, Cs² = 0), at the
    load of the capacity test below and at a light one."""
    for rho in (0.3, 0.69):
        lam = rho / SERVICE_S
        expected = rho * SERVICE_S / (2 * (1 - rho))
        assert md1_mean_wait_by_integration(lam, SERVICE_S) == pytest.approx(expected, rel=1e-9)
    assert md1_wait_cdf(0.0, 50.0, SERVICE_S) == pytest.approx(0.5)  # P(W = 0) = 1 − ρ


def test_md1_capacity_matches_erlangs_waiting_time_formula(write_problem):
    """M/D/1, 10 ms service, deadline 40 ms, target 0.9: sojourn = W + D, so the attainment
    is P(W ≤ 30 ms) from Erlang's formula; λ* ≈ 69.40 req/s (ρ ≈ 0.69)."""
    deadline, horizon, seeds = 0.040, 240.0, [1, 2, 3, 4, 5]
    attainment = lambda lam: md1_wait_cdf(deadline - SERVICE_S, lam, SERVICE_S)  # noqa: E731
    expected = solve_capacity(attainment, MU)
    # The mean wait at λ* agrees with P-K (the formula is right at this very load).
    rho = expected * SERVICE_S
    assert md1_mean_wait_by_integration(expected, SERVICE_S) == pytest.approx(rho * SERVICE_S / (2 * (1 - rho)), rel=1e-9)

    problem = write_problem(single_stage("10 ms", slots=1, rate=75.0, deadline="40 ms", horizon=f"{horizon:g} s"))
    found = evaluate(Scenario.of(problem, "steady", seeds, horizon), Assignment.default(problem), metric="capacity")

    window = horizon * 0.9
    model = sampling_halfwidth(expected, slope_at(attainment, expected), window, len(seeds), 1, MU, 1.0, 0.0)
    assert_capacity_matches(found, expected, model)


# --- 3. monotonicity, per seed -----------------------------------------------------------

MONO_SEEDS = [1, 2, 3]
MONO_HORIZON = 20.0


def capacities(problem) -> tuple[float, ...]:
    return evaluate(Scenario.of(problem, "steady", MONO_SEEDS, MONO_HORIZON), Assignment.default(problem), metric="capacity").values


def assert_non_decreasing(rows: list[tuple[float, ...]], labels: list[str]) -> None:
    for (low_label, low), (high_label, high) in zip(zip(labels, rows), zip(labels[1:], rows[1:])):
        for seed, a, b in zip(MONO_SEEDS, low, high):
            assert b >= a, f"seed {seed}: capacity {b:.3f} at {high_label} < {a:.3f} at {low_label}"


def test_capacity_is_monotone_in_the_deadline_per_seed(write_problem):
    """A deadline only judges (the run is the same), so a looser one attains at least as much
    at every rate of a seed; the search path depends only on the pass/fail answers, so each
    seed's capacity is non-decreasing (capacity.py's docstring) — exactly, not on average.
    Deadlines from 25 ms: below 23 ms (= −ln 0.1 · 10 ms) even an idle server misses the
    target with exponential service, and the "capacity" is whatever tiny rate happens to
    judge a handful of lucky requests."""
    rows = [capacities(write_problem(single_stage("10 ms", slots=4, rate=200.0, deadline=f"{d} ms",
                                                  jitter={"kind": "exponential", "cv": 1})))
            for d in (25, 30, 40, 60)]
    assert_non_decreasing(rows, ["25 ms", "30 ms", "40 ms", "60 ms"])
    assert all(b > a for a, b in zip(rows[0], rows[-1]))  # and the deadline matters at all


def test_capacity_is_monotone_in_the_number_of_executors_per_seed(write_problem):
    """FIFO G/G/c on one sample path (same arrivals, same per-request service times): with
    more servers every request starts no later, so attainment at each rate is no lower and,
    as above, each seed's capacity no lower. Memory admits 4; executors are the servers;
    kernels use 0.1 of the SMs each, so 4 together do not slow one another."""
    rows = [capacities(write_problem(single_stage("10 ms", slots=4, executors=c, rate=200.0, deadline="30 ms",
                                                  jitter={"kind": "exponential", "cv": 1})))
            for c in (1, 2, 4)]
    assert_non_decreasing(rows, ["1 executor", "2 executors", "4 executors"])


def test_capacity_is_monotone_in_the_memory_budget_per_seed(write_problem):
    """As above with 4 executors and the budget admitting 1, 2 or 4 requests (1 GiB each):
    a larger budget admits every request no later, so capacity per seed is non-decreasing."""
    rows = [capacities(write_problem(single_stage("10 ms", slots=c, executors=4, rate=200.0, deadline="30 ms",
                                                  jitter={"kind": "exponential", "cv": 1})))
            for c in (1, 2, 4)]
    assert_non_decreasing(rows, ["1 GiB", "2 GiB", "4 GiB"])


# --- 4. horizon robustness and window accounting ------------------------------------------

HORIZON_SEEDS = [1, 2, 3, 4, 5]


def assert_accounting(metrics, horizon: float) -> None:
    """One accounting base: judged = arrivals in [warm-up, window); each judged request is
    followed through the drain, so completions of judged requests can't exceed them."""
    assert metrics.warmup_s == pytest.approx(0.1 * horizon)
    assert metrics.arrival_rate_rps == pytest.approx(metrics.judged / (horizon - metrics.warmup_s))
    assert metrics.goodput_rps <= metrics.throughput_rps <= metrics.arrival_rate_rps * (1 + 1e-12)
    assert metrics.slo_attainment * metrics.arrival_rate_rps == pytest.approx(metrics.goodput_rps, rel=1e-12)


def seed_example_variant(**regimes) -> dict:
    """The seed example (lean 10 ms × 8 slots vs fast 8 ms × 4 slots) with a 15 ms deadline,
    so that the two differ below saturation too, and the given regimes."""
    document = copy.deepcopy(yaml.safe_load(SEED_EXAMPLE.read_text()))
    document["service"]["slo"] = {"deadline": "15 ms"}
    document["regimes"] = regimes
    return document


def test_stable_goodput_ratio_does_not_depend_on_the_horizon(write_problem):
    """At 350 req/s the fast variant (what the per-bucket isolated-fastest baseline picks, M/D/4
    with 8 ms) runs at ρ = 0.70 and the lean one (M/D/8, 10 ms) at ρ = 0.44: both stationary,
    so the per-seed paired lean/fast goodput ratio estimates one number whatever the window
    — its 95% CIs at 20 s and 60 s overlap — and no seed is flagged overloaded."""
    problem = write_problem(seed_example_variant(
        stable={"arrivals": {"process": "poisson", "rate": 350}, "horizon": "60 s"}))
    lean, fast = (resolve_assignment(problem, [f"stage={v}"]) for v in ("lean", "fast"))
    summary = {}
    for horizon in (20.0, 60.0):
        ratios = []
        for seed in HORIZON_SEEDS:
            a = simulate(problem, lean, "stable", seed=seed, horizon_s=horizon).metrics
            b = simulate(problem, fast, "stable", seed=seed, horizon_s=horizon).metrics
            for metrics in (a, b):
                assert not metrics.overloaded, (horizon, seed, metrics.backlog_growth)
                assert_accounting(metrics, horizon)
                assert metrics.throughput_rps == metrics.arrival_rate_rps  # everything drains
            ratios.append(a.goodput_rps / b.goodput_rps)
        summary[horizon] = (statistics.fmean(ratios), ci_half_width(ratios))
    (m20, ci20), (m60, ci60) = summary[20.0], summary[60.0]
    # the deadline binds for fast (~6% of its requests wait > 7 ms): the ratio is not trivially 1
    assert m20 - 1 > ci20 and m60 - 1 > ci60, summary
    assert abs(m20 - m60) <= ci20 + ci60, summary


def test_overloaded_regime_is_flagged_and_its_goodput_depends_on_the_horizon(write_problem):
    """M/D/1 at 150 req/s with 10 ms service: ρ = 1.5, the backlog grows ~75 requests/s, so
    the wait of a request arriving at t is ≈ 0.5·t. With a 2 s deadline only arrivals before
    ≈ 4 s meet it: the judged window [2 s, 20 s) holds some, [6 s, 60 s) none, so goodput is
    ≈ 1.98·150/18 ≈ 16.5 req/s at 20 s and ≈ 0 at 60 s — a figure of the window, not of the
    service, which is what `overloaded` (flagged in every seed at both horizons) warns of."""
    problem = write_problem(single_stage("10 ms", slots=1, rate=150.0, deadline="2 s", horizon="60 s"))
    assignment = Assignment.default(problem)
    goodput = {}
    for horizon in (20.0, 60.0):
        values = []
        for seed in HORIZON_SEEDS:
            metrics = simulate(problem, assignment, "steady", seed=seed, horizon_s=horizon).metrics
            assert metrics.overloaded, (horizon, seed, metrics.backlog_growth)
            # (1 − μ/λ) of the judged arrivals stay behind, give or take Poisson noise
            assert metrics.backlog_growth == pytest.approx(metrics.judged / 3, rel=0.15)
            assert_accounting(metrics, horizon)
            values.append(metrics.goodput_rps)
        goodput[horizon] = values
    assert statistics.fmean(goodput[20.0]) == pytest.approx(1.98 * 150 / 18, rel=0.25)
    assert max(goodput[60.0]) < 0.1 * min(goodput[20.0])
    assert statistics.fmean(goodput[20.0]) - statistics.fmean(goodput[60.0]) > (
        ci_half_width(goodput[20.0]) + ci_half_width(goodput[60.0]))


# --- 5. the search itself, on synthetic runs ---------------------------------------------

CROSSING = 123.4


def fake(attainment):
    """A `run` whose result carries only what seed_capacity reads, plus the rate and a log."""
    calls = []

    def run(rate: float):
        calls.append(rate)
        return SimpleNamespace(rate=rate, metrics=SimpleNamespace(slo_attainment=attainment(rate), judged=1))

    run.calls = calls
    return run


def logistic(rate: float) -> float:
    """Decreasing in rate, equal to 0.9 exactly at CROSSING: 1 / (1 + (r/123.4)^8 / 9)."""
    return 1.0 / (1.0 + (rate / CROSSING) ** 8 / 9.0)


@pytest.mark.parametrize("start", [1.0, 10.0, 60.0, CROSSING, 200.0, 1000.0])
def test_seed_capacity_finds_a_synthetic_crossing(start):
    """Bracketing from ``start`` takes ⌈|log2(start/x)|⌉ + 2 probes at most, then bisection
    of a factor-2 bracket down to 1 + rel_tol takes ⌈log2(ln 2 / ln(1 + rel_tol))⌉ = 6; the
    answer is within √(1 + rel_tol) of the crossing, and at_capacity attained the target."""
    run = fake(logistic)
    found = seed_capacity(run, TARGET, start, REL_TOL)
    assert found.bounded
    assert abs(math.log(found.capacity_rps / CROSSING)) <= math.log(1 + HALF_BRACKET) + 1e-12
    budget = math.ceil(abs(math.log2(start / CROSSING))) + 2 + math.ceil(math.log2(math.log(2) / math.log(1 + REL_TOL)))
    assert found.probes == len(run.calls) <= min(budget, 15)
    assert found.at_capacity is not None and found.at_capacity.metrics.slo_attainment >= TARGET
    assert found.at_capacity.rate <= CROSSING <= found.capacity_rps * (1 + REL_TOL)
    assert found.at_capacity.rate == max(r for r in run.calls if logistic(r) >= TARGET)


def test_seed_capacity_tighter_tolerance_is_tighter():
    found = seed_capacity(fake(logistic), TARGET, 100.0, rel_tol=1e-4)
    assert found.capacity_rps == pytest.approx(CROSSING, rel=1e-4 / 2 + 1e-12)


def test_seed_capacity_unbounded_and_unreachable():
    """Target always met: bounded is False and the capacity is the last rate tried,
    start · 2^MAX_EXPAND. Never met: capacity 0 and no run stands for the seed."""
    always = seed_capacity(fake(lambda rate: 1.0), TARGET, 5.0)
    assert not always.bounded
    assert always.capacity_rps == 5.0 * 2**MAX_EXPAND
    assert always.probes == MAX_EXPAND + 1
    assert always.at_capacity is not None and always.at_capacity.rate == always.capacity_rps

    never = seed_capacity(fake(lambda rate: 0.5), TARGET, 5.0)
    assert never.capacity_rps == 0.0
    assert never.probes == MAX_EXPAND + 1
    assert never.at_capacity is None

    with pytest.raises(ValueError):
        seed_capacity(fake(logistic), TARGET, 0.0)
    with pytest.raises(ValueError):
        seed_capacity(fake(logistic), TARGET, math.nan)


def test_seed_capacity_stops_at_its_ceiling_with_a_lower_bound():
    """Target always met below a ceiling of 1000 from a start of 5: doublings 5, 10, …, 640
    (8 probes), then the ceiling itself (the 9th): a lower bound of exactly 1000, flagged
    with the reason given, and no probe above it."""
    run = fake(lambda rate: 1.0)
    found = seed_capacity(run, TARGET, 5.0, ceiling_rps=1000.0, ceiling_reason="why")
    assert run.calls == [5.0 * 2**k for k in range(8)] + [1000.0]
    assert (found.capacity_rps, found.probes, found.bounded, found.limit) == (1000.0, 9, False, "why")
    assert found.at_capacity is not None and found.at_capacity.rate == 1000.0


def test_seed_capacity_below_its_ceiling_is_unchanged():
    """A crossing under the ceiling: the same probes and answer as with no ceiling (what keeps
    the bundled problems' capacities and their cost as they were); a crossing between the
    last doubling and the ceiling is bisected against the ceiling, and bounded."""
    free, capped = fake(logistic), fake(logistic)
    assert seed_capacity(free, TARGET, 10.0) == seed_capacity(capped, TARGET, 10.0, ceiling_rps=1e4)
    assert free.calls == capped.calls and max(capped.calls) < 1e4
    near = seed_capacity(fake(logistic), TARGET, 10.0, ceiling_rps=150.0)
    assert near.bounded and near.limit is None
    assert abs(math.log(near.capacity_rps / CROSSING)) <= math.log(1 + HALF_BRACKET) + 1e-12
    above = fake(logistic)  # a start above the ceiling starts at the ceiling
    assert seed_capacity(above, TARGET, 500.0, ceiling_rps=300.0).bounded and above.calls[0] == 300.0


def test_seed_capacity_counts_an_empty_window_as_attained():
    """No judged request (nothing arrived after the warm-up) is no evidence of a miss: the
    search rises until windows hold requests, instead of halving to 0 (it did: a one-GEMM
    problem at --horizon 1 reported capacity 0)."""
    calls = []

    def run(rate: float):
        calls.append(rate)
        judged = 0 if rate < 8 else 10
        return SimpleNamespace(rate=rate, metrics=SimpleNamespace(
            slo_attainment=0.0 if judged == 0 else logistic(rate), judged=judged))

    found = seed_capacity(run, TARGET, 2.0)
    assert found.bounded and calls[:3] == [2.0, 4.0, 8.0]
    assert abs(math.log(found.capacity_rps / CROSSING)) <= math.log(1 + HALF_BRACKET) + 1e-12


def test_ceiling_rate_is_the_probe_arrivals_over_the_horizon_and_names_the_horizon():
    rate, reason = ceiling_rate(10.0)
    assert rate == MAX_PROBE_ARRIVALS / 10.0 == 13107.2
    assert "--horizon" in reason and "10 s window" in reason and "1.31e+04 req/s" in reason


def test_seed_capacity_is_monotone_under_pointwise_dominance():
    """The docstring's argument on arbitrary (noisy, non-monotone) curves: if f ≥ g at every
    rate, capacity(f) ≥ capacity(g) from the same start."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        knots = np.sort(rng.uniform(0, 8, 12))
        levels_g = np.clip(1.05 - 0.15 * np.arange(12) + rng.normal(0, 0.1, 12), 0, 1)
        levels_f = np.minimum(levels_g + rng.uniform(0, 0.2, 12), 1.0)

        def curve(levels):
            return lambda rate: float(levels[min(np.searchsorted(knots, math.log(rate)), 11)])

        start = float(rng.uniform(1, 100))
        high = seed_capacity(fake(curve(levels_f)), TARGET, start).capacity_rps
        low = seed_capacity(fake(curve(levels_g)), TARGET, start).capacity_rps
        assert high >= low


def test_no_bundled_capacity_search_reaches_the_probe_ceiling():
    """Every capacity in results.db.example was found below the ceiling, so the ceiling
    changes none of them: a search from start rate s to a capacity c probes s, then
    doublings up to the first failure, which lies below 2·c·(1 + REL_TOL) (c is a bracket's
    midpoint); so max(s, 2·c·(1 + REL_TOL)) × horizon bounds its largest window."""
    import sqlite3

    with sqlite3.connect(ROOT / "results.db.example") as db:
        rows = db.execute("SELECT problem, regime, horizon_s, max(capacity_rps), max(baseline_capacity_rps), "
                          "max(one_config_capacity_rps) FROM tuner_configs GROUP BY problem, regime").fetchall()
    assert len({row[0] for row in rows}) >= 9
    problems = {}
    for name, regime, horizon, *capacities in rows:
        problem = problems.get(name) or problems.setdefault(name, load_problem(ROOT / "search_spaces" / f"{name}.yaml"))
        top = max([start_rate(problem, regime)] + [2 * c * (1 + REL_TOL) for c in capacities if c is not None])
        assert top * horizon <= MAX_PROBE_ARRIVALS, (name, regime, top * horizon)
