"""A kernel's life as the GPU layer sees it: phases of (isolated seconds, s, b).

Declared profiles (problem files) and modeled ones (the analytic model) both turn a
latency and a grid into phases here, so the wave rule exists once: the full waves hold
every SM slot, the last partial wave only its share — which is where co-running kernels
fit — and a persistent kernel holds every slot for its whole life.
"""

from __future__ import annotations

import math

Phase = tuple[float, float, float]


def wave_phases(latency_s: float, ctas: float, slots: float, dram: float, persistent: bool = False) -> tuple[Phase, ...]:
    """Phases of a kernel of ``ctas`` CTAs on a GPU with ``slots`` CTA slots (SMs × CTAs/SM).

    Args:
        latency_s: isolated time of the whole kernel.
        ctas: grid size.
        slots: CTAs the whole GPU holds at once for this kernel.
        dram: fraction of peak DRAM bandwidth the kernel draws while all its waves are full.
        persistent: the kernel holds every slot (s = 1) for its whole life.
    """
    if persistent:
        return ((latency_s, 1.0, dram),)
    ctas = max(1.0, math.ceil(ctas))
    waves = math.ceil(ctas / slots)
    tail = (ctas - (waves - 1) * slots) / slots
    if waves == 1:
        return ((latency_s, tail, dram * tail),)
    if tail >= 1.0:
        return ((latency_s, 1.0, dram),)
    per_wave = latency_s / waves
    return ((per_wave * (waves - 1), 1.0, dram), (per_wave, tail, dram * tail))
