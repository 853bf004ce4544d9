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
from .admission import Admission
from .batching import BatchingPolicy, PolicyHost, RequestTimes
from .policies import batching_policy
from .gpu import SharedGPU, Kernel, phase_rate
from .host_thread import HostThread
from .lanes import ExecutorLanes, stream_count
from .regime_switch import RegimeSwitch
from .requests import Decided, Requests, tpot
from .metrics import Metrics, percentile
from .program import BoundService, Program, bind, launch_memos
from .recording import Recording
from .usage import UsageMeter

_WAKE, _HORIZON, _NEIGHBOR = 0, 1, 2
_INF = math.inf


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
    bound = bind(problem.service_for(regime), assignment, problem.size_fields, allow_merge=not record,
                 memos=launch_memos(problem))
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
    bound = {key: bind(service, a, problem.size_fields, memos=launch_memos(problem)) for key, a in assignments.items()}
    start = switch.choose(0.0)
    return ServiceRun(bound[start], workload, budget, problem.size_fields,
                      alternatives=bound, switch=switch, key=start).run()


class ServiceRun(PolicyHost):
    """One simulation; create, call :meth:`run` once, discard.

    It owns its parts: the requests, their timeline and verdicts (``requests``,
    :class:`~tuner.sim.requests.Requests`), the memory ledger (``admission``, :class:`~tuner.sim.admission.Admission`),
    the executors' host threads (``host_thread``, :class:`~tuner.sim.host_thread.HostThread`),
    the resource figures (``usage``, :class:`~tuner.sim.usage.UsageMeter`), the executors'
    streams (``lanes``, :class:`~tuner.sim.lanes.ExecutorLanes`), the neighbours' streams
    (``neighbors``, :class:`NeighborStreams`), the shared GPU and the batching policy; it
    keeps the event loop, its timers and the regime switch.
    """

    def __init__(self, bound: BoundService, workload: Workload, budget: float,
                 size_fields: frozenset[str], record: bool | Recording = False,
                 alternatives: Mapping[str, BoundService] | None = None,
                 switch: RegimeSwitch | None = None, key: str | None = None,
                 stop_below: float | None = None) -> None:
        service = bound.service
        self.bound = bound
        self.alternatives = alternatives or {}
        self.regime_switch = switch
        self._key = key
        self._pending: str | None = None
        self.switches = 0
        self.workload = workload
        self.horizon = workload.horizon_s
        self.size_fields = size_fields
        self.executors = service.executors
        requests = self.requests = Requests(service, workload, stop_below)
        self.times = requests.times  # the policy's host shares them (PolicyHost)
        self.admission = Admission(budget, service.memory.fixed, bound.reserved_workspace)
        # Streams: lane l of executor e is stream l·E + e (tuner.sim.lanes); the neighbours come
        # after them. Each stream's kernels run on its partition (an index into the GPU's caps).
        self.gpu = SharedGPU(workload.horizon_s, tuple(p.exact_share(service.device) for p in service.partitions()),
                            service.device.sms)
        self.host_thread = HostThread(self.executors, stream_count(service), service.host_launch_s,
                                      service.graph_replay_s)
        self.lanes = ExecutorLanes(service, self.gpu, self.host_thread)
        self.neighbors = NeighborStreams(service, self.lanes.streams)
        self.recording = record if isinstance(record, Recording) else Recording() if record else None
        self.batching: BatchingPolicy = batching_policy(service.batching, self, self.executors, workload, requests.sizes,
                                                        size_fields)
        self.iterations = 0
        self._program_peak = 0.0
        self._timers: list[tuple[float, int, int, int]] = []
        self._timer_seq = 0
        self.kernels = 0
        self._launch_limit = MAX_LAUNCHES
        self.usage = UsageMeter(self.admission.base_memory)

    # -- the batching policy's host (PolicyHost, tuner.sim.batching) -------------------
    def memory_capacity(self) -> float:
        return self.admission.capacity

    def wake_at(self, t: float) -> None:
        self._timer(t, _WAKE, 0)

    def start_program(self, executor: int, program: Program, scale: float, now: float) -> None:
        """Start a batch on ``executor``: the first launch of each of its lanes, at once."""
        self.kernels += program.kernels
        self.iterations += 1
        if program.peak_sm > self._program_peak:
            self._program_peak = program.peak_sm
        self.lanes.start(executor, program, scale, now)

    def _kernel_done(self, stream: int, kernel: Kernel, now: float) -> None:
        """A kernel of ``stream`` completed at ``now``: a neighbour's, or the service's,
        whose lane goes on (:meth:`ExecutorLanes.completed`) and whose batch may end."""
        lanes = self.lanes
        if stream >= lanes.streams:
            self._on_neighbor_kernel_done(kernel, now)
        elif lanes.completed(stream, now):
            self._on_program_done(stream % lanes.executors, now)

    def finish(self, request: int, now: float) -> None:
        self.admission.release(self.requests.state[request])
        self.requests.finished(request, now)

    def hold(self, nbytes: float) -> None:
        """An engine policy now holds ``nbytes`` of memory itself (its KV blocks in use):
        counted in the memory timeline, integral and peak, never in admission."""
        admission = self.admission
        admission.engine_held = nbytes
        self.usage.see_memory(admission.base_memory + admission.memory_used + nbytes)

    # -- internals -----------------------------------------------------------------
    def _timer(self, t: float, kind: int, payload: int) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (t, self._timer_seq, kind, payload))

    def _admit(self, now: float) -> None:
        admission = self.admission
        if admission.admit(self.requests.state, self.batching, self.times.admit_t, now):
            self.usage.see_admitted(admission.admitted)
            self.usage.see_memory(admission.base_memory + admission.memory_used)

    def _on_neighbor_kernel_done(self, kernel: Kernel, now: float) -> None:
        """A neighbour's kernel completed: it launches again after its gap, until the window closes."""
        self.kernels += 1
        neighbors = self.neighbors
        index = neighbors.completed(kernel)
        if now < self.horizon:
            gap = neighbors.gap_s(index)
            if gap > 0.0:
                self._timer(now + gap, _NEIGHBOR, index)
            else:
                neighbors.launch(index, self.gpu, now)

    def _on_program_done(self, executor: int, now: float) -> None:
        self.host_thread.end_iteration(executor, now)
        self.batching.program_done(executor, now)
        if self.regime_switch is not None:
            self._maybe_switch(self.regime_switch, now)
        if self.admission.queue:
            self._admit(now)
        self.batching.dispatch(now)

    def _maybe_switch(self, switch: RegimeSwitch, now: float) -> None:
        """At a safe point: take the switch's assignment when its workspace fits beside
        the admitted requests; else hold admission until it does."""
        key = switch.choose(now)
        admission = self.admission
        if key == self._key:
            self._pending = None
            admission.resume()
            return
        target = self.alternatives[key]
        if target.blocks == self.bound.blocks:  # another regime, the same configs: nothing to switch
            self._key, self._pending = key, None
            admission.resume()
        elif admission.fits(target.reserved_workspace):
            self.bound, self._key, self._pending = target, key, None
            admission.switch_to(target.reserved_workspace)
            self.switches += 1
        else:
            self._pending = key
            admission.pause_for(target.reserved_workspace)

    def _on_arrival(self, r: int, now: float) -> None:
        if self.regime_switch is not None:
            self.regime_switch.observe_arrival(now)
            self._maybe_switch(self.regime_switch, now)
        admission = self.admission
        if admission.never_fits(self.requests.state[r]):
            self.requests.rejected(now)
            return
        admission.queue.append(r)
        if len(admission.queue) == 1:
            self._admit(now)
            self.batching.dispatch(now)

    def _on_timer(self, now: float) -> None:
        _, _, kind, payload = heapq.heappop(self._timers)
        if kind == _HORIZON:
            self.neighbors.close_window(self.gpu, now)
        elif kind == _NEIGHBOR:
            self.neighbors.launch(payload, self.gpu, now)
        else:
            self.batching.dispatch(now)

    def run(self) -> SimResult:
        """Simulate to the end of the drain and compute the metrics.

        The loop inlines the hot path (GPU phase boundaries and the metric integrals):
        it runs millions of times per simulation. A completed kernel goes to
        :meth:`_kernel_done`, which hands the service's own to its lanes
        (:meth:`ExecutorLanes.completed`), the one place a stream's next launch is issued from.
        """
        self._timer(self.horizon, _HORIZON, 0)
        admission = self.admission
        if self.recording is not None:
            self.recording.sample(0.0, admission.base_memory, 0, 0)
            self.recording.sm.append((0.0, 0.0))
            self.gpu.sm_trace = self.recording.sm
        for index in range(len(self.neighbors.specs)):
            self.neighbors.launch(index, self.gpu, 0.0)
        requests = self.requests
        arrival, n, gpu, timers = self.times.arrival_t, requests.n, self.gpu, self._timers
        recording, horizon, queue = self.recording, self.horizon, admission.queue
        waiting = self.batching.queue
        run_until = gpu.run_until
        i = 0
        last_t = 0.0
        memory_integral = idle_waiting = 0.0
        sm_seconds_at_last = 0.0
        stopped = False
        try:
            while i < n or requests.judged < n or timers:
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
                    memory_integral += (admission.base_memory + admission.memory_used + admission.engine_held) * (
                        end - last_t)
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
                    if requests.judged >= n and i >= n and timers[0][2] == _WAKE:
                        heapq.heappop(timers)  # nothing left to serve: drop stale wake-ups
                        continue
                    self._on_timer(t)
                if recording is not None:
                    recording.sample(t, admission.base_memory + admission.memory_used + admission.engine_held,
                                     len(queue) + len(waiting), admission.admitted)
        except Decided:
            stopped = True
        if last_t < horizon:
            memory_integral += (admission.base_memory + admission.memory_used + admission.engine_held) * (
                horizon - last_t)
        self.usage.close(memory_integral, idle_waiting, gpu.sm_seconds(horizon), max(gpu.sm_peak, self._program_peak))
        return SimResult(self._metrics(), recording, self.bound.visited(), stopped)

    def _over_budget(self, now: float, arrived: int) -> str:
        """What drove a run past its launch budget: the neighbour that launched the most,
        or the service's operators, with what to change."""
        launched = self.gpu.launched
        head = (f"the simulation stopped at its budget of {self._launch_limit:,} kernel launches, {now:.3g} s "
                f"into its {self.horizon:.3g} s window: ")
        neighbors, launches = self.neighbors.specs, self.neighbors.launches
        busiest = max(range(len(neighbors)), key=lambda k: launches[k], default=None)
        own = launched - sum(launches)
        if busiest is not None and launches[busiest] > own:
            neighbor = neighbors[busiest]
            return (head + f"neighbour {neighbor.name!r} launched {launches[busiest]:,} of them (a "
                    f"{neighbor.profile.latency.evaluate({}):.3g} s kernel, gap {neighbor.gap_s:.3g} s); lengthen "
                    "its gap or its kernel, or shorten the horizon")
        return (head + f"the service launched {own:,} of them for {arrived:,} arrivals "
                f"({own / max(arrived, 1):,.0f} per request); shorten the horizon or lower the rate, or check "
                "the kernels' latencies and the requests' sizes")

    def _metrics(self) -> Metrics:
        service = self.bound.service
        horizon = self.horizon
        usage = self.usage
        return Metrics(
            **request_figures(service, self.workload, self.times),
            admitted_max=usage.admitted_max,
            memory_peak_bytes=usage.memory_peak,
            memory_byte_seconds=usage.memory_integral,
            reserved_workspace_bytes=self.bound.reserved_workspace,
            sm_busy_fraction=usage.sm_integral / horizon,
            sm_peak=usage.sm_peak,
            idle_while_waiting_s=usage.idle_waiting,
            kernels=self.kernels,
            iterations=self.iterations,
            host_bound_iterations=self.host_thread.host_bound,
            neighbor_progress_ratio=self.neighbors.progress_ratio(horizon),
            config_switches=self.switches,
        )


class NeighborStreams:
    """The service's closed-loop neighbours (``service.neighbors``) on the GPU: each
    relaunches its kernel ``gap_s`` after the last one completed (the run keeps the
    timers), until the window closes. Neighbour ``i`` runs on stream ``first_stream + i``,
    after the service's own streams, on its partition (``part[i]``, an index into the
    GPU's caps). It counts each one's launches and completed work, and the work done by
    the horizon (``at_horizon``), which the progress ratio compares with running alone."""

    def __init__(self, service: Service, first_stream: int) -> None:
        partitions = service.partitions()
        self.specs = service.neighbors  # the problem's neighbours, by index
        self.device = service.device
        self.overhead = service.launch_overhead_s
        self.first_stream = first_stream
        self.part = [partitions.index(n.partition) for n in service.neighbors]
        self.done = [0.0] * len(service.neighbors)
        self.launches = [0] * len(service.neighbors)
        self.at_horizon: float | None = None

    def launch(self, index: int, gpu: SharedGPU, now: float) -> None:
        """Neighbour ``index`` launches its kernel at ``now``."""
        neighbor = self.specs[index]
        phases = neighbor.profile.phases({}, self.device)
        self.launches[index] += 1
        gpu.launch(neighbor.priority + neighbor.partition.priority, self.first_stream + index, neighbor.name, phases,
                   1.0, self.overhead, now, self.part[index])

    def completed(self, kernel: Kernel) -> int:
        """A neighbour's ``kernel`` completed: its work counts; which neighbour's it was."""
        index = kernel.stream - self.first_stream
        self.done[index] += kernel.work_s
        return index

    def gap_s(self, index: int) -> float:
        return float(self.specs[index].gap_s)

    def close_window(self, gpu: SharedGPU, now: float) -> None:
        """The window closes at ``now``: the neighbours' work done by then, their running
        kernels' included in part."""
        # math.fsum, not sum(): compiled, sum()'s int start rejects floats, and CPython >= 3.12
        # compensates float sums where mypyc's loop would not: fsum is one rounding everywhere
        self.at_horizon = math.fsum(self.done) + math.fsum(
            k.work_s - k.work_left_s(now) for k in gpu.running if k.stream >= self.first_stream)

    def progress_ratio(self, horizon: float) -> float | None:
        """The neighbours' work by the horizon over what they would do alone (None without
        neighbours, or when alone they would do nothing)."""
        if not self.specs:
            return None
        device, overhead = self.device, self.overhead
        alone = math.fsum(_alone_progress(nb.profile.phases({}, device), nb.gap_s, overhead, horizon,
                                          nb.partition.exact_share(device), device.sms)
                          for nb in self.specs)
        return (self.at_horizon or 0.0) / alone if alone > 0 else None


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
    good, ttft, per_token = _judge(service.slo, service.kind.token_level, arrival, finish,
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
        "tpot_p99_s": percentile(per_token, 99) if per_token is not None else None,
        "ttft_p90_s": percentile(ttft, 90) if ttft is not None else None,
        "tpot_p90_s": percentile(per_token, 90) if per_token is not None else None,
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
        ttft, per_token = first - arrival, tpot(finish, first, np.asarray(sizes["output"], dtype=np.float64))
        good = done & slo.met(finish - arrival, ttft, per_token)
    return good, ttft[done], per_token[done]


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
    work = math.fsum(w for w, _ in spans)  # fsum: see NeighborStreams.close_window
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
