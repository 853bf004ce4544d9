"""Replay a service in wall-clock time on a real device (``tuner replay``, issue 41).

Where :mod:`tuner.sim` computes what a service would deliver, a replay executes it: the
regime's seeded arrivals at their times on a wall clock, admission against a memory
budget held by real allocations, the problem's own batching policy (the simulator's,
hosted through :class:`tuner.sim.batching.RelayPolicyHost`), and each executor's batches run
by a worker of its own. Its figures are measured, judged by the simulator's rule
(:func:`tuner.sim.service.request_figures`).

What a batch runs: each operator's kernel where its config has one (on the CPU, the
family's PyTorch reference at reduced shapes), its modeled time where it has a declared
profile (:mod:`tuner.replay.kernels`; on a GPU, the Triton kernels and spin kernels on
CUDA streams per executor and lane, a path not yet run on one). So a CPU replay measures the
harness (queueing, admission, batching, executors side by side), which the test suite
holds against queueing theory.
"""

from __future__ import annotations

from .memory import MemoryLedger
from .run import ReplayResult, replay

__all__ = ["MemoryLedger", "ReplayResult", "replay"]
