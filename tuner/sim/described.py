"""A simulation described by value, for a process that loads the problem itself.

Worker processes (the search's seed pool, the dashboard's pool) receive what to simulate
as plain values — never the loaded problem, which is large and holds caches — and load
the file once per process. An edited file is another problem: its content's hash is part
of the value, and a worker that finds other content refuses the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..problem.assignment import Assignment, AssignmentNames
from ..problem.model import Problem


@dataclass(frozen=True)
class DescribedRun:
    """What every described simulation names: the problem file and its content's hash, the
    database its compiled kernel resources come from, the regime, the assignment as plain
    values (:meth:`tuner.problem.assignment.Assignment.names`), the seed and the horizon
    (None: the regime's)."""

    problem_path: str
    problem_hash: str
    storage: str
    regime: str
    assignment: AssignmentNames
    seed: int
    horizon_s: float | None

    @staticmethod
    def naming(problem: Problem, storage: str, regime: str, assignment: Assignment, seed: int,
               horizon_s: float | None) -> tuple[str, str, str, str, AssignmentNames, int, float | None]:
        """The fields above for ``assignment`` on ``problem``'s file (a subclass's own follow)."""
        return problem.path, problem.file_hash, storage, regime, assignment.names(), seed, horizon_s

    def assignment_on(self, problem: Problem) -> Assignment:
        """The assignment, on the worker's load of the file."""
        return Assignment.named(problem, self.assignment)


class ProblemsByContent:
    """A process's problems by file, content and database, each loaded once by ``load(path,
    storage)``: what a worker that receives described runs keeps between them."""

    def __init__(self, load: Callable[[str, str], Problem]) -> None:
        self._load = load
        self._problems: dict[tuple[str, str, str], Problem] = {}

    def get(self, path: str, file_hash: str, storage: str) -> Problem | None:
        """The problem file at ``path`` with content ``file_hash`` and ``storage``'s compiled
        resources, loaded on first use; None when the file has changed since."""
        key = (path, file_hash, storage)
        problem = self._problems.get(key)
        if problem is None:
            problem = self._load(path, storage)
            if problem.file_hash != file_hash:
                return None
            self._problems[key] = problem
        return problem

    def remember(self, problem: Problem, storage: str) -> None:
        """Serve ``problem``'s file (this content) from the problem already loaded."""
        self._problems[(problem.path, problem.file_hash, storage)] = problem
