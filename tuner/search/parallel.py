"""An evaluation's seeds simulated side by side in worker processes.

A trial scores one assignment on K seeds; the baselines and the capacity searches after
the trials score many more the same way. The seeds are independent simulations, so
:func:`tuner.search.evaluate.evaluate` hands them to the :class:`SeedRunner` it is given —
:data:`IN_PROCESS`, or a :class:`SeedPool` (:func:`seed_pool`) the command opened and
passed down — and then reads their results in seed order exactly as it would have
computed them: reports, pruning and every figure of the table are the same as a
serial run's, whatever the number of processes (``tests/test_parallel.py``). Unlike
``--jobs``, which runs several trials at once and lets the sampler see them in whatever
order they finish, this never changes what is tuned, only how long it takes.

Work goes to the workers by value: the problem file (which they load once, with the
run's compile cache), the assignment as plain values (its config names), the regime,
seed, horizon and metric. A problem that is not the file the pool was made for (one
built in memory, or edited since) is simulated in the calling process. The workers load the file as
``tuner tune`` does (:func:`load_for_tuning`: compiled resources and
measurements from the run's storage); a library caller whose problem came from another
database should keep ``sim_jobs=1``.

Each worker process costs a cold start before its first simulation: imports, the
problem's load and its first launches (``benchmarks/bench_tune.py`` reports it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import IllegalConfigError, SearchError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..problem.scenario import Scenario
from .knob_axis import KnobAxis, KnobKey, base_of
from ..processes import spawn_pool, stop_pool
from ..sim.described import DescribedRun, ProblemsByContent
from ..sim.metrics import Metrics


@dataclass(frozen=True)
class SeedResult:
    """What one seed of an evaluation produced: its metric value, the simulations it took
    (a capacity search takes several), the metrics they end on, the buckets visited; or
    why the assignment is illegal. ``limit`` says why a capacity is only a lower bound
    (``SeedCapacity.limit``)."""

    value: float = 0.0
    simulations: int = 0
    metrics: Metrics | None = None
    visited: frozenset[tuple[str, int]] = frozenset()
    illegal: str | None = None
    limit: str | None = None


def run_seed(problem: Problem, assignment: Assignment, regime: str, seed: int, horizon_s: float | None,
             metric: str, on_probe: Callable[[float, float], object] | None = None) -> SeedResult:
    """One seed's simulations, in this process: the one implementation, serial or not
    (``on_probe``: each capacity probe's rate and attainment, as it ends)."""
    from ..sim import simulate
    from .capacity import capacity_at

    try:
        if metric == "goodput":
            result = simulate(problem, assignment, regime, seed=seed, horizon_s=horizon_s)
            return SeedResult(result.metrics.goodput_rps, 1, result.metrics, frozenset(result.visited))
        visited: set[tuple[str, int]] = set()
        found = capacity_at(problem, assignment, regime, seed, horizon_s, on_run=visited.update, on_probe=on_probe)
        metrics = found.at_capacity.metrics if found.at_capacity is not None else None
        return SeedResult(found.capacity_rps, found.probes, metrics, frozenset(visited), limit=found.limit)
    except IllegalConfigError as exc:
        return SeedResult(illegal=str(exc))


@dataclass(frozen=True)
class Simulation(DescribedRun):
    """One seed of an evaluation described by value (:class:`~tuner.sim.described.DescribedRun`),
    so that a seed worker can run it, in ``metric``, on the file's problem with ``knobs``.
    (The dashboard describes its own: :class:`tuner.dashboard.simulations.PageSimulation`.)"""

    metric: str = "goodput"
    knobs: KnobKey = ()  # the engine knob values of a variant of the file's problem (() : as written)

    @classmethod
    def of(cls, problem: Problem, storage: str, regime: str, assignment: Assignment, seed: int,
           horizon_s: float | None, metric: str = "goodput") -> Simulation:
        """The simulation of ``assignment`` on ``problem``'s file, as a worker would load it
        (a knob variant of it: the file's problem with the variant's knob values)."""
        found = base_of(problem)
        return cls(*cls.naming(problem, storage, regime, assignment, seed, horizon_s), metric,
                   found[1] if found is not None else ())

    def run(self) -> SeedResult | None:
        """The seed's result, simulated in this process on the problem as loaded once per
        process (:func:`load`); None when the file on disk is no longer that problem."""
        problem = _loaded.get(self.problem_path, self.problem_hash, self.storage)
        if problem is None:
            return None
        if self.knobs:
            problem = KnobAxis(problem.knobs).variant(problem, self.knobs)
        return run_seed(problem, self.assignment_on(problem), self.regime, self.seed,
                        self.horizon_s, self.metric)


def load_for_tuning(path: Path | str, url: str) -> Problem:
    """The problem file as every worker loads it: compiled resources cached in ``url``."""
    from ..problem import load_problem
    from ..profile.modeled import LazyCompileCache
    from ..store.store import resolve_url

    return load_problem(Path(path), resources=LazyCompileCache(resolve_url(url)))


#: This process's problems, as a seed worker loads them (:func:`load_for_tuning`).
_loaded = ProblemsByContent(load_for_tuning)


class SeedRunner(Protocol):
    """How an evaluation's seeds are simulated: their results in seed order."""

    processes: int

    def run(self, scenario: Scenario, assignment: Assignment, metric: str,
            on_probe: Callable[[float, float], object] | None = None) -> Iterable[SeedResult]: ...


class InProcess:
    """Every seed in this process, one at a time (a prune after a seed stops the rest)."""

    processes = 1

    def run(self, scenario: Scenario, assignment: Assignment, metric: str,
            on_probe: Callable[[float, float], object] | None = None) -> Iterator[SeedResult]:
        problem, regime, horizon_s = scenario.problem, scenario.regime, scenario.horizon_s
        return (run_seed(problem, assignment, regime, seed, horizon_s, metric, on_probe) for seed in scenario.seeds)


#: The runner of an evaluation that is given none.
IN_PROCESS: SeedRunner = InProcess()


class SeedPool:
    """``processes`` simulating seeds of the one problem file ``problem`` was loaded
    from: this one and ``processes - 1`` workers, with compiled resources from
    ``storage``. This process simulates an evaluation's first seed itself, with its own
    memo of launches, already warm, while the workers take the others."""

    def __init__(self, problem: Problem, storage: str, processes: int) -> None:
        self.problem, self.storage, self.processes = problem, storage, processes
        self._executor = spawn_pool(processes - 1)

    def serves(self, problem: Problem) -> bool:
        """Whether ``problem`` is the pool's, or a knob variant of it."""
        found = base_of(problem)
        return problem is self.problem or (found is not None and found[0] is self.problem)

    def run(self, scenario: Scenario, assignment: Assignment, metric: str,
            on_probe: Callable[[float, float], object] | None = None) -> Iterable[SeedResult]:
        """Every seed's result, in seed order (all seeds run; reading them stays the caller's).
        ``on_probe`` hears the capacity probes of the first seed, the one run in this process
        (the workers' seeds run alongside at about the same pace). A problem the pool's
        workers cannot load (not its file, nor a knob variant of it) runs in this process,
        one seed at a time as :data:`IN_PROCESS` runs them (a prune stops the rest)."""
        problem, regime, seeds, horizon_s = scenario.problem, scenario.regime, scenario.seeds, scenario.horizon_s
        if not self.serves(problem):
            return IN_PROCESS.run(scenario, assignment, metric, on_probe)
        if not seeds:
            return []
        futures = [self._executor.submit(Simulation.run, Simulation.of(problem, self.storage, regime, assignment,
                                                                       seed, horizon_s, metric))
                   for seed in seeds[1:]]
        try:
            results = [run_seed(problem, assignment, regime, seeds[0], horizon_s, metric, on_probe)]
            for seed, future in zip(seeds[1:], futures):
                try:
                    found = future.result()
                except BrokenProcessPool as exc:  # a worker was killed (OOM, SIGKILL) or could not start
                    raise SearchError(f"a seed process stopped ({exc}); rerun (finished trials are kept), "
                                      "or with --sim-jobs 1 to simulate in one process") from exc
                results.append(found if found is not None else
                               run_seed(problem, assignment, regime, seed, horizon_s, metric))
            return results
        finally:
            for future in futures:
                future.cancel()

    def close(self, abandon: bool = False) -> None:
        """Stop the workers: after their current simulation, or (``abandon``: Ctrl-C, an
        error) at once, so that an interrupted run exits without waiting for them."""
        stop_pool(self._executor, abandon)


@contextmanager
def seed_pool(problem: Problem, storage: str, processes: int) -> Iterator[SeedRunner]:
    """The runner that simulates ``problem``'s seeds in ``processes`` processes, this one
    included (:data:`IN_PROCESS` for one), for the evaluations it is passed to; its
    workers stop when the block ends (at once on an error or Ctrl-C). Each call starts
    its own workers: a caller already holding a pool passes that one down instead of
    opening a second (which would run more processes than the cores it was sized to)."""
    if processes <= 1:
        yield IN_PROCESS
        return
    pool = SeedPool(problem, storage, processes)
    try:
        yield pool
    except BaseException:
        pool.close(abandon=True)
        raise
    pool.close()


def default_processes(seeds: int, jobs: int = 1) -> int:
    """Seed processes per worker when none is asked for, the worker itself included: its
    share of this machine's usable cores (over ``jobs`` workers) plus one, because the
    worker also keeps the study's books between evaluations, where a core would idle
    (with 2 cores, 3 processes tune llm_decode faster than 2: ``benchmarks/bench_tune.py``), and
    never more than the ``seeds`` there are to run at once; 1 (everything in the worker)
    with under 2 cores to share."""
    cores = usable_cores() // jobs
    return 1 if cores < 2 else min(seeds, cores + 1)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
