"""Replay a service in wall-clock time on a real device (``tuner replay``, issue 41).

Where :mod:`tuner.sim` computes what a service would deliver, a replay executes it: the
regime's seeded arrivals at their times on a wall clock, admission against a memory
budget held by real allocations, the problem's own batching policy (the simulator's,
hosted through :class:`tuner.sim.batching.RelayHost`), and each executor's batches run
by a worker of its own. Its figures are measured, judged by the simulator's rule
(:func:`tuner.sim.service.request_figures`).

What a batch runs is, in this first version, each launch's *modeled* time spent on the
device (a declared-profile operator's declared latency: the issue's "spin kernels"), not
yet the families' real kernels; so a replay measures the harness (queueing, admission,
batching, executors side by side), which the test suite holds against queueing theory.
"""

from __future__ import annotations

from .memory import MemoryLedger
from .run import ReplayResult, replay

__all__ = ["MemoryLedger", "ReplayResult", "replay"]
