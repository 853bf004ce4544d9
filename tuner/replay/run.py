"""One replay: a regime's seeded arrivals on a wall clock, served by the problem's own
batching policy on real executors, with memory held against the budget."""

from __future__ import annotations

import heapq
import math
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from ..sim.admission import base_memory, headroom
from ..sim.batching import BatchingPolicy, RelayPolicyHost
from ..sim.metrics import Metrics, percentile
from ..sim.policies import batching_policy
from ..sim.program import BoundService, Program, bind, launch_memos
from ..sim.lanes import stream_count
from ..sim.requests import Requests
from ..sim.service import request_figures
from ..traffic import Workload
from .executors import Executors, sleep_for
from .kernels import CPU_MEMORY_SCALE, CpuReferences, CudaKernels, KernelRunner, has_kernels
from .memory import MemoryLedger
from .neighbors import NeighborLoops
from .trace import ReplayTrace

#: How long after the window a replay waits for the requests still in the system: the
#: simulator drains them all, a wall clock cannot wait forever (the rest count as missed).
DRAIN_S = 10.0
#: The devices a replay runs on.
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class ReplayResult:
    """A replay's measured metrics (the simulator's names; the GPU-layer figures it does
    not measure are 0) and how it ran: ``lateness_p99_s``, how late the harness saw
    arrivals against their schedule (its own precision); ``unfinished``, requests still
    in the system when the drain ended; ``issue_share``, the share of the batches' time
    the executors spent issuing launches (on a GPU, near 1: host-bound, as a Python
    harness launching kernel by kernel can be where vLLM replays CUDA graphs; on the CPU
    the references run as they are issued, so it is 1 and says nothing; None: no kernels
    run)."""

    metrics: Metrics
    device: str
    memory_scale: float
    wall_s: float
    lateness_p99_s: float
    unfinished: int
    kernels: str = "modeled times"
    issue_share: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {**self.metrics.to_dict(), "replay": {
            "device": self.device, "kernels": self.kernels, "memory_scale": self.memory_scale, "wall_s": self.wall_s,
            "lateness_p99_s": self.lateness_p99_s, "unfinished": self.unfinished, "issue_share": self.issue_share}}


def replay(problem: Problem, assignment: Assignment, regime: str, seed: int = 0, duration_s: float | None = None,
           device: str = "cpu", drain_s: float = DRAIN_S, cuda: object = None,
           trace_path: Path | None = None) -> ReplayResult:
    """Replay ``regime``'s seeded arrivals (the simulator's, for the same seed and window)
    under ``assignment`` on ``device``, in wall-clock time: the window plus up to
    ``drain_s`` for the requests still in the system. On a GPU every config is run once
    first (compiled before the window) and the budget held at the scale the free memory
    allows (``cuda``: ``torch.cuda`` or a stand-in with its calls). ``trace_path``: write a
    Perfetto trace there (:mod:`tuner.replay.trace`)."""
    if device not in DEVICES:
        raise ValueError(f"a replay runs on {' or '.join(DEVICES)}, not {device!r}")
    workload = problem.regime(regime).workload(seed, problem.service.jitter, duration_s)
    bound = bind(problem.service_for(regime), assignment, problem.size_fields, memos=launch_memos(problem))
    budget = problem.memory_budget(regime)
    service = bound.service
    require_base(bound, budget)  # before a GPU's warm-up spends its time
    runner = None
    if device == "cuda":
        neighbors = tuple(n.priority + n.partition.priority for n in service.neighbors)
        lanes = tuple(service.priority + lane.priority for lane in service.lanes())
        backend = CudaKernels(service.executors, cuda=cuda, lane_priorities=lanes, extra=neighbors)
        runner = KernelRunner(bound, backend, service.launch_overhead_s, problem.size_fields)
        try:
            runner.warm()
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot run here is one line
            raise TunerError(f"replay: running each config once before the window failed: "
                             f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
        scale = backend.memory_scale(budget)
    else:
        if has_kernels(bound):
            runner = KernelRunner(bound, CpuReferences(), service.launch_overhead_s, problem.size_fields)
        scale = CPU_MEMORY_SCALE
    ledger = MemoryLedger(budget, device, scale)
    trace = None if trace_path is None else ReplayTrace(service.executors, tuple(n.name for n in service.neighbors),
                                                        device)
    result = ReplayRun(bound, workload, ledger, problem.size_fields, device, runner, trace=trace).run(drain_s)
    if trace is not None and trace_path is not None:
        trace.write(trace_path)
    return result


def base_bytes(bound: BoundService) -> float:
    """What a service holds whatever it admits: its fixed memory and the workspace its
    configs reserve (the simulator's admission rule, :mod:`tuner.sim.admission`)."""
    return base_memory(bound.service.memory.fixed, bound.reserved_workspace)


def require_base(bound: BoundService, budget: float) -> None:
    """Raises TunerError where ``budget`` cannot hold :func:`base_bytes`."""
    if base_bytes(bound) > budget:
        raise TunerError(f"replay: the memory budget ({budget / 2**30:.3g} GiB) does not hold the service's fixed "
                         f"memory and the workspace its configs reserve ({base_bytes(bound) / 2**30:.3g} GiB)")


class ReplayRun:
    """One replay; create, :meth:`run` once, discard. The host of the batching policy
    (through :class:`RelayPolicyHost`), as :class:`tuner.sim.service.ServiceRun` is in a
    simulation: the same admission rule, on a wall clock."""

    def __init__(self, bound: BoundService, workload: Workload, ledger: MemoryLedger, size_fields: frozenset[str],
                 device: str, runner: KernelRunner | None = None,
                 clock: Callable[[], float] = time.perf_counter, trace: ReplayTrace | None = None) -> None:
        """``runner``: runs the batches' kernels on a backend (:mod:`tuner.replay.kernels`);
        None: each batch waited out at once for its modeled time (a service of declared
        profiles on the CPU, more precise than a wait per launch)."""
        service = bound.service
        self.bound, self.workload, self.ledger, self.device = bound, workload, ledger, device
        self.requests = Requests(service, workload, stop_below=None)  # the simulator's, settled alike
        self.times = self.requests.times  # the policy's host shares them (RelayPolicyHost)
        require_base(bound, ledger.budget)
        ledger.reserve("fixed", service.memory.fixed)  # (they fit: the ledger holds nothing else yet)
        ledger.reserve("workspace", bound.reserved_workspace)
        self._clock, self._t0 = clock, 0.0
        self._queue: deque[int] = deque()
        self._wakes: list[float] = []
        self._lateness: list[float] = []
        self._engine_key = "engine"
        self.iterations = 0
        self.runner = runner
        work = self.runner if self.runner is not None else sleep_for(service.launch_overhead_s)
        self.trace = trace
        self.executors = Executors(service.executors, work, self.now, trace.batch if trace is not None else None)
        # the neighbours' streams come after every executor's lanes (CudaKernels' order)
        self.neighbors = NeighborLoops(service, runner.backend if runner is not None else CpuReferences(),
                                       stream_count(service), self.now)
        self._in_service = 0
        if trace is not None:
            self.neighbors.on_launch = trace.neighbor
            if runner is not None:
                runner.on_kernels = trace.kernels
        host = RelayPolicyHost(bound, ledger.budget - ledger.used, self.times, self)
        self.policy: BatchingPolicy = batching_policy(service.batching, host, service.executors, workload, self.requests.sizes,
                                                      size_fields)

    def now(self) -> float:
        return self._clock() - self._t0

    # -- the policy's host (through RelayPolicyHost) ------------------------------------------
    def wake_at(self, t: float) -> None:
        heapq.heappush(self._wakes, t)

    def start_program(self, executor: int, program: Program, scale: float, now: float) -> None:
        self.iterations += 1
        self.executors.start(executor, program, scale)

    def finish(self, request: int, now: float) -> None:
        self.ledger.release(request)
        self._in_service -= 1
        self.requests.finished(request, now)

    def hold(self, nbytes: float) -> None:
        """An engine policy's KV blocks in use: held for real, beside the requests."""
        self.ledger.release(self._engine_key)
        self.ledger.reserve(self._engine_key, nbytes)

    # -- the loop ------------------------------------------------------------------------
    def run(self, drain_s: float = DRAIN_S) -> ReplayResult:
        """Serve the window and the drain; the executors and allocations are released
        whatever ends it (Ctrl-C included)."""
        arrival, n = self.times.arrival_t, len(self.times.arrival_t)
        deadline = self.workload.horizon_s + drain_s
        # with neighbours the whole window runs (their progress is measured over it)
        until = self.workload.horizon_s if self.bound.service.neighbors else 0.0
        self._t0 = self._clock()
        if self.trace is not None and self.runner is not None:
            self.runner.backend.set_origin(self.now)
        self.neighbors.start()
        i = 0
        try:
            while (self.requests.judged < n or self.now() < until) and self.now() < deadline:
                now = self.now()
                while i < n and arrival[i] <= now:
                    self._lateness.append(now - arrival[i])
                    self._on_arrival(i, now)
                    i += 1
                    self._sample(now)
                while self._wakes and self._wakes[0] <= now:
                    heapq.heappop(self._wakes)
                    self.policy.dispatch(now)
                upcoming = min(arrival[i] if i < n else math.inf, self._wakes[0] if self._wakes else math.inf,
                               until if now < until else deadline)
                try:
                    executor, end = self.executors.done.get(timeout=max(upcoming - self.now(), 0.0))
                except queue.Empty:
                    self._raise_failure()
                    continue
                self._raise_failure()
                self._on_program_done(executor, end)
                self._sample(end)
            wall = self.now()
        finally:
            self.neighbors.close()
            self.executors.close()
            self.ledger.release_all()
        return self._result(wall)

    def _raise_failure(self) -> None:
        """What a worker or a neighbour raised, as one line (the run ends with it)."""
        for who, failure in (("an executor", self.executors.failure), ("a neighbour", self.neighbors.failure)):
            if failure is not None:
                raise TunerError(f"replay: {who} failed at {self.now():.2f} s: "
                                 f"{type(failure).__name__}: {failure}".splitlines()[0]) from failure

    def _sample(self, now: float) -> None:
        if self.trace is not None:
            self.trace.sample(now, self.ledger.used, len(self._queue), self._in_service)

    def _on_arrival(self, request: int, now: float) -> None:
        if self.requests.state[request] > headroom(self.ledger.budget, self.bound.service.memory.fixed,
                                          self.bound.reserved_workspace):
            self.requests.rejected(now)  # can never fit: rejected, as the simulator rejects it
            return
        self._queue.append(request)
        self._admit(now)
        self.policy.dispatch(now)

    def _admit(self, now: float) -> None:
        queue_, state = self._queue, self.requests.state
        while queue_ and self.ledger.reserve(queue_[0], state[queue_[0]]):
            request = queue_.popleft()
            self.times.admit_t[request] = now
            self._in_service += 1
            self.policy.admitted(request, now)

    def _on_program_done(self, executor: int, now: float) -> None:
        self.policy.program_done(executor, now)
        if self._queue:
            self._admit(now)
        self.policy.dispatch(now)

    def _result(self, wall: float) -> ReplayResult:
        service = self.bound.service
        figures = request_figures(service, self.workload, self.times)
        metrics = Metrics(**figures, admitted_max=0, memory_peak_bytes=self.ledger.peak, memory_byte_seconds=0.0,
                          reserved_workspace_bytes=self.bound.reserved_workspace, sm_busy_fraction=0.0, sm_peak=0.0,
                          idle_while_waiting_s=0.0, kernels=self.runner.kernels if self.runner is not None else 0,
                          iterations=self.iterations,
                          neighbor_progress_ratio=self.neighbors.progress_ratio(0.0, self.workload.horizon_s))
        unfinished = int(np.isnan(np.asarray(self.times.finish_t)).sum()) - figures["rejected"]
        lateness = percentile(np.asarray(self._lateness), 99) or 0.0
        kernels = "modeled times" if self.runner is None else self.runner.backend.described
        return ReplayResult(metrics, self.device, self.ledger.scale, wall, lateness, max(unfinished, 0), kernels,
                            None if self.runner is None else self.runner.issue_share)
