"""A simulation described by value, for a process that loads the problem itself.

Worker processes (the search's seed pool, the dashboard's pool) receive what to simulate
as plain values — never the loaded problem, which is large and holds caches — and load
the file once per process. An edited file is another problem: its content's hash is part
of the value, and a worker that finds other content refuses the run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DescribedRun:
    """What every described simulation names: the problem file and its content's hash, the
    database its compiled kernel resources come from, the regime, the assignment in its
    text form (:meth:`tuner.problem.assignment.Assignment.specs`), the seed and the horizon
    (None: the regime's)."""

    problem_path: str
    problem_hash: str
    storage: str
    regime: str
    assignment: tuple[str, ...]
    seed: int
    horizon_s: float | None
