"""The service's executors on the GPU: each runs one batch's program at a time, one stream per lane.

Lane ``l`` of executor ``e`` is stream ``l·E + e`` (``E`` executors); each stream's kernels
run on its lane's partition, at its priority. A program's lanes start together; each
launches its kernels in order, the next when the last completed, and a micro-batched
program's launch may also wait for a launch on another lane
(:func:`tuner.sim.program.interleave`). The batch ends when every lane has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .gpu import SharedGPU
from .host_thread import HostThread

if TYPE_CHECKING:
    from ..problem.model import Service
    from .program import Launch, Program, Wait


class ExecutorLanes:
    """The streams of a run's executors: per stream the program it runs (``programs``),
    its next launch (``pc``), its work scale, its waits on other lanes, its completed
    launches and whether it is held (``blocked``); per executor the lanes still running.

    It launches on ``gpu`` through ``host`` (the launches' host thread) and tells its
    owner when a batch ends (:meth:`completed` returns true); the owner keeps the timers,
    the neighbours' streams (numbered from ``streams`` on) and the batches' accounting.
    """

    def __init__(self, service: Service, gpu: SharedGPU, host: HostThread) -> None:
        self.gpu = gpu
        self.host = host
        self.executors: int = service.executors
        self.overhead = service.launch_overhead_s
        self.streams, self.part, self.priority, self.lane_streams = stream_layout(service)
        self.lanes_left = [0] * self.executors
        self.programs: list[tuple[Launch, ...]] = [() for _ in range(self.streams)]
        self.pc = [0] * self.streams
        self.scale = [1.0] * self.streams
        # a micro-batched program's waits between lanes (None: its lanes run independently),
        # each stream's completed launches, and whether its next launch waits on another lane
        self.waits: list[tuple[Wait, ...] | None] = [None] * self.streams
        self.done = [0] * self.streams
        self.blocked = [False] * self.streams

    def start(self, executor: int, program: Program, scale: float, now: float) -> None:
        """Start a batch on ``executor``: the first launch of each of its lanes, at once."""
        started: list[int] = []
        waits = program.waits
        issue = program.issue
        host = self.host
        host.start_iteration(executor, program.host_wait, now)
        for lane, (stream, launches) in enumerate(zip(self.lane_streams[executor], program.lanes)):
            self.done[stream] = 0
            self.blocked[stream] = False
            self.waits[stream] = None if waits is None else waits[lane]
            host.start_lane(stream, None if issue is None else issue[lane], now)
            if launches:
                self.programs[stream] = launches
                self.pc[stream] = 0
                self.scale[stream] = scale
                started.append(stream)
        self.lanes_left[executor] = len(started)
        for stream in started:
            self.dispatch(stream, now)

    def dispatch(self, stream: int, now: float) -> None:
        """Launch the stream's next kernel, or hold it while the launch it waits for on
        another lane has not completed (see :func:`tuner.sim.program.interleave`)."""
        waits = self.waits[stream]
        pc = self.pc[stream]
        if waits is not None:
            lane, count = waits[pc]
            if lane >= 0 and self.done[self.lane_streams[stream % self.executors][lane]] < count:
                self.blocked[stream] = True
                return
            self.blocked[stream] = False
        tag, phases = self.programs[stream][pc]
        host = self.host
        overhead = self.overhead + host.issued(stream, pc, now) if host.paces else self.overhead
        self.gpu.launch(self.priority[stream], stream, tag, phases, self.scale[stream], overhead,
                        now, self.part[stream])

    def completed(self, stream: int, now: float) -> bool:
        """A kernel of the service's ``stream`` completed at ``now``: a micro-batched
        program's (:meth:`_advance`), or a plain program's, whose next launch goes out
        (:meth:`dispatch`) or whose lane is done. Whether the executor's batch ended."""
        if self.waits[stream] is not None:
            return self._advance(stream, now)
        pc = self.pc[stream] + 1
        if pc < len(self.programs[stream]):
            self.pc[stream] = pc
            self.dispatch(stream, now)
            return False
        executor = stream % self.executors
        self.lanes_left[executor] -= 1
        return not self.lanes_left[executor]

    def _advance(self, stream: int, now: float) -> bool:
        """A micro-batched program's launch completed on ``stream``: its next launch, the
        launches of other lanes that waited for this one; whether the batch ended."""
        pc = self.pc[stream] + 1
        self.done[stream] = pc
        executor = stream % self.executors
        if pc < len(self.programs[stream]):
            self.pc[stream] = pc
            self.dispatch(stream, now)
        else:
            self.lanes_left[executor] -= 1
        for other in self.lane_streams[executor]:
            if self.blocked[other]:
                self.dispatch(other, now)
        return not self.lanes_left[executor]


def stream_count(service: Service) -> int:
    """The service's streams: one per lane of each executor (the neighbours' come after)."""
    return service.executors * len(service.lanes())


def stream_layout(service: Service) -> tuple[int, list[int], list[int], list[tuple[int, ...]]]:
    """The service's streams: lane l of executor e is stream l·E + e (E executors); per
    stream its partition (an index into ``service.partitions()``) and priority, and per
    executor its lanes' streams."""
    partitions, lanes, executors = service.partitions(), service.lanes(), service.executors
    streams = stream_count(service)
    part = [partitions.index(lane) for lane in lanes for _ in range(executors)]
    priority = [service.priority + lane.priority for lane in lanes for _ in range(executors)]
    return streams, part, priority, [tuple(range(e, streams, executors)) for e in range(executors)]
