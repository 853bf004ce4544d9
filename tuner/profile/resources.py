"""What compiling a launch for an architecture tells us, and what occupancy makes of it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompiledResources:
    """The compiled footprint of one launch on one architecture.

    ``ctas_per_sm`` is the occupancy the device's limits allow (0 when the launch cannot
    run at all, with ``reason`` saying which limit it breaks); ``limiter`` names the
    binding limit (``"registers"``, ``"shared memory"``, ``"warps"``, ``"blocks"``, or
    ``"compile"`` when the config does not compile). ``spill_bytes`` is the per-thread
    local memory ptxas gave the kernel (its stack frame: in a Triton kernel, register
    spills); 0 when nothing spills.
    """

    arch: str
    smem_bytes: int
    regs_per_thread: int
    num_warps: int
    ctas_per_sm: int
    limiter: str
    reason: str | None = None
    spill_bytes: int = 0

    @property
    def legal(self) -> bool:
        return self.reason is None
