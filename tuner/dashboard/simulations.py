"""The dashboard's simulations: goodput runs of a viewed database's problems, described by
value (:class:`PageSimulation`) so that the board's worker processes can run them.

The dashboard only reads: a problem is loaded with the database's compiled resources
read, never written (``viewing_resources``), once per process, and an edited file is
another problem (its content's hash is part of the value). The search has its own
per-seed value for its workers (:class:`tuner.search.parallel.Simulation`); the two
share what a described run names (:class:`tuner.sim.described.DescribedRun`) and the
simulator, not their plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..sim import simulate
from ..sim.described import DescribedRun, ProblemsByContent
from ..sim.metrics import Metrics

def _viewing(path: str, storage: str) -> Problem:
    """The problem file loaded with ``storage``'s compiled resources read, never written."""
    from ..problem import load_problem
    from ..profile.cache import viewing_resources

    return load_problem(Path(path), resources=viewing_resources(storage))


#: This process's viewed problems.
_viewed = ProblemsByContent(_viewing)


def remember(problem: Problem, storage: str) -> None:
    """Serve this process's simulations of ``problem``'s file (this content) from the
    problem already loaded."""
    _viewed.remember(problem, storage)


@dataclass(frozen=True)
class PageSimulation(DescribedRun):
    """One goodput simulation a page shows (:class:`~tuner.sim.described.DescribedRun`, on
    the viewed database), the regime's arrivals at their own rate or at a fixed ``rate_rps``."""

    rate_rps: float | None = None

    @classmethod
    def of(cls, problem: Problem, storage: str, regime: str, assignment: Assignment, seed: int,
           horizon_s: float | None, rate_rps: float | None = None) -> PageSimulation:
        return cls(*cls.naming(problem, storage, regime, assignment, seed, horizon_s), rate_rps)

    def run(self) -> Metrics:
        """Its metrics, simulated in this process.

        Raises:
            TunerError: the problem file changed since the page was made.
            IllegalConfigError: a config of the assignment cannot run a shape it meets.
        """
        problem = _viewed.get(self.problem_path, self.problem_hash, self.storage)
        if problem is None:
            raise TunerError(f"{self.problem_path}: changed while being simulated; open the page again")
        return simulate(problem, self.assignment_on(problem), self.regime, seed=self.seed, horizon_s=self.horizon_s,
                        rate_rps=self.rate_rps).metrics


def metrics_of(simulation: PageSimulation) -> Metrics:
    """The metrics of one simulation (a module-level function: the worker pool maps it)."""
    return simulation.run()


def serially(simulations: list[PageSimulation]) -> list[Metrics]:
    """The metrics of each simulation, one after another in this process."""
    return [metrics_of(s) for s in simulations]
