"""A kernel's life as the GPU layer sees it: phases of (isolated seconds, s, b, k, w).

``s`` is the share of the GPU's SM slots its CTAs occupy, ``b`` the share of peak DRAM
bandwidth it draws alone, ``k`` ≤ ``s`` the SM share it needs to keep its isolated
speed, and ``w`` the CTA waves the phase runs alone, each on ``s`` of the SMs (0: a
fluid phase, as if its CTAs were infinitely small: merged batches, declared profiles
without a grid). A phase with waves is discrete in the GPU layer: on fewer free SMs it
runs more waves, and its resident CTAs keep their SMs until a wave ends (see
:mod:`tuner.sim.gpu`). Declared profiles (problem files) and modeled ones (the
analytic model) both turn a latency and a grid into phases here, so the wave rule and
the SM-need rule each exist once: the full waves hold every SM slot, the last partial
wave only its share — which is where co-running kernels fit — and a persistent kernel
holds the slots its grid lands on for its whole life.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

Phase = tuple[float, float, float, float, float]


class HasSms(Protocol):
    """A device (a problem's or a preset): all a partition needs of it."""

    sms: int


@dataclass(frozen=True)
class Partition:
    """The SMs a stream's kernels are confined to: an MPS client's active-thread
    percentage, a green context, a libsmctrl mask.

    Attributes:
        name: what the problem file calls it.
        share: its share of the device's SMs, in (0, 1].
        sized_to_partition: kernels are told the partition's SM count (``num_sms``), so
            persistent grids and split counts size themselves to it; otherwise they
            size themselves to the whole device, as a kernel tuned alone does, and run
            on fewer SMs than they planned for.
        priority: added to the stream priority of kernels launched on it (lower goes
            first, as CUDA stream priorities do): a memory-bound lane given priority
            takes the SMs it needs and a compute-bound one the rest.
    """

    name: str
    share: float = 1.0
    sized_to_partition: bool = True
    priority: int = 0

    def sms(self, device: HasSms) -> int:
        """Its SMs on ``device`` (at least one)."""
        return max(1, round(self.share * device.sms))

    def exact_share(self, device: HasSms) -> float:
        """The share its whole SMs are of ``device``'s (what the GPU layer caps)."""
        return self.sms(device) / device.sms


#: The whole device, which a stream without a partition runs on.
WHOLE_DEVICE = Partition("device", 1.0, True)


def sm_need(s: float, b: float, compute: float, saturating_share: float) -> float:
    """``k``: the SM share a phase needs to run at full speed (the one rule).

    Two bounds, each a part of the phase that scales with SMs: its SM-side work
    (arithmetic, shared-memory traffic, latency-bound issue: ``compute`` of its time on
    the ``s`` slots it occupies alone), and its DRAM traffic, which each SM can only
    sustain up to a bounded number of outstanding requests (Little's law), so drawing
    ``b`` of peak bandwidth takes ``b · saturating_share`` of the SMs, where
    ``saturating_share`` is the share at which a streaming kernel saturates DRAM. Never
    more than ``s``: a kernel alone on its slots keeps its isolated latency.

    Args:
        s: SM share the phase occupies alone.
        b: DRAM share it draws alone.
        compute: share of its isolated time bound by its SMs, in [0, 1].
        saturating_share: the device's DRAM-saturating SM share (``Device.saturating_share``).
    """
    need = s * compute
    memory = b * saturating_share
    if memory > need:
        need = memory
    return need if need < s else s


def wave_phases(latency_s: float, ctas: float, slots: float, dram: float, persistent: bool = False, *,
                compute: float = 1.0, saturating_share: float = 0.0) -> tuple[Phase, ...]:
    """Phases of a kernel of ``ctas`` CTAs on a GPU with ``slots`` CTA slots (SMs × CTAs/SM).

    Args:
        latency_s: isolated time of the whole kernel.
        ctas: grid size.
        slots: CTAs the whole GPU holds at once for this kernel.
        dram: fraction of peak DRAM bandwidth the kernel draws while all its waves are full.
        persistent: the kernel's CTAs hold their slots (``min(1, ctas / slots)``, every
            slot for a grid sized to the device) for its whole life: one wave.
        compute: share of its time bound by its SMs (see :func:`sm_need`).
        saturating_share: the device's DRAM-saturating SM share (see :func:`sm_need`).
    """
    def phase(seconds: float, s: float, b: float, waves: int) -> Phase:
        return (seconds, s, b, sm_need(s, b, compute, saturating_share), float(waves))

    ctas = max(1.0, math.ceil(ctas))
    if persistent:
        held = min(1.0, ctas / slots)
        return (phase(latency_s, held, dram, 1),)
    waves = math.ceil(ctas / slots)
    tail = (ctas - (waves - 1) * slots) / slots
    if waves == 1:
        return (phase(latency_s, tail, dram * tail, 1),)
    if tail >= 1.0:
        return (phase(latency_s, 1.0, dram, waves),)
    per_wave = latency_s / waves
    return (phase(per_wave * (waves - 1), 1.0, dram, waves - 1), phase(per_wave, tail, dram * tail, 1))
