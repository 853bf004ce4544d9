"""The GPU layer: kernels of several streams sharing SM slots and DRAM bandwidth as fluids.

Each running kernel has remaining work in *isolated seconds* (the time it would take
alone) and, for its current phase, three demands (:mod:`tuner.phases`): ``s``, the
fraction of the GPU's SM slots its CTAs occupy; ``b``, the fraction of peak DRAM
bandwidth it draws alone; and ``k`` ≤ ``s``, the SM share it needs to run at full speed
(its compute and latency-bound part; a memory-bound kernel needs fewer SMs than it
occupies, because DRAM saturates first). Shares are handed out in launch order (stream
priority first, then launch sequence), because the hardware dispatches the CTAs of
earlier kernels first. A kernel's CTAs hold the slots they land on, ``h = min(s, free)``
(within its partition's free share, see below), and it progresses at::

    rate_k = min(1, h_k / k_k, B_free / b_k);  S_free -= h_k;  B_free -= rate_k * b_k

so a lone kernel runs at rate 1 (its isolated latency), kernels whose demands sum under 1
do not slow each other, and saturating kernels share work-conservingly: every slot is
held by some CTA and DRAM is drawn up to its peak. A compute-bound kernel (``k = s``)
progresses in proportion to the slots it holds; a memory-bound one keeps its isolated
speed on ``k`` of them. A kernel's CTAs stay on their slots while they wait for DRAM,
as resident CTAs do.

**Partitions** (MPS active-thread percentage, green contexts, libsmctrl masks): each
kernel belongs to one; a partition caps the SM share its kernels hold together. Disjoint
partitions (green contexts) have caps summing to at most 1; MPS clients may oversubscribe
(caps summing above 1), and then the device's slots bind as well. Partition 0 is the
whole device unless the GPU is built with other caps.

A kernel's phases are its full waves, then its partial tail wave (which holds only part
of the SMs and is where later kernels fit). A launch-overhead phase demands nothing.

**Discrete waves and resident CTAs** (a phase with ``w`` > 0 waves, on a GPU told its SM
count): CTAs are not a fluid. A phase of ``w`` waves, each on ``n = s·N`` SMs, that holds
only ``f < n`` whole SMs runs ``ceil(w·n / f)`` waves instead of ``w``, so its SM-side
share is ``s · w / ceil(w·n / f)`` rather than ``f / N``: 2048 one-per-SM CTAs take 18
waves on 119 SMs where they took 16 on 132, and a persistent 132-CTA grid on 119 SMs takes
two rounds. Its need ``k`` then applies as it does for a fluid phase (a memory-bound phase keeps its speed
on fewer SMs). ``w`` counts the waves left, rounded up, so a kernel given more SMs
mid-wave speeds up only for the waves still to come. And resident CTAs are not
preempted: a discrete kernel keeps the SMs it holds until its phase ends or, when a kernel
earlier in the order (a higher stream priority, an earlier launch) waits for SMs, until
its next wave boundary, where it gives them back and the order hands them out again. A
persistent phase is one wave: whoever waits behind it waits for its end. SMs that free
up are taken by the kernels that still want some, in order, as pending CTAs are. A fluid
phase (``w`` = 0) is preempted at once; every limit case of the fluid holds
for discrete phases too (a lone kernel, kernels that fit, work-conserving saturation).
What this idealises: a kernel's CTAs form one cohort (a persistent grid whose 13 late
CTAs start when a neighbour frees their SMs at ``d`` ends at about ``T + d/2``, not
``d + T``), and a wave's CTAs end together.

Speed: because allocation is in launch order, a kernel appended at the end never
changes the rates of those before it, and while no kernel is limited (holding fewer
slots than it occupies alone, or below rate 1) a finishing or shrinking kernel changes
nobody's share. Those common cases cost O(log n) (a heap of phase end times); only the
others re-run the allocation over all running kernels, and even then only kernels whose
rate changed are re-anchored, so their end times stay exact.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

from ..phases import Phase

#: Demands this close to the free capacity count as fitting (absorbs float drift).
TOLERANCE = 1e-9


def left_to_right_sum(values: list[float]) -> float:
    """Floats added in order, uncompensated: what ``sum()`` does on CPython 3.11 and what
    mypyc compiles it to everywhere, where CPython 3.12+ compensates. The core's sums use
    this (or ``math.fsum``), so the compiled and pure-Python builds agree on every Python."""
    total = 0.0
    for value in values:
        total += value
    return total


class Kernel:
    """One launch on the GPU; owned and mutated by :class:`SharedGPU` while it runs.

    ``remaining`` is the work left in the current phase as of time ``anchor``; at a later
    time ``t`` it is ``remaining - rate * (t - anchor)``. ``s`` and ``b`` are its current
    phase's demands (its need ``k`` is read from the phase), ``held`` the SM share its
    CTAs hold now. It is *limited* — a share freed elsewhere could change it — when it
    holds less than it occupies alone or runs below rate 1; a kernel that fits is handed
    exactly ``held = s`` and ``rate = 1``, so ``held != s or rate < 1`` tells.
    ``started`` is when its first phase first ran: a kernel may wait for SMs after its
    launch (resident CTAs of others are not preempted).
    """

    __slots__ = ("key", "stream", "tag", "phases", "scale", "index", "remaining", "anchor",
                 "s", "b", "held", "part", "rate", "started", "version", "waves", "wave_s")

    def __init__(self, key: tuple[int, int], stream: int, tag: object,
                 phases: tuple[Phase, ...], scale: float,
                 overhead_s: float, now: float, part: int) -> None:
        self.key = key
        self.stream = stream
        self.tag = tag
        self.phases = phases
        self.scale = scale
        self.part = part
        # Every kernel starts in its launch phase: no demand, rate 1, ``overhead_s`` long
        # (possibly 0). Placing a zero-demand kernel changes nobody's rate, so a launch
        # is a heap push; the demand arrives at the phase boundary, in one code path.
        self.anchor = now
        self.rate = 1.0
        self.version = 0
        self.index = -1
        self.remaining = overhead_s
        self.s = self.b = self.held = 0.0
        self.started = -1.0
        # the current phase's waves (0: fluid) and isolated seconds per wave
        self.waves = 0.0
        self.wave_s = 0.0

    @property
    def work_s(self) -> float:
        """Isolated seconds of GPU work (launch overhead excluded)."""
        return left_to_right_sum([p[0] for p in self.phases]) * self.scale

    def work_left_s(self, now: float) -> float:
        """Isolated seconds of GPU work not yet done at ``now``."""
        if self.index < 0:
            return self.work_s
        rest = left_to_right_sum([p[0] for p in self.phases[self.index + 1:]]) * self.scale
        return rest + max(self.remaining - self.rate * (now - self.anchor), 0.0)


def share(s: float, b: float, k: float, s_free: float, b_free: float) -> tuple[float, float]:
    """``(held, rate)`` of a phase demanding ``(s, b, k)`` given the free SM share (already
    capped by its partition) and the free DRAM share: the one allocation rule."""
    if s > 0.0 and s_free < s - TOLERANCE:
        held = s_free if s_free > 0.0 else 0.0
        rate = held / k if held < k - TOLERANCE else 1.0
        if held <= 0.0:
            rate = 0.0
    else:
        held, rate = s, 1.0
    if b > 0.0 and b_free < rate * b - TOLERANCE:
        rate = (b_free if b_free > 0.0 else 0.0) / b
    return held, rate


def rounds(s: float, waves_left: float, whole: int, sms: int) -> int:
    """Rounds of CTAs a discrete phase runs on ``whole`` free SMs: its ``waves_left``
    (rounded up, at least one) waves of ``s·sms`` SMs each, dispatched ``whole`` SMs at a
    time: a persistent grid sized to all 132 SMs on 116 free ones runs 2."""
    waves = math.ceil(waves_left - 1e-9)
    if waves < 1:
        waves = 1
    return math.ceil(waves * s * sms / whole - 1e-9)


def wave_rate(s: float, k: float, held: float, waves_left: float, sms: int) -> float:
    """The SM-side rate of a discrete phase that holds ``held`` of the device while it
    occupies ``s`` alone: its ``waves_left`` (rounded up) waves of ``s·sms`` SMs each take
    ``ceil(waves · s·sms / f)`` waves on the ``f`` whole SMs it holds, and its need ``k``
    turns the share that gives into a rate (the one discrete rule; DRAM is applied after)."""
    if held >= s - TOLERANCE:
        return 1.0
    whole = math.floor(held * sms + 1e-6)
    if whole <= 0:
        return 0.0
    waves = max(1, math.ceil(waves_left - 1e-9))
    effective = s * waves / rounds(s, waves_left, whole, sms)
    return effective / k if effective < k - TOLERANCE else 1.0


def phase_rate(phase: Phase, held: float, b_free: float, sms: int) -> float:
    """The rate of a phase that has just started holding ``held`` of the device, with
    ``b_free`` of DRAM left: the fluid rule (:func:`share`) or, for a phase with waves on a
    GPU that knows its SMs, :func:`wave_rate`."""
    _, s, b, k, waves = phase
    if waves > 0.0 and sms > 0:
        rate = wave_rate(s, k, held, waves, sms)
        if b > 0.0 and b_free < rate * b - TOLERANCE:
            rate = (b_free if b_free > 0.0 else 0.0) / b
        return rate
    return share(s, b, k, held, b_free)[1]


class SharedGPU:
    """The GPU the service's streams and its neighbours share: the running kernels, their
    rates, and R(t), the fraction of SM slots in use. (Once ``FluidGPU``: its phases are
    fluid shares of the device only where the SM count is not known or a phase has no
    grid; with one, a kernel runs in discrete CTA waves.)

    Use: :meth:`launch` kernels at the current time (never before :attr:`now`); call
    :meth:`run_until` to move through phase boundaries up to a limit, which returns at the first kernel that
    finishes. The GPU integrates R(t) itself (over ``[0, window_s)``) and tracks its
    peak, so phase changes never need the caller's attention. ``partitions`` are the
    SM-share caps of the partitions kernels may be launched into (partition 0 first).
    """

    def __init__(self, window_s: float = math.inf, partitions: tuple[float, ...] = (1.0,), sms: int = 0) -> None:
        if not partitions or any(not 0.0 < cap <= 1.0 for cap in partitions):
            raise ValueError(f"partition caps must be in (0, 1] but got {partitions!r}")
        if sms < 0:
            raise ValueError(f"a GPU has a positive SM count (0: every phase fluid) but got {sms}")
        #: SMs of the device: phases with waves are discrete on them (0: all fluid)
        self.sms = sms
        self.running: list[Kernel] = []
        self.caps = tuple(partitions)
        self.p_free = list(partitions)
        # without partitions the device's free share is the only one: skip their bookkeeping
        self._partitioned = self.caps != (1.0,)
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
        self.launched = 0  # kernels launched so far; also their launch order

    def sm_seconds(self, t: float) -> float:
        """∫ R dt from 0 to ``min(t, window)``, for any ``t`` not before the last change."""
        window = self._window
        if self.now >= window:
            return self._sm_seconds
        return self._sm_seconds + (1.0 - self.s_free) * ((t if t < window else window) - self.now)

    def launch(self, priority: int, stream: int, tag: object,
               phases: tuple[Phase, ...], scale: float,
               overhead_s: float, now: float, partition: int = 0) -> Kernel:
        """Start a kernel at ``now`` in ``partition``; it joins the allocation order by
        (priority, launch)."""
        self.launched += 1
        kernel = Kernel((priority, self.launched), stream, tag, phases, scale, overhead_s, now, partition)
        running = self.running
        if not running or running[-1].key[0] <= priority:  # (priority, launch) order: last
            running.append(kernel)
        else:
            running.insert(next(i for i, k in enumerate(running) if kernel.key < k.key), kernel)
        end = now + overhead_s
        heappush(self._heap, (end, self.launched, 0, kernel))
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
        p_free = self.p_free
        partitioned = self._partitioned
        running = self.running
        finished = None
        while finished is None and self.next_time <= limit and heap:
            now, _, _, kernel = heappop(heap)
            if now > self.now:  # integrate R up to now, before it changes
                if self.now < window:
                    self._sm_seconds += (1.0 - self.s_free) * ((now if now < window else window) - self.now)
                self.now = now
            kernel.version += 1
            rate = kernel.rate
            residual = kernel.remaining - rate * (now - kernel.anchor)
            if kernel.waves > 0.0 and residual > 0.5 * kernel.wave_s:
                # a wave boundary, scheduled because a kernel before it waits for SMs: its
                # CTAs end, and the order hands their SMs out again (it among the others)
                kernel.remaining, kernel.anchor = residual, now
                kernel.held = kernel.rate = 0.0
                self._reallocate(now)
                self._after_event(now)
                continue
            old_s, old_b, held = kernel.s, kernel.b, kernel.held
            s_free = self.s_free + held
            b_free = self.b_free + rate * old_b
            part_free = 0.0
            if partitioned:
                part = kernel.part
                part_free = p_free[part] + held
            if rate < 1.0 or held != old_s:  # it was limited
                self.limited -= 1
            index = kernel.index = kernel.index + 1
            is_last = running[-1] is kernel
            if index == len(kernel.phases):
                finished = kernel
                if is_last:
                    running.pop()
                else:
                    running.remove(kernel)
                self.s_free, self.b_free = s_free, b_free
                if partitioned:
                    p_free[part] = part_free
                if not running:
                    self.s_free, self.b_free, self.limited = 1.0, 1.0, 0
                    p_free[:] = self.caps
                elif self.limited and (not is_last or held > 0.0):
                    self._reallocate(now)
            else:
                self._next_phase(kernel, index, residual, now, s_free, b_free, part_free, is_last)
                if 1.0 - self.s_free > self.sm_peak:
                    self.sm_peak = 1.0 - self.s_free
            self._after_event(now)
        return finished

    def _next_phase(self, kernel: Kernel, index: int, residual: float, now: float, s_free: float, b_free: float,
                    part_free: float, is_last: bool) -> None:
        """``kernel`` enters its phase ``index`` at ``now``, with ``s_free``/``b_free`` (and
        its partition's ``part_free``) the shares free once its last phase gave back what
        it held: it takes what it needs when nothing before it changes, else the order
        hands the SMs out again (:meth:`_reallocate`)."""
        phase = kernel.phases[index]
        work, s, b, k, waves = phase
        partitioned = self._partitioned
        kernel.s, kernel.b = s, b
        kernel.remaining = work * kernel.scale + (residual if residual < 0.0 else 0.0)
        kernel.anchor = now
        discrete = waves > 0.0 and work > 0.0 and self.sms > 0
        kernel.waves = waves if discrete else 0.0
        kernel.wave_s = work * kernel.scale / waves if discrete else 0.0
        free = part_free if partitioned and part_free < s_free else s_free
        fits = s <= free + TOLERANCE and b <= b_free + TOLERANCE
        if (fits and self.limited == 0) or (is_last and (self.limited == 0 or not discrete)):
            # Nobody before it changes (launch order); and either nobody comes after
            # it, or its demand fits in what everyone left while nobody wants more:
            # it gets what is free, and that is all that changes. (A discrete kernel
            # whose CTAs end while one before it waits lets that one go first.)
            if fits:  # the common case
                held = s
                rate = 1.0
            else:  # the last kernel does not fit: it gets less, so it is limited
                held = s if s < free else (free if free > 0.0 else 0.0)
                rate = phase_rate(phase, held, b_free, self.sms)
                self.limited += 1
            self.s_free = s_free - held
            if partitioned:
                self.p_free[kernel.part] = part_free - held
            self.b_free = b_free - rate * b
            kernel.held = held
            kernel.rate = rate
            kernel.version += 1
            if kernel.started < 0.0 and rate > 0.0:
                kernel.started = now
            if rate > 0.0:
                heappush(self._heap, (now + kernel.remaining / rate, kernel.key[1], kernel.version, kernel))
        else:
            self.s_free, self.b_free = s_free, b_free
            if partitioned:
                self.p_free[kernel.part] = part_free
            kernel.rate = kernel.held = 0.0
            self._reallocate(now)

    def _after_event(self, now: float) -> None:
        """Record R(t)'s edge, drop heap entries of kernels re-rated since they were
        pushed, and find the next boundary."""
        trace = self.sm_trace
        if trace is not None:
            in_use = 1.0 - self.s_free if self.s_free < 1.0 else 0.0
            if in_use != trace[-1][1]:  # a step function needs only its edges
                trace.append((now, in_use))
        heap = self._heap
        while heap:
            top = heap[0]
            if top[2] == top[3].version:
                break
            heappop(heap)
        self.next_time = heap[0][0] if heap else math.inf

    def _rerate(self, kernel: Kernel, rate: float, now: float) -> None:
        kernel.remaining -= kernel.rate * (now - kernel.anchor)
        kernel.anchor = now
        kernel.rate = rate
        kernel.version += 1
        if rate > 0.0:
            heappush(self._heap, (now + kernel.remaining / rate, kernel.key[1], kernel.version, kernel))

    def _reallocate(self, now: float) -> None:
        """The full allocation pass, in order; re-anchors only kernels whose rate changed.

        Discrete kernels keep the SMs their resident CTAs hold and may take more; fluid
        ones take theirs from what is left, in order. Behind the first kernel that waits
        for SMs, every discrete kernel holding some is told to give them back at its next
        wave boundary.
        """
        sms = self.sms
        s_free = 1.0
        partitioned = self._partitioned
        p_free = list(self.caps)
        running = self.running
        if sms > 0:  # resident CTAs are not preempted
            for kernel in running:
                if kernel.waves > 0.0 and kernel.held > 0.0:
                    s_free -= kernel.held
                    if partitioned:
                        p_free[kernel.part] -= kernel.held
        b_free = 1.0
        limited = 0
        waiting = False
        part = 0
        for kernel in running:
            s, b = kernel.s, kernel.b
            if partitioned:
                part = kernel.part
                free = p_free[part] if p_free[part] < s_free else s_free
            else:
                free = s_free
            if kernel.waves > 0.0:
                held = kernel.held
                if held < s - TOLERANCE and free > 0.0:  # its pending CTAs take SMs as they free
                    grow = s - held if s - held < free else free
                    held += grow
                    s_free -= grow
                    if partitioned:
                        p_free[part] -= grow
                if held >= s - TOLERANCE and b <= b_free + TOLERANCE:
                    held, rate = s, 1.0
                else:
                    left = kernel.remaining - kernel.rate * (now - kernel.anchor)
                    rate = wave_rate(s, kernel.phases[kernel.index][3], held, left / kernel.wave_s, sms)
                    if b > 0.0 and b_free < rate * b - TOLERANCE:
                        rate = (b_free if b_free > 0.0 else 0.0) / b
                    limited += 1
            else:
                if s <= free + TOLERANCE and b <= b_free + TOLERANCE:
                    held, rate = s, 1.0
                elif free <= 0.0 < s:  # nothing left for its CTAs: share()'s answer, without the call
                    held, rate = 0.0, 0.0
                    limited += 1
                else:  # the need of the phase it is in (one still launching needs nothing)
                    held, rate = share(s, b, kernel.phases[kernel.index][3] if kernel.index >= 0 else 0.0, free, b_free)
                    limited += 1
                s_free = s_free - held if s_free > held else 0.0
                if partitioned:
                    p_free[part] = max(p_free[part] - held, 0.0)
            kernel.held = held
            if rate != kernel.rate:
                self._rerate(kernel, rate, now)
            if kernel.started < 0.0 and rate > 0.0 and kernel.index >= 0:
                kernel.started = now
            if waiting and kernel.waves > 0.0 and held > 0.0 and rate > 0.0:
                self._yield_at_wave_end(kernel, now)
            if held < s - TOLERANCE:
                waiting = True
            b_free = max(b_free - rate * b, 0.0)
        self.p_free[:] = [free if free > 0.0 else 0.0 for free in p_free]
        self.s_free = s_free if s_free > 0.0 else 0.0
        self.b_free, self.limited = b_free, limited

    def _yield_at_wave_end(self, kernel: Kernel, now: float) -> None:
        """Schedule ``kernel``'s next wave boundary as an event (where its CTAs end and
        a kernel before it in the order gets their SMs), unless its current wave is its
        phase's last."""
        wave_s = kernel.wave_s
        left = kernel.remaining - kernel.rate * (now - kernel.anchor)
        waves_left = left / wave_s
        if waves_left <= 1.0 + 1e-9:
            return
        to_boundary = left - (math.ceil(waves_left - 1e-9) - 1) * wave_s
        heappush(self._heap, (now + to_boundary / kernel.rate, kernel.key[1], kernel.version, kernel))
