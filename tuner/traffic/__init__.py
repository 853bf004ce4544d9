"""Traffic: arrival processes, request sizes, trace replay and seeded workloads."""

from tuner.traffic.arrivals import (
    ArrivalProcess,
    Diurnal,
    Gamma,
    OnOff,
    Poisson,
    TraceReplay,
)
from tuner.traffic.sizes import (
    Empirical,
    Exponential,
    Fixed,
    LogNormal,
    SizeDistribution,
    Uniform,
)
from tuner.traffic.trace import Trace, load_trace
from tuner.traffic.workload import Jitter, Workload, make_workload

__all__ = [
    "ArrivalProcess",
    "Diurnal",
    "Empirical",
    "Exponential",
    "Fixed",
    "Gamma",
    "Jitter",
    "LogNormal",
    "OnOff",
    "Poisson",
    "SizeDistribution",
    "Trace",
    "TraceReplay",
    "Uniform",
    "Workload",
    "load_trace",
    "make_workload",
]
