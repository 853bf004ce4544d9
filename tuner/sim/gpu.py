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

Speed: because allocation is in launch order, a kernel appended at the end never
changes the rates of those before it, and while no kernel is rate-limited a finishing
or shrinking kernel changes nobody's rate. Those common cases cost O(log n) (a heap of
phase end times); only the others re-run the allocation over all running kernels, and
even then only kernels whose rate changed are re-anchored, so their end times stay exact.
"""

from __future__ import annotations

import heapq
import math

#: Demands this close to the free capacity count as fitting (absorbs float drift).
TOLERANCE = 1e-9


class Kernel:
    """One launch on the GPU; owned and mutated by :class:`FluidGPU` while it runs.

    ``remaining`` is the work left in the current phase as of time ``anchor``; at a later
    time ``t`` it is ``remaining - rate * (t - anchor)``.
    """

    __slots__ = ("key", "stream", "tag", "phases", "scale", "index", "remaining", "anchor",
                 "s", "b", "rate", "started", "version")

    def __init__(self, key: tuple[int, int], stream: int, tag: object,
                 phases: tuple[tuple[float, float, float], ...], scale: float,
                 overhead_s: float, now: float) -> None:
        self.key = key
        self.stream = stream
        self.tag = tag
        self.phases = phases
        self.scale = scale
        # Every kernel starts in its launch phase: no demand, rate 1, ``overhead_s`` long
        # (possibly 0). Placing a zero-demand kernel changes nobody's rate, so a launch
        # is a heap push; the demand arrives at the phase boundary, in one code path.
        self.anchor = now
        self.rate = 1.0
        self.version = 0
        self.index = -1
        self.remaining = overhead_s
        self.s = 0.0
        self.b = 0.0
        self.started = -1.0

    @property
    def work_s(self) -> float:
        """Isolated seconds of GPU work (launch overhead excluded)."""
        return sum(p[0] for p in self.phases) * self.scale

    def work_left_s(self, now: float) -> float:
        """Isolated seconds of GPU work not yet done at ``now``."""
        if self.index < 0:
            return self.work_s
        rest = sum(p[0] for p in self.phases[self.index + 1:]) * self.scale
        return rest + max(self.remaining - self.rate * (now - self.anchor), 0.0)


class FluidGPU:
    """Running kernels, their rates, and R(t), the fraction of SM slots in use.

    Use: :meth:`launch` kernels at the current time (never before :attr:`now`); call
    :meth:`run_until` to move through phase boundaries up to a limit, which returns at the first kernel that
    finishes. The GPU integrates R(t) itself (over ``[0, window_s)``) and tracks its
    peak, so phase changes never need the caller's attention.
    """

    def __init__(self, window_s: float = math.inf) -> None:
        self.running: list[Kernel] = []
        self.s_free = 1.0
        self.b_free = 1.0
        self.limited = 0
        self.next_time = math.inf
        self.now = 0.0
        self.sm_peak = 0.0
        self._sm_seconds = 0.0
        self._window = window_s
        self.sm_trace: list[tuple[float, float]] | None = None  # (t, R) edges when recording; starts non-empty
        self._heap: list[tuple[float, int, int, Kernel]] = []
        self._seq = 0

    @property
    def sm_in_use(self) -> float:
        return 1.0 - self.s_free if self.s_free < 1.0 else 0.0

    def sm_seconds(self, t: float) -> float:
        """∫ R dt from 0 to ``min(t, window)``, for any ``t`` not before the last change."""
        window = self._window
        if self.now >= window:
            return self._sm_seconds
        return self._sm_seconds + (1.0 - self.s_free) * ((t if t < window else window) - self.now)

    def launch(self, priority: int, stream: int, tag: object,
               phases: tuple[tuple[float, float, float], ...], scale: float,
               overhead_s: float, now: float) -> Kernel:
        """Start a kernel at ``now``; it joins the allocation order by (priority, launch)."""
        self._seq += 1
        kernel = Kernel((priority, self._seq), stream, tag, phases, scale, overhead_s, now)
        running = self.running
        if not running or running[-1].key < kernel.key:
            running.append(kernel)
        else:
            running.insert(next(i for i, k in enumerate(running) if kernel.key < k.key), kernel)
        end = now + overhead_s
        heapq.heappush(self._heap, (end, self._seq, 0, kernel))
        if end < self.next_time:
            self.next_time = end
        return kernel

    def run_until(self, limit: float) -> Kernel | None:
        """Process phase boundaries at or before ``limit``; stop at the first finished kernel.

        Returns that kernel (the GPU's :attr:`now` is its end time), or None when the
        next boundary lies beyond ``limit``.
        """
        heap = self._heap
        window = self._window
        trace = self.sm_trace
        finished = None
        while finished is None and self.next_time <= limit and heap:
            now, _, _, kernel = heapq.heappop(heap)
            if now > self.now:  # integrate R up to now, before it changes
                if self.now < window:
                    self._sm_seconds += (1.0 - self.s_free) * ((now if now < window else window) - self.now)
                self.now = now
            kernel.version += 1
            residual = kernel.remaining - kernel.rate * (now - kernel.anchor)
            old_s, old_b, old_rate = kernel.s, kernel.b, kernel.rate
            s_free = self.s_free + old_rate * old_s
            b_free = self.b_free + old_rate * old_b
            if old_rate < 1.0:
                self.limited -= 1
            kernel.index += 1
            running = self.running
            is_last = running[-1] is kernel
            if kernel.index == len(kernel.phases):
                finished = kernel
                if is_last:
                    running.pop()
                else:
                    running.remove(kernel)
                self.s_free, self.b_free = s_free, b_free
                if not running:
                    self.s_free, self.b_free, self.limited = 1.0, 1.0, 0
                elif self.limited and not is_last:
                    self._reallocate(now)
            else:
                if kernel.index == 0:
                    kernel.started = now
                work, s, b = kernel.phases[kernel.index]
                kernel.s, kernel.b = s, b
                kernel.remaining = work * kernel.scale + (residual if residual < 0.0 else 0.0)
                kernel.anchor = now
                if is_last or (self.limited == 0 and old_rate == 1.0 and s <= old_s and b <= old_b):
                    # Nobody before it changes (launch order), nobody after it is limited by
                    # a shrinking demand: it gets what is free, and that is all that changes.
                    rate = 1.0
                    if s > 0.0 and s_free < s - TOLERANCE:
                        rate = (s_free if s_free > 0.0 else 0.0) / s
                    if b > 0.0 and b_free < b - TOLERANCE:
                        rate = min(rate, (b_free if b_free > 0.0 else 0.0) / b)
                    self.s_free = s_free - rate * s
                    self.b_free = b_free - rate * b
                    if rate < 1.0:
                        self.limited += 1
                    kernel.rate = rate
                    kernel.version += 1
                    if rate > 0.0:
                        heapq.heappush(heap, (now + kernel.remaining / rate, kernel.key[1], kernel.version, kernel))
                else:
                    self.s_free, self.b_free = s_free, b_free
                    kernel.rate = 0.0
                    self._reallocate(now)
                if 1.0 - self.s_free > self.sm_peak:
                    self.sm_peak = 1.0 - self.s_free
            if trace is not None:
                in_use = 1.0 - self.s_free if self.s_free < 1.0 else 0.0
                if in_use != trace[-1][1]:  # a step function needs only its edges
                    trace.append((now, in_use))
            while heap:  # drop entries of kernels re-rated since they were pushed
                top = heap[0]
                if top[2] == top[3].version:
                    break
                heapq.heappop(heap)
            self.next_time = heap[0][0] if heap else math.inf
        return finished

    def _rerate(self, kernel: Kernel, rate: float, now: float) -> None:
        kernel.remaining -= kernel.rate * (now - kernel.anchor)
        kernel.anchor = now
        kernel.rate = rate
        kernel.version += 1
        if rate > 0.0:
            heapq.heappush(self._heap, (now + kernel.remaining / rate, kernel.key[1], kernel.version, kernel))

    def _reallocate(self, now: float) -> None:
        """The full allocation pass, in order; re-anchors only kernels whose rate changed."""
        s_free = b_free = 1.0
        limited = 0
        for kernel in self.running:
            s, b = kernel.s, kernel.b
            rate = 1.0
            if s > 0.0 and s_free < s - TOLERANCE:
                rate = s_free / s
            if b > 0.0 and b_free < b - TOLERANCE:
                rate = min(rate, b_free / b)
            if rate < 1.0:
                limited += 1
            if rate != kernel.rate:
                self._rerate(kernel, rate, now)
            s_free = max(s_free - rate * s, 0.0)
            b_free = max(b_free - rate * b, 0.0)
        self.s_free, self.b_free, self.limited = s_free, b_free, limited
