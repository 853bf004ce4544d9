"""What a run measures of its resources: memory and SM integrals over the window, peaks.

The integrals cover the arrival window ``[0, horizon)`` and are accumulated by the run's
event loop itself (it inlines them: they change at almost every event), then handed over
once with :meth:`UsageMeter.close`; the peaks are raised as memory is admitted or held.
"""

from __future__ import annotations


class UsageMeter:
    """One run's resource figures, as :class:`tuner.sim.metrics.Metrics` reports them:
    ``memory_integral`` (byte-seconds), ``sm_integral`` (SM-seconds), ``idle_waiting``
    (seconds of SMs idle while requests waited), and the peaks of memory, SM share and
    admitted requests."""

    def __init__(self, base_memory: float) -> None:
        self.memory_integral = 0.0
        self.sm_integral = 0.0
        self.idle_waiting = 0.0
        self.memory_peak = base_memory  # the base is held from the start
        self.sm_peak = 0.0
        self.admitted_max = 0

    def see_memory(self, memory: float) -> None:
        """The service holds ``memory`` bytes now."""
        if memory > self.memory_peak:
            self.memory_peak = memory

    def see_admitted(self, admitted: int) -> None:
        """``admitted`` requests are admitted now."""
        if admitted > self.admitted_max:
            self.admitted_max = admitted

    def close(self, memory_integral: float, idle_waiting: float, sm_integral: float, sm_peak: float) -> None:
        """The window's integrals, and the SM peak (the GPU's or a program's), at the end."""
        self.memory_integral, self.idle_waiting = memory_integral, idle_waiting
        self.sm_integral, self.sm_peak = sm_integral, sm_peak
