"""Score a joint assignment in a regime: constraints first, then a metric over K seeds.

The metric is ``goodput`` (requests per second that met the SLO at the regime's sampled
rates: one simulation per seed) or ``capacity`` (the highest rate at which the SLO's
attainment target holds on the regime's traffic shape: a bracketing search of about ten
simulations per seed, :mod:`tuner.search.capacity`).

Seed ``k`` of a study is ``base_seed + k`` for every assignment, so two assignments are
compared on the same requests (common random numbers) and their per-seed goodputs pair
up: that is what the Wilcoxon pruner and the confidence intervals rest on.

Constraints (DESIGN §5), both reported as Optuna constraint values, feasible when ≤ 0:

* ``memory`` = (fixed + reserved workspace + one request's minimal state − budget) / budget
  (:func:`tuner.sim.admission.overflow`). Positive when no request can ever be admitted
  (the simulator's admission rule, :mod:`tuner.sim.admission`), so the assignment serves
  nothing whatever the traffic.
* ``legality`` = 1 when some config cannot run a shape the service reaches
  (:class:`~tuner.errors.IllegalConfigError`, at the largest batch or during the
  simulation), else 0.

An infeasible assignment is scored 0 requests/s and kept, never dropped.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import IllegalConfigError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..problem.scenario import Scenario
from ..sim import bind
from ..sim.admission import overflow
from ..stats import ci_half_width
from ..units import gib_text
from . import parallel

METRICS = ("goodput", "capacity")


@dataclass(frozen=True)
class Constraints:
    """Constraint values of one assignment in one regime (feasible when both are ≤ 0)."""

    memory: float = 0.0
    legality: float = 0.0
    reason: str | None = None
    reserved_bytes: float | None = None

    @property
    def feasible(self) -> bool:
        return self.memory <= 0.0 and self.legality <= 0.0

    def values(self) -> dict[str, float]:
        return {"memory": self.memory, "legality": self.legality}


def check_constraints(problem: Problem, assignment: Assignment, regime: str) -> Constraints:
    """Memory and legality of ``assignment`` before any simulation (cheap)."""
    service = problem.service
    try:
        reserved = bind(service, assignment, problem.size_fields).reserved_workspace
    except IllegalConfigError as exc:
        return Constraints(legality=1.0, reason=f"illegal: {exc}")
    budget = problem.memory_budget(regime)
    minimal_state = service.memory.per_request.evaluate({name: 1.0 for name in problem.size_fields})
    memory = overflow(budget, service.memory.fixed, reserved, minimal_state)
    if memory > 0.0:
        return Constraints(
            memory=memory,
            reason=(f"memory: fixed {gib_text(service.memory.fixed)} + reserved workspace {gib_text(reserved)} "
                    f"+ one request {gib_text(minimal_state)} exceeds the budget {gib_text(budget)}"),
            reserved_bytes=reserved,
        )
    return Constraints(memory=memory, reserved_bytes=reserved)


@dataclass(frozen=True)
class Evaluation:
    """Per-seed values of one metric for one assignment in one regime (empty when infeasible).

    ``latency_p50_s`` is the mean over seeds of the median latency (None when nothing
    completed); it breaks exact ties, because when every request meets its SLO whatever
    the config, the faster config is the right one. ``visited`` is the union over the
    simulations of the cells some launch used (see ``SimResult.visited``). For goodput,
    ``rates`` are the realised arrival rates of the simulated seeds' judged windows and
    ``overloaded`` counts the seeds whose backlog grew through the window (their goodput
    depends on the window's length). For capacity, ``lower_bounds`` counts the seeds whose
    search stopped at its ceiling with the SLO still met, so their value (and the mean)
    is only a lower bound, and ``limit`` says why (:mod:`tuner.search.capacity`).
    ``latency_p90_s`` holds each goodput seed's 90th-percentile latency of its judged
    requests (infinite where none completed; empty when not measured), so that the
    guard (:mod:`tuner.search.guard`) can pair them by seed.
    """

    values: tuple[float, ...]
    constraints: Constraints = Constraints()
    latency_p50_s: float | None = None
    visited: frozenset[tuple[str, int]] = frozenset()
    metric: str = "goodput"
    rates: tuple[float, ...] = ()
    overloaded: int = 0
    lower_bounds: int = 0
    limit: str | None = None
    latency_p90_s: tuple[float, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.constraints.feasible

    @property
    def lower_bound(self) -> bool:
        """The mean is only a lower bound: some seed's capacity search reached its ceiling."""
        return self.lower_bounds > 0

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else 0.0

    @property
    def ci(self) -> float | None:
        """Half-width of the 95% confidence interval of the mean (None under 2 seeds)."""
        return ci_half_width(self.values)


def evaluate(
    scenario: Scenario,
    assignment: Assignment,
    on_seed: Callable[[int, float, int], None] | None = None,
    metric: str = "goodput",
    on_probe: Callable[[float, float], object] | None = None,
    seed_runner: parallel.SeedRunner = parallel.IN_PROCESS,
) -> Evaluation:
    """Constraints, then the metric for each of the scenario's seeds.

    ``on_seed(step, value, simulations)`` runs after each seed (a trial reports and may
    prune there, by raising); ``on_probe(rate, attainment)`` after each capacity probe
    simulated in this process (progress within a seed's search). ``seed_runner`` says
    where the seeds run (a :class:`~tuner.search.parallel.SeedPool` the command opened);
    read in seed order, the results are the serial ones.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS} but got {metric!r}")
    constraints = check_constraints(scenario.problem, assignment, scenario.regime)
    if not constraints.feasible:
        return Evaluation((), constraints, metric=metric)
    values: list[float] = []
    latencies: list[float] = []
    tails: list[float] = []
    rates: list[float] = []
    overloaded = lower_bounds = 0
    limit: str | None = None
    visited: set[tuple[str, int]] = set()
    results = seed_runner.run(scenario, assignment, metric, on_probe)
    for step, done in enumerate(results):
        if done.illegal is not None:
            return Evaluation((), Constraints(legality=1.0, reason=f"illegal: {done.illegal}"), metric=metric)
        metrics = done.metrics
        if metric == "goodput" and metrics is not None:
            rates.append(metrics.arrival_rate_rps)
            overloaded += metrics.overloaded
            tails.append(math.inf if metrics.latency_p90_s is None else metrics.latency_p90_s)
        if done.limit is not None:
            lower_bounds, limit = lower_bounds + 1, done.limit
        visited |= done.visited
        values.append(done.value)
        if metrics is not None and metrics.latency_p50_s is not None:
            latencies.append(metrics.latency_p50_s)
        if on_seed is not None:
            on_seed(step, done.value, done.simulations)
    return Evaluation(tuple(values), constraints, statistics.fmean(latencies) if latencies else None,
                      frozenset(visited), metric, tuple(rates), overloaded, lower_bounds, limit, tuple(tails))
