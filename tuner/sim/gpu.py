"""The GPU layer: kernels of several streams sharing SM slots and DRAM bandwidth as fluids.

Each running kernel has remaining work in *isolated seconds* (the time it would take
alone) and, for its current phase, two demands: ``s``, the fraction of the GPU's SM
slots it can occupy, and ``b``, the fraction of peak DRAM bandwidth it draws alone.
Rates are handed out in launch order (stream priority first, then launch sequence),
because the hardware dispatches the CTAs of earlier kernels first::

    rate_k = min(1, S_free / s_k, B_free / b_k);  S_free -= rate_k * s_k;  B_free -= rate_k * b_k

so a lone kernel runs at rate 1 (its isolated latency), kernels whose demands sum under 1
do not slow each other, and saturating kernels share work-conservingly. A kernel's
phases are its full waves, then its partial tail wave (which holds only part of the SMs
and is where later kernels fit). A launch-overhead phase demands nothing.
"""

from __future__ import annotations

import math
from bisect import insort

#: Remaining work below this (seconds) counts as done; absorbs float round-off.
EPSILON_S = 1e-12


class Kernel:
    """One launch on the GPU. Mutable, owned by :class:`FluidGPU` while it runs."""

    __slots__ = ("key", "stream", "tag", "phases", "scale", "index", "remaining", "s", "b", "rate", "started")

    def __init__(self, priority: int, seq: int, stream: int, tag: object,
                 phases: tuple[tuple[float, float, float], ...], scale: float, overhead_s: float) -> None:
        self.key = (priority, seq)
        self.stream = stream
        self.tag = tag
        self.phases = phases
        self.scale = scale
        self.rate = 0.0
        self.started = -1.0
        if overhead_s > 0.0:
            self.index = -1
            self.remaining = overhead_s
            self.s = 0.0
            self.b = 0.0
        else:
            self.index = 0
            work, self.s, self.b = phases[0]
            self.remaining = work * scale

    def __lt__(self, other: Kernel) -> bool:
        return self.key < other.key

    @property
    def work_s(self) -> float:
        """Isolated seconds of GPU work (launch overhead excluded)."""
        return sum(p[0] for p in self.phases) * self.scale

    def work_left_s(self) -> float:
        """Isolated seconds of GPU work not yet done."""
        if self.index < 0:
            return self.work_s
        rest = sum(p[0] for p in self.phases[self.index + 1:]) * self.scale
        return rest + max(self.remaining, 0.0)


class FluidGPU:
    """Running kernels and the rates the sharing rule gives them.

    The owner advances time only to :attr:`next_time` (via :meth:`step`) or to an earlier
    moment (via :meth:`advance`), launching kernels in between; :attr:`sm_in_use` is
    ``R(t)``, the fraction of SM slots in use, constant between changes.
    """

    def __init__(self) -> None:
        self.running: list[Kernel] = []
        self.now = 0.0
        self.next_time = math.inf
        self.sm_in_use = 0.0
        self._seq = 0

    def launch(self, kernel_args: tuple, now: float) -> Kernel:
        """Start a kernel at ``now`` (``kernel_args`` as :class:`Kernel` takes, minus ``seq``)."""
        priority, stream, tag, phases, scale, overhead = kernel_args
        self._seq += 1
        kernel = Kernel(priority, self._seq, stream, tag, phases, scale, overhead)
        if overhead <= 0.0:
            kernel.started = now
        self.advance(now)
        if not self.running or self.running[-1].key < kernel.key:
            self.running.append(kernel)
        else:
            insort(self.running, kernel)
        return kernel

    def advance(self, now: float) -> None:
        """Progress every running kernel at its current rate up to ``now``."""
        dt = now - self.now
        if dt > 0.0:
            for k in self.running:
                k.remaining -= k.rate * dt
            self.now = now

    def step(self) -> list[Kernel]:
        """Advance to :attr:`next_time`; move finished phases on; return finished kernels.

        The caller launches follow-up kernels, then calls :meth:`reallocate` once.
        """
        now = self.next_time
        self.advance(now)
        finished = []
        still = []
        for k in self.running:
            while k.remaining <= EPSILON_S:
                k.index += 1
                if k.index == 0:
                    k.started = now
                if k.index == len(k.phases):
                    break
                work, k.s, k.b = k.phases[k.index]
                k.remaining = work * k.scale + k.remaining
            if k.index == len(k.phases):
                finished.append(k)
            else:
                still.append(k)
        self.running = still
        return finished

    def reallocate(self) -> None:
        """Hand out rates in launch order and find the next phase boundary."""
        s_free = 1.0
        b_free = 1.0
        now = self.now
        next_time = math.inf
        for k in self.running:
            s, b = k.s, k.b
            rate = 1.0
            if s > 0.0:
                rate = min(rate, s_free / s) if s_free < s else rate
            if b > 0.0 and b_free < b:
                rate = min(rate, b_free / b)
            if rate <= 0.0:
                rate = 0.0
            else:
                s_free -= rate * s
                b_free -= rate * b
                end = now + k.remaining / rate
                if end < next_time:
                    next_time = end
            k.rate = rate
            if s_free <= 0.0:
                s_free = 0.0
            if b_free <= 0.0:
                b_free = 0.0
        self.sm_in_use = 1.0 - s_free
        self.next_time = next_time
