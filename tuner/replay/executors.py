"""The service's executors as workers side by side: each takes one batch at a time and
reports its end on a queue the replay's loop waits on."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ..sim.program import Program

#: What an executor does with a batch: ``work(executor, program, scale, stop)``.
Work = Callable[[int, Program, float, threading.Event], None]


def program_seconds(program: Program, scale: float, launch_overhead_s: float) -> float:
    """How long ``program`` keeps its executor busy, run alone: each lane's launches one
    after another (their modeled phase times × ``scale`` plus a launch overhead each),
    the lanes side by side, the batch ending with its longest lane. Alone, as the
    simulator's merged batches assume: executors sharing the device do not slow each
    other here (the first version's limit, see :mod:`tuner.replay`)."""
    longest = 0.0
    for lane in program.lanes:
        seconds = 0.0
        for _, phases in lane:
            seconds += launch_overhead_s
            for phase in phases:
                seconds += phase[0] * scale
        longest = max(longest, seconds)
    return longest


def sleep_for(launch_overhead_s: float) -> Work:
    """The batch as its modeled time, waited out (ended early when ``stop`` is set)."""
    def work(executor: int, program: Program, scale: float, stop: threading.Event) -> None:
        stop.wait(program_seconds(program, scale, launch_overhead_s))

    return work


class Executors:
    """``count`` worker threads; :meth:`start` hands executor ``e`` a batch, and
    ``(e, end)`` arrives on :attr:`done` when it has run (``end`` from ``clock``)."""

    def __init__(self, count: int, work: Work, clock: Callable[[], float],
                 on_batch: Callable[[int, float, float], None] | None = None) -> None:
        """``on_batch(executor, start, end)``: told of each batch run (a trace's slice).
        A batch that raises stops every worker; :attr:`failure` holds what it raised."""
        self.on_batch = on_batch
        self.failure: BaseException | None = None
        self.done: queue.Queue[tuple[int, float]] = queue.Queue()
        self.stop = threading.Event()
        self._work, self._clock = work, clock
        self._inboxes: list[queue.Queue[tuple[Program, float] | None]] = [queue.Queue() for _ in range(count)]
        self._threads = [threading.Thread(target=self._serve, args=(e,), name=f"replay executor {e}", daemon=True)
                         for e in range(count)]
        for thread in self._threads:
            thread.start()

    def start(self, executor: int, program: Program, scale: float) -> None:
        self._inboxes[executor].put((program, scale))

    def _serve(self, executor: int) -> None:
        inbox = self._inboxes[executor]
        while True:
            job = inbox.get()
            if job is None or self.stop.is_set():
                return
            began = self._clock()
            try:
                self._work(executor, job[0], job[1], self.stop)
            except BaseException as exc:  # noqa: BLE001 - reported to the loop, which raises it
                self.failure = self.failure or exc
                self.stop.set()
                self.done.put((executor, self._clock()))
                return
            end = self._clock()
            if self.on_batch is not None:
                self.on_batch(executor, began, end)
            self.done.put((executor, end))

    def close(self) -> None:
        """Stop every worker (a batch running is cut short) and wait for them."""
        self.stop.set()
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join(timeout=5.0)
