"""A memory budget that real allocations are held against: reserved before allocated,
never beyond the budget."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


def torch_bytes(device: str) -> Callable[[int], Any]:
    """``nbytes`` -> a real allocation of that many bytes on ``device`` (a torch tensor)."""
    import torch

    return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)


class MemoryLedger:
    """Bytes held against ``budget``, each holding backed by a real allocation of
    ``scale`` × its bytes (on the CPU a replay scales a GPU's budget down: 2 GiB of
    workspace becomes 2 MiB, the accounting staying in the GPU's bytes).

    :meth:`reserve` checks the budget first and allocates only what fits, so the bytes
    held never exceed it (:attr:`peak` says how close they came); :meth:`release` frees
    them. ``allocate`` makes the real allocations (default: torch on ``device``)."""

    def __init__(self, budget: float, device: str = "cpu", scale: float = 1.0,
                 allocate: Callable[[int], Any] | None = None) -> None:
        if not budget >= 0:
            raise ValueError(f"the memory budget must be a number of bytes >= 0, got {budget!r}")
        self.budget = float(budget)
        self.scale = scale
        self.used = 0.0
        self.peak = 0.0
        self._allocate = allocate or torch_bytes(device)
        self._held: dict[Hashable, tuple[float, Any]] = {}

    def reserve(self, key: Hashable, nbytes: float) -> bool:
        """Hold ``nbytes`` under ``key`` if they fit beside what is held (True), else
        change nothing (False)."""
        if key in self._held:
            raise ValueError(f"{key!r} already holds memory")
        if self.used + nbytes > self.budget:
            return False
        allocation = self._allocate(max(int(nbytes * self.scale), 0)) if nbytes > 0 else None
        self._held[key] = (nbytes, allocation)
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        return True

    def release(self, key: Hashable) -> None:
        """Free what ``key`` holds (nothing if it holds nothing)."""
        held = self._held.pop(key, None)
        if held is not None:
            self.used -= held[0]

    def release_all(self) -> None:
        self._held.clear()
        self.used = 0.0
