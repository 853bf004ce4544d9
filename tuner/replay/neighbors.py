"""The service's neighbours in a replay: each a closed loop of its kernel beside the
service (launch, wait for it, wait the gap, again), on a stream of its own at its
priority, as the simulator runs them (:meth:`tuner.sim.service.NeighborStreams.launch`).

A neighbour's kernel is a declared profile: on a GPU the spin kernel of
:mod:`tuner.replay.spin`, as long as the kernel alone on its partition, on its share of
the SMs (capped by the partition's); on the CPU that time waited out. A spin lasts its time whatever runs
beside it, so what a replay measures of a neighbour is how long its launches wait to
start, not how much a co-runner slows its work (the simulator's ratio includes both).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from ..problem.model import Neighbor, Service
from ..sim.service import _alone_progress, alone_spans
from .kernels import Backend


class NeighborLoops:
    """One thread per neighbour of ``service``, neighbour ``i`` on the backend's stream
    ``first_stream + i``; :meth:`start` at the window's start, :meth:`close` at the end;
    :meth:`progress_ratio`: kernel work done within the window over what the neighbour
    alone would do (``neighbor_progress_ratio`` of ``tuner simulate``)."""

    def __init__(self, service: Service, backend: Backend, first_stream: int, clock: Callable[[], float]) -> None:
        self.service, self.backend, self.clock = service, backend, clock
        self.first_stream = first_stream
        #: ``on_launch(neighbour index, start, end)`` after each launch (a trace's slice)
        self.on_launch: Callable[[int, float, float], None] | None = None
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self._spans: list[list[tuple[float, float, float]]] = [[] for _ in service.neighbors]
        self._threads = [threading.Thread(target=self._loop, args=(i, n), name=f"replay neighbour {n.name}",
                                          daemon=True) for i, n in enumerate(service.neighbors)]

    def spans(self, neighbor: Neighbor) -> list[tuple[float, float]]:
        """Each phase's ``(work, seconds)`` of one launch alone on its partition."""
        device = self.service.device
        return alone_spans(neighbor.profile.phases({}, device), neighbor.partition.exact_share(device), device.sms)

    def share(self, neighbor: Neighbor) -> float:
        return min(neighbor.profile.sm, neighbor.partition.exact_share(self.service.device))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _loop(self, index: int, neighbor: Neighbor) -> None:
        try:
            self._launches(index, neighbor)
        except BaseException as exc:  # noqa: BLE001 - reported through failure, raised by the replay
            self.failure = self.failure or exc
            self.stop.set()

    def _launches(self, index: int, neighbor: Neighbor) -> None:
        spans, share = self.spans(neighbor), self.share(neighbor)
        work, seconds = math.fsum(w for w, _ in spans), math.fsum(d for _, d in spans)
        pause = neighbor.gap_s + self.service.launch_overhead_s
        while not self.stop.is_set():
            began = self.clock()
            with self.backend.batch(self.first_stream + index):
                self.backend.spin(seconds, self.stop, share)
            ended = self.clock()
            self._spans[index].append((began, ended, work))
            if self.on_launch is not None:
                self.on_launch(index, began, ended)
            if pause > 0:
                self.stop.wait(pause)

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)

    def progress_ratio(self, start: float, horizon_s: float) -> float | None:
        """Work done in ``[start, start + horizon_s]`` (a launch cut by the end counted in
        proportion) over the work the neighbours alone would do; None without any."""
        service = self.service
        if not service.neighbors:
            return None
        end = start + horizon_s
        done = math.fsum(work * max(0.0, min(t1, end) - max(t0, start)) / (t1 - t0) if t1 > t0 else 0.0
                         for spans in self._spans for t0, t1, work in spans)
        alone = math.fsum(_alone_progress(n.profile.phases({}, service.device), n.gap_s, service.launch_overhead_s,
                                          horizon_s, n.partition.exact_share(service.device), service.device.sms)
                          for n in service.neighbors)
        return done / alone if alone > 0 else None
