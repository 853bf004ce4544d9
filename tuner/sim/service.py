"""The service layer: arrivals, memory-budgeted admission, batching, executors, deadlines.

One :class:`ServiceRun` simulates one workload under one bound assignment, event by
event (arrivals, GPU phase boundaries, batching wake-ups), on the shared GPU of
:mod:`tuner.sim.gpu` (:class:`~tuner.sim.gpu.SharedGPU`). Ties go to the GPU first, then arrivals, then wake-ups, then
insertion order, so a run is a pure function of its inputs.

Admission (DESIGN §4): ``fixed + reserved workspace + Σ admitted state ≤ budget``; a
request is admitted first-come first-served when its state fits, and a request whose
state can never fit is rejected on arrival. After the window closes no new requests
arrive and neighbour streams stop launching; the requests in flight are drained, then
judged against the SLO.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..phases import Phase
from ..errors import SimulationError
from ..problem.assignment import Assignment
from ..problem.bounds import MAX_LAUNCHES
from ..problem.model import Problem, Service, Slo
from ..traffic import Workload
from .batching import BatchingPolicy, PolicyHost, RequestTimes
from .policies import batching_policy
from .gpu import SharedGPU, Kernel, phase_rate
from .regime_switch import RegimeSwitch
from .metrics import Metrics, percentile
from .program import BoundService, Launch, Program, Wait, bind
from .recording import Recording

_WAKE, _HORIZON, _NEIGHBOR = 0, 1, 2
_INF = math.inf


class _Decided(Exception):
    """Raised inside a run asked to stop below an attainment target once it must."""


@dataclass(frozen=True)
class SimResult:
    """Metrics, plus the timeline when it was recorded.

    ``visited`` lists the (operator, bucket) cells whose configs some launch used: two
    assignments that agree on these cells and reserve the same workspace give the same
    run on the same workload (every launch, hence every event, is the same).
    """

    metrics: Metrics
    recording: Recording | None = None
    visited: frozenset[tuple[str, int]] = frozenset()
    stopped: bool = False


def simulate(
    problem: Problem,
    assignment: Assignment,
    regime: str,
    seed: int = 0,
    horizon_s: float | None = None,
    record: bool | Recording = False,
    rate_rps: float | None = None,
    stop_below: float | None = None,
) -> SimResult:
    """Simulate ``problem``'s service under one seeded sample of ``regime``.

    The workload depends only on (regime, seed, horizon, rate), never on the assignment,
    so two assignments compared at the same seed see the same requests (common random
    numbers). ``record`` keeps the timelines in ``SimResult.recording`` (or fills the
    given one, which may stream them to a file). ``rate_rps`` replaces the rate the
    regime samples per seed. With ``stop_below``, the run stops as soon as so many judged
    requests have missed the SLO that its attainment is certain to end below that target
    (``SimResult.stopped``: the metrics then cover the run so far; only "below the
    target" is meaningful).
    """
    workload, budget = _workload_and_budget(problem, regime, seed, horizon_s, rate_rps)
    bound = bind(problem.service_for(regime), assignment, problem.size_fields, allow_merge=not record)
    return ServiceRun(bound, workload, budget, problem.size_fields, record, stop_below=stop_below).run()


def _workload_and_budget(problem: Problem, regime: str, seed: int, horizon_s: float | None,
                         rate_rps: float | None = None) -> tuple[Workload, float]:
    """The regime's seeded workload (the same for every assignment) and its memory budget."""
    workload = problem.regime(regime).workload(seed, problem.service.jitter, horizon_s, rate_rps)
    return workload, problem.memory_budget(regime)


def simulate_switching(
    problem: Problem,
    assignments: Mapping[str, Assignment],
    switch: RegimeSwitch,
    regime: str,
    seed: int = 0,
    horizon_s: float | None = None,
) -> SimResult:
    """Simulate with the assignment chosen at run time by ``switch`` among ``assignments``
    (keyed as the switch answers, e.g. by regime name).

    Switching is not free: a switch to an assignment that reserves more workspace waits
    until that memory is free, and admission pauses meanwhile.
    """
    workload, budget = _workload_and_budget(problem, regime, seed, horizon_s)
    service = problem.service_for(regime)
    bound = {key: bind(service, a, problem.size_fields) for key, a in assignments.items()}
    start = switch.choose(0.0)
    return ServiceRun(bound[start], workload, budget, problem.size_fields,
                      alternatives=bound, switch=switch, key=start).run()


class ServiceRun(PolicyHost):
    """One simulation; create, call :meth:`run` once, discard."""

    def __init__(self, bound: BoundService, workload: Workload, budget: float,
                 size_fields: frozenset[str], record: bool | Recording = False,
                 alternatives: Mapping[str, BoundService] | None = None,
                 switch: RegimeSwitch | None = None, key: str | None = None,
                 stop_below: float | None = None) -> None:
        service = bound.service
        self.bound = bound
        self.budget = budget
        self.alternatives = alternatives or {}
        self.regime_switch = switch
        self._key = key
        self._pending: str | None = None
        self.switches = 0
        self.workload = workload
        self.horizon = workload.horizon_s
        self.size_fields = size_fields
        self.executors = service.executors
        n = len(workload)
        self.n = n
        self.sizes = {name: np.asarray(values).tolist() for name, values in workload.sizes.items()}
        self.state = request_state(service, workload)
        self.base_memory = service.memory.fixed + bound.reserved_workspace
        self.capacity = budget - self.base_memory
        self.times = RequestTimes(workload)
        # Streams: lane l of executor e is stream l·E + e; the neighbours come after them.
        # Each stream's kernels run on its partition (an index into the GPU's caps).
        partitions = service.partitions()
        self.streams, self._stream_part, self._stream_priority, self._lane_streams = _stream_layout(service)
        self._neighbor_part = [partitions.index(n.partition) for n in service.neighbors]
        self._lanes_left = [0] * self.executors
        self.gpu = SharedGPU(workload.horizon_s, tuple(p.exact_share(service.device) for p in partitions),
                            service.device.sms)
        self.recording = record if isinstance(record, Recording) else Recording() if record else None
        self.batching: BatchingPolicy = batching_policy(service.batching, self, self.executors, workload, self.sizes,
                                                        size_fields)
        self._overhead = service.launch_overhead_s
        # launch behaviour (service.launch): the CPU host thread issues launch i of a batch at
        # base + (i + 1)·host_launch_s, base being the batch's start plus a graph replay's cost;
        # a kernel whose stream is free before then waits for it (see _issued)
        self._host_launch_s = service.host_launch_s
        self._host_paces = service.host_launch_s > 0.0 or service.graph_replay_s > 0.0
        self._replay = service.graph_replay_s
        self._issue_base = [0.0] * self.streams
        self._issue: list[tuple[int, ...] | None] = [None] * self.streams
        self._host_wait = [0.0] * self.executors
        self._iteration_start = [0.0] * self.executors
        self.iterations = 0
        self.host_bound = 0
        self._programs: list[tuple[Launch, ...]] = [() for _ in range(self.streams)]
        self._program_peak = 0.0
        self._pc = [0] * self.streams
        self._scale = [1.0] * self.streams
        # a micro-batched program's waits between lanes (None: its lanes run independently),
        # each stream's completed launches, and whether its next launch waits on another lane
        self._waits: list[tuple[Wait, ...] | None] = [None] * self.streams
        self._done = [0] * self.streams
        self._blocked = [False] * self.streams
        self._timers: list[tuple[float, int, int, int]] = []
        self._timer_seq = 0
        self._queue: deque[int] = deque()
        self._memory_used = 0.0
        self._engine_memory = 0.0  # what an engine policy holds itself (its KV blocks in use): shown, not admitted on
        self._admitted = 0
        self._judged = 0
        self.kernels = 0
        self._neighbor_done = [0.0] * len(service.neighbors)
        self._neighbor_launches, self._launch_limit = [0] * len(service.neighbors), MAX_LAUNCHES
        self._neighbor_at_horizon: float | None = None
        # metric accumulators (the integrals cover the window [0, horizon))
        self._memory_integral = 0.0
        self._sm_integral = 0.0
        self._idle_waiting = 0.0
        self._memory_peak = self.base_memory
        self._sm_peak = 0.0
        self._admitted_max = 0
        # stopping early: misses beyond (1 - target) × judged requests decide the run
        self._warmup = workload.warmup_s
        self._misses = 0
        self._misses_allowed = _INF if stop_below is None else (
            (1.0 - stop_below) * int((workload.arrivals_s >= workload.warmup_s).sum()) + 1e-9)

    # -- the batching policy's host (PolicyHost, tuner.sim.batching) -------------------
    def wake_at(self, t: float) -> None:
        self._timer(t, _WAKE, 0)

    def start_program(self, executor: int, program: Program, scale: float, now: float) -> None:
        """Start a batch on ``executor``: the first launch of each of its lanes, at once."""
        self.kernels += program.kernels
        self.iterations += 1
        if program.peak_sm > self._program_peak:
            self._program_peak = program.peak_sm
        started: list[int] = []
        waits = program.waits
        issue = program.issue
        self._host_wait[executor] = program.host_wait
        self._iteration_start[executor] = now
        for lane, (stream, launches) in enumerate(zip(self._lane_streams[executor], program.lanes)):
            self._done[stream] = 0
            self._blocked[stream] = False
            self._waits[stream] = None if waits is None else waits[lane]
            self._issue_base[stream] = now + self._replay
            self._issue[stream] = None if issue is None else issue[lane]
            if launches:
                self._programs[stream] = launches
                self._pc[stream] = 0
                self._scale[stream] = scale
                started.append(stream)
        self._lanes_left[executor] = len(started)
        for stream in started:
            self._dispatch(stream, now)

    def _dispatch(self, stream: int, now: float) -> None:
        """Launch the stream's next kernel, or hold it while the launch it waits for on
        another lane has not completed (see :func:`tuner.sim.program.interleave`)."""
        waits = self._waits[stream]
        pc = self._pc[stream]
        if waits is not None:
            lane, count = waits[pc]
            if lane >= 0 and self._done[self._lane_streams[stream % self.executors][lane]] < count:
                self._blocked[stream] = True
                return
            self._blocked[stream] = False
        tag, phases = self._programs[stream][pc]
        overhead = self._overhead + self._issued(stream, pc, now) if self._host_paces else self._overhead
        self.gpu.launch(self._stream_priority[stream], stream, tag, phases, self._scale[stream], overhead,
                        now, self._stream_part[stream])

    def _issued(self, stream: int, pc: int, now: float) -> float:
        """How long launch ``pc`` of ``stream`` waits at ``now`` for the host to issue it:
        the executor's host thread issues its batch's launches in order, ``host_launch``
        each, after the graph replay's cost (``service.launch``); counted as host wait."""
        issue = self._issue[stream]
        issued = self._issue_base[stream] + ((pc if issue is None else issue[pc]) + 1) * self._host_launch_s
        if issued <= now:
            return 0.0
        self._host_wait[stream % self.executors] += issued - now
        return issued - now

    def _kernel_done(self, stream: int, kernel: Kernel, now: float) -> None:
        """A kernel of ``stream`` completed at ``now``: a neighbour's, a micro-batched
        program's (:meth:`_advance`), or a plain program's, whose next launch goes out
        (:meth:`_dispatch`) or whose lane is done."""
        if stream >= self.streams:
            self._on_neighbor_kernel_done(kernel, now)
        elif self._waits[stream] is not None:
            self._advance(stream, now)
        else:
            pc = self._pc[stream] + 1
            if pc < len(self._programs[stream]):
                self._pc[stream] = pc
                self._dispatch(stream, now)
            else:
                executor = stream % self.executors
                self._lanes_left[executor] -= 1
                if not self._lanes_left[executor]:
                    self._on_program_done(executor, now)

    def _advance(self, stream: int, now: float) -> None:
        """A micro-batched program's launch completed on ``stream``: its next launch, the
        launches of other lanes that waited for this one, and the batch's end."""
        pc = self._pc[stream] + 1
        self._done[stream] = pc
        executor = stream % self.executors
        if pc < len(self._programs[stream]):
            self._pc[stream] = pc
            self._dispatch(stream, now)
        else:
            self._lanes_left[executor] -= 1
        for other in self._lane_streams[executor]:
            if self._blocked[other]:
                self._dispatch(other, now)
        if not self._lanes_left[executor]:
            self._on_program_done(executor, now)

    def finish(self, request: int, now: float) -> None:
        self.times.finish_t[request] = now
        self._memory_used -= self.state[request]
        self._admitted -= 1
        self._judged += 1
        if (self._misses_allowed < _INF and self.times.arrival_t[request] >= self._warmup
                and not self._good(request, now)):
            self._missed()

    def hold(self, nbytes: float) -> None:
        """An engine policy now holds ``nbytes`` of memory itself (its KV blocks in use):
        counted in the memory timeline, integral and peak, never in admission."""
        self._engine_memory = nbytes
        memory = self.base_memory + self._memory_used + nbytes
        if memory > self._memory_peak:
            self._memory_peak = memory

    def _good(self, request: int, now: float) -> bool:
        service, arrival = self.bound.service, self.times.arrival_t[request]
        if not service.kind.token_level:
            return bool(service.slo.met(now - arrival))
        first = self.times.first_t[request]
        return bool(service.slo.met(now - arrival, first - arrival, _tpot(now, first, self.sizes["output"][request])))

    def _missed(self) -> None:
        self._misses += 1
        if self._misses > self._misses_allowed:
            raise _Decided

    # -- internals -----------------------------------------------------------------
    def _timer(self, t: float, kind: int, payload: int) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (t, self._timer_seq, kind, payload))

    def _launch_neighbor(self, index: int, now: float) -> None:
        neighbor = self.bound.service.neighbors[index]
        phases = neighbor.profile.phases({}, self.bound.service.device)
        self._neighbor_launches[index] += 1
        self.gpu.launch(neighbor.priority + neighbor.partition.priority, self.streams + index, neighbor.name, phases, 1.0,
                        self.bound.service.launch_overhead_s, now, self._neighbor_part[index])

    def _admit(self, now: float) -> None:
        queue, state, capacity, admit_t = self._queue, self.state, self.capacity, self.times.admit_t
        admitted_any = False
        while queue and self._memory_used + state[queue[0]] <= capacity:
            r = queue.popleft()
            self._memory_used += state[r]
            admit_t[r] = now
            self._admitted += 1
            self.batching.admitted(r, now)
            admitted_any = True
        if admitted_any:
            if self._admitted > self._admitted_max:
                self._admitted_max = self._admitted
            memory = self.base_memory + self._memory_used
            if memory > self._memory_peak:
                self._memory_peak = memory

    def _on_neighbor_kernel_done(self, kernel: Kernel, now: float) -> None:
        self.kernels += 1
        index = kernel.stream - self.streams
        self._neighbor_done[index] += kernel.work_s
        if now < self.horizon:
            gap = self.bound.service.neighbors[index].gap_s
            if gap > 0.0:
                self._timer(now + gap, _NEIGHBOR, index)
            else:
                self._launch_neighbor(index, now)

    def _on_program_done(self, executor: int, now: float) -> None:
        if self._host_paces and 2.0 * self._host_wait[executor] > now - self._iteration_start[executor]:
            self.host_bound += 1  # its GPU waited on the host for most of the iteration
        self.batching.program_done(executor, now)
        if self.regime_switch is not None:
            self._maybe_switch(self.regime_switch, now)
        if self._queue:
            self._admit(now)
        self.batching.dispatch(now)

    def _maybe_switch(self, switch: RegimeSwitch, now: float) -> None:
        """At a safe point: take the switch's assignment when its workspace fits beside
        the admitted requests; else hold admission until it does."""
        key = switch.choose(now)
        if key == self._key:
            self._pending = None
            self.capacity = self.budget - self.base_memory
            return
        target = self.alternatives[key]
        fixed = self.bound.service.memory.fixed
        if target.blocks == self.bound.blocks:  # another regime, the same configs: nothing to switch
            self._key, self._pending = key, None
            self.capacity = self.budget - self.base_memory
        elif fixed + target.reserved_workspace + self._memory_used <= self.budget:
            self.bound, self._key, self._pending = target, key, None
            self.base_memory = fixed + target.reserved_workspace
            self.capacity = self.budget - self.base_memory
            self.switches += 1
        else:
            self._pending = key
            reserve = max(target.reserved_workspace, self.bound.reserved_workspace)
            self.capacity = self.budget - fixed - reserve

    def _on_arrival(self, r: int, now: float) -> None:
        if self.regime_switch is not None:
            self.regime_switch.observe_arrival(now)
            self._maybe_switch(self.regime_switch, now)
        if self.state[r] > self.budget - self.bound.service.memory.fixed - self.bound.reserved_workspace:
            self._judged += 1  # can never fit: rejected, counted as missed
            if now >= self._warmup:
                self._missed()
            return
        self._queue.append(r)
        if len(self._queue) == 1:
            self._admit(now)
            self.batching.dispatch(now)

    def _on_timer(self, now: float) -> None:
        _, _, kind, payload = heapq.heappop(self._timers)
        if kind == _HORIZON:
            # math.fsum, not sum(): compiled, sum()'s int start rejects floats, and CPython >= 3.12
            # compensates float sums where mypyc's loop would not: fsum is one rounding everywhere
            self._neighbor_at_horizon = math.fsum(self._neighbor_done) + math.fsum(
                k.work_s - k.work_left_s(now) for k in self.gpu.running if k.stream >= self.streams)
        elif kind == _NEIGHBOR:
            self._launch_neighbor(payload, now)
        else:
            self.batching.dispatch(now)

    def run(self) -> SimResult:
        """Simulate to the end of the drain and compute the metrics.

        The loop inlines the hot path (GPU phase boundaries and the metric integrals):
        it runs millions of times per simulation. A completed kernel goes to
        :meth:`_kernel_done`, the one place a stream's next launch is issued from.
        """
        self._timer(self.horizon, _HORIZON, 0)
        if self.recording is not None:
            self.recording.sample(0.0, self.base_memory, 0, 0)
            self.recording.sm.append((0.0, 0.0))
            self.gpu.sm_trace = self.recording.sm
        for index in range(len(self.bound.service.neighbors)):
            self._launch_neighbor(index, 0.0)
        arrival, n, gpu, timers = self.times.arrival_t, self.n, self.gpu, self._timers
        recording, horizon, queue = self.recording, self.horizon, self._queue
        waiting = self.batching.queue
        run_until = gpu.run_until
        i = 0
        last_t = 0.0
        memory_integral = idle_waiting = 0.0
        sm_seconds_at_last = 0.0
        stopped = False
        try:
            while i < n or self._judged < n or timers:
                t_arrival = arrival[i] if i < n else _INF
                t_timer = timers[0][0] if timers else _INF
                t_other = t_arrival if t_arrival <= t_timer else t_timer
                kernel = run_until(t_other) if gpu.next_time <= t_other else None
                if kernel is None and t_other == _INF:
                    break
                t = gpu.now if kernel is not None else t_other
                if t > last_t and last_t < horizon:  # integrate the service's step functions up to t
                    end = t if t < horizon else horizon
                    sm_seconds = gpu.sm_seconds(end)
                    memory_integral += (self.base_memory + self._memory_used + self._engine_memory) * (end - last_t)
                    if queue or waiting:
                        idle_waiting += (end - last_t) - (sm_seconds - sm_seconds_at_last)
                    last_t, sm_seconds_at_last = end, sm_seconds
                if kernel is not None:
                    if gpu.launched > self._launch_limit: raise SimulationError(self._over_budget(t, i))  # noqa: E701
                    stream = kernel.stream
                    if recording is not None:
                        recording.kernel(stream, str(kernel.tag), kernel.started, t)  # the service's tags are names
                    self._kernel_done(stream, kernel, t)
                elif t == t_arrival:
                    self._on_arrival(i, t)
                    i += 1
                else:
                    if self._judged >= n and i >= n and timers[0][2] == _WAKE:
                        heapq.heappop(timers)  # nothing left to serve: drop stale wake-ups
                        continue
                    self._on_timer(t)
                if recording is not None:
                    recording.sample(t, self.base_memory + self._memory_used + self._engine_memory,
                                     len(queue) + len(waiting), self._admitted)
        except _Decided:
            stopped = True
        if last_t < horizon:
            memory_integral += (self.base_memory + self._memory_used + self._engine_memory) * (horizon - last_t)
        self._memory_integral, self._idle_waiting = memory_integral, idle_waiting
        self._sm_integral = gpu.sm_seconds(horizon)
        self._sm_peak = max(gpu.sm_peak, self._program_peak)
        return SimResult(self._metrics(), recording, self.bound.visited(), stopped)

    def _over_budget(self, now: float, arrived: int) -> str:
        """What drove a run past its launch budget: the neighbour that launched the most,
        or the service's operators, with what to change."""
        launched = self.gpu.launched
        head = (f"the simulation stopped at its budget of {self._launch_limit:,} kernel launches, {now:.3g} s "
                f"into its {self.horizon:.3g} s window: ")
        neighbors = self.bound.service.neighbors
        busiest = max(range(len(neighbors)), key=lambda k: self._neighbor_launches[k], default=None)
        own = launched - sum(self._neighbor_launches)
        if busiest is not None and self._neighbor_launches[busiest] > own:
            neighbor = neighbors[busiest]
            return (head + f"neighbour {neighbor.name!r} launched {self._neighbor_launches[busiest]:,} of them (a "
                    f"{neighbor.profile.latency.evaluate({}):.3g} s kernel, gap {neighbor.gap_s:.3g} s); lengthen "
                    "its gap or its kernel, or shorten the horizon")
        return (head + f"the service launched {own:,} of them for {arrived:,} arrivals "
                f"({own / max(arrived, 1):,.0f} per request); shorten the horizon or lower the rate, or check "
                "the kernels' latencies and the requests' sizes")

    def _metrics(self) -> Metrics:
        service = self.bound.service
        horizon = self.horizon
        neighbor_ratio = None
        if service.neighbors:
            alone = math.fsum(_alone_progress(nb.profile.phases({}, service.device), nb.gap_s,
                                              service.launch_overhead_s, horizon,
                                              nb.partition.exact_share(service.device), service.device.sms)
                              for nb in service.neighbors)
            neighbor_ratio = (self._neighbor_at_horizon or 0.0) / alone if alone > 0 else None
        return Metrics(
            **request_figures(service, self.workload, self.times),
            admitted_max=self._admitted_max,
            memory_peak_bytes=self._memory_peak,
            memory_byte_seconds=self._memory_integral,
            reserved_workspace_bytes=self.bound.reserved_workspace,
            sm_busy_fraction=self._sm_integral / horizon,
            sm_peak=self._sm_peak,
            idle_while_waiting_s=self._idle_waiting,
            kernels=self.kernels,
            iterations=self.iterations,
            host_bound_iterations=self.host_bound,
            neighbor_progress_ratio=neighbor_ratio,
            config_switches=self.switches,
        )


def request_state(service: Service, workload: Workload) -> list[float]:
    """The bytes each request holds while admitted (``service.memory.per_request`` at its
    sizes): what admission checks, in a simulation and in a replay alike; 0 for an
    engine policy (vllm), which keeps its KV cache itself and admits on arrival."""
    state = 0.0 if service.kind.engine else service.memory.per_request.evaluate_array(
        {name: np.asarray(v, dtype=np.float64) for name, v in workload.sizes.items()}
    )
    return np.broadcast_to(np.asarray(state, dtype=np.float64), (len(workload),)).tolist()


def request_figures(service: Service, workload: Workload, times: RequestTimes) -> dict[str, Any]:
    """The metrics that follow from each request's timeline alone (goodput, attainment,
    latencies, waits, the backlog's growth), as :class:`Metrics` names them: one rule for
    a simulated run and a replayed one (``tuner.replay``), which differ in how the
    timeline was made, not in how it is judged."""
    arrival = np.asarray(times.arrival_t)
    finish = np.asarray(times.finish_t)
    admit = np.asarray(times.admit_t)
    start = np.asarray(times.start_t)
    done = ~np.isnan(finish)
    latency = finish - arrival
    horizon, warmup = workload.horizon_s, workload.warmup_s
    judged = arrival >= warmup
    good, ttft, tpot = _judge(service.slo, service.kind.token_level, arrival, finish,
                              np.asarray(times.first_t), workload.sizes, judged)
    window = horizon - warmup
    n_judged = int(judged.sum())
    admitted = ~np.isnan(admit)
    started = ~np.isnan(start)
    growth = _backlog_growth(arrival, np.where(admitted, finish, arrival), warmup, horizon)
    return {
        "goodput_rps": float(good.sum()) / window,
        "throughput_rps": float((done & judged).sum()) / window,
        "slo_attainment": float(good.sum()) / n_judged if n_judged else 0.0,
        "latency_p50_s": percentile(latency[done & judged], 50),
        "latency_p90_s": percentile(latency[done & judged], 90),
        "latency_p99_s": percentile(latency[done & judged], 99),
        "arrivals": len(arrival),
        "completed": int(done.sum()),
        "rejected": int(len(arrival) - admitted.sum()),
        "window_s": horizon,
        "admission_stall_s": float((admit - arrival)[admitted].mean()) if admitted.any() else 0.0,
        "wait_mean_s": float((start - arrival)[started].mean()) if started.any() else 0.0,
        "ttft_p99_s": percentile(ttft, 99) if ttft is not None else None,
        "tpot_p99_s": percentile(tpot, 99) if tpot is not None else None,
        "ttft_p90_s": percentile(ttft, 90) if ttft is not None else None,
        "tpot_p90_s": percentile(tpot, 90) if tpot is not None else None,
        "warmup_s": warmup,
        "judged": n_judged,
        "arrival_rate_rps": n_judged / window,
        "backlog_growth": growth,
        "overloaded": overloaded(growth, n_judged),
    }


def _backlog_growth(arrival: np.ndarray, departure: np.ndarray, warmup: float, horizon: float) -> int:
    """How many more requests are in the system (queued or admitted, not yet finished or
    rejected) at the window's end than at the end of its warm-up."""
    def in_system(t: float) -> int:
        return int((arrival < t).sum() - (departure < t).sum())

    return in_system(horizon) - in_system(warmup)


def overloaded(backlog_growth: int, judged: int) -> bool:
    """Whether the backlog grew through the judged window beyond what a stable queue does.

    A stable queue's backlog is stationary: its change over the window is the difference
    of two draws, of the order of their spread, whatever the window's length. An
    overloaded one grows by (arrivals − completions) ≈ (1 − μ/λ)·A over A judged arrivals.
    The bound 2√A + 2 sits above the spread of a stable queue whose backlog is Poisson-like
    (a difference of two draws of variance ≤ A) and below the growth of a queue loaded
    ≥ ~1.2× its service rate over a few hundred arrivals.
    """
    return backlog_growth > 2.0 * math.sqrt(judged) + 2.0


def _judge(slo: Slo, token_level: bool, arrival: np.ndarray, finish: np.ndarray, first: np.ndarray,
           sizes: Mapping[str, np.ndarray], judged: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Which judged requests met the SLO; TTFT and TPOT of completed judged token requests."""
    done = ~np.isnan(finish) & judged
    with np.errstate(invalid="ignore"):
        if not token_level:
            return done & slo.met(finish - arrival), None, None
        ttft, tpot = first - arrival, _tpot(finish, first, np.asarray(sizes["output"], dtype=np.float64))
        good = done & slo.met(finish - arrival, ttft, tpot)
    return good, ttft[done], tpot[done]


def _tpot(finish: Any, first: Any, output: Any) -> Any:
    """Time per output token after the first (0 for a one-token output)."""
    return np.where(output > 1, (finish - first) / np.maximum(output - 1, 1), 0.0)


def alone_spans(phases: tuple[Phase, ...], cap: float = 1.0, sms: int = 0) -> list[tuple[float, float]]:
    """Each phase's ``(work, seconds)`` run alone on a partition of SM share ``cap`` with
    the DRAM to itself (the GPU layer's rate: a partition narrower than the phase slows
    it); a closed-loop neighbour's launch, as the simulator and a replay time it."""
    spans = []
    for phase in phases:
        work, s = phase[0], phase[1]
        rate = phase_rate(phase, s if s < cap else cap, 1.0, sms)
        spans.append((work, work / rate if rate > 0.0 else math.inf))
    return spans


def _alone_progress(phases: tuple[Phase, ...], gap: float, overhead: float, horizon: float,
                    cap: float = 1.0, sms: int = 0) -> float:
    """Kernel work a closed-loop neighbour completes by ``horizon`` with its partition
    (SM share ``cap``) and the DRAM to itself: each phase at the GPU layer's rate."""
    spans = alone_spans(phases, cap, sms)
    work = math.fsum(w for w, _ in spans)  # fsum: see ServiceRun._on_timer
    cycle = overhead + math.fsum(d for _, d in spans) + gap
    if cycle <= 0:
        return 0.0
    full = math.floor(horizon / cycle)
    left = horizon - full * cycle - overhead
    done = full * work
    for w, duration in spans:
        if left <= 0.0:
            break
        done += w * min(left / duration, 1.0)
        left -= duration
    return done


def _stream_layout(service: Service) -> tuple[int, list[int], list[int], list[tuple[int, ...]]]:
    """The service's streams: lane l of executor e is stream l·E + e (E executors); per
    stream its partition (an index into ``service.partitions()``) and priority, and per
    executor its lanes' streams."""
    partitions, lanes, executors = service.partitions(), service.lanes(), service.executors
    streams = executors * len(lanes)
    part = [partitions.index(lane) for lane in lanes for _ in range(executors)]
    priority = [service.priority + lane.priority for lane in lanes for _ in range(executors)]
    return streams, part, priority, [tuple(range(e, streams, executors)) for e in range(executors)]
