"""Simulations described by value, so worker processes can run them: a problem file, the
viewed database (for compiled kernel resources), a regime or a rate, an assignment in its
text form (:meth:`~tuner.problem.assignment.Assignment.specs`), a seed and a horizon."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem, Regime
from ..sim.metrics import Metrics


@dataclass(frozen=True)
class Point:
    """One simulation, described by value so a worker process can run it."""

    problem_path: str
    problem_hash: str  # the file's content when the point was made: an edited file is another problem
    storage: str  # the viewed database: where compiled kernel resources are read
    regime: str
    assignment: tuple[str, ...]  # Assignment.specs: OP=CONFIG, OP@BUCKET=CONFIG
    rate: float | None  # None: the regime's own arrivals (its bucket sampled per seed)
    seed: int
    horizon_s: float


_loaded: dict[tuple[str, str, str], Problem] = {}  # per process, by (path, content hash, storage)


def simulate_point(point: Point) -> Metrics:
    from ..problem import load_problem, resolve_assignment
    from ..sim import simulate
    from .storage import compile_resources

    key = (point.problem_path, point.problem_hash, point.storage)
    problem = _loaded.get(key)
    if problem is None:
        problem = load_problem(point.problem_path, resources=compile_resources(point.storage))
        if problem.file_hash != point.problem_hash:
            raise TunerError(f"{point.problem_path}: changed while being simulated; open the page again")
        _loaded[key] = problem
    assignment = resolve_assignment(problem, point.assignment)
    if point.rate is None:
        return simulate(problem, assignment, point.regime, point.seed, point.horizon_s).metrics
    swept = at_rate(problem, problem.regimes[point.regime], point.rate)
    return simulate(swept, assignment, "__sweep", point.seed, point.horizon_s).metrics


def remember(problem: Problem, storage: str) -> None:
    """Use this already loaded problem for points of its file (this content) in this process."""
    _loaded[(problem.path, problem.file_hash, storage)] = problem


def point(problem: Problem, storage: str, regime: str, assignment: Assignment,
          rate: float | None, seed: int, horizon_s: float) -> Point:
    return Point(problem.path, problem.file_hash, storage, regime, tuple(assignment.specs(problem)), rate, seed,
                 horizon_s)


def serially(points: list[Point]) -> list[Metrics]:
    return [simulate_point(p) for p in points]


def at_rate(problem: Problem, regime: Regime, rate: float) -> Problem:
    """The problem with a regime ``__sweep``: ``regime``'s arrivals at a fixed ``rate``."""
    fixed = dataclasses.replace(regime, name="__sweep", arrivals=dataclasses.replace(regime.arrivals, rate_range=(rate, rate)))
    return dataclasses.replace(problem, regimes={**problem.regimes, "__sweep": fixed})
