"""Problem files: loading, validation and the immutable model they become."""

from .assign_option import resolve_assignment
from .load import load_problem
from .model import (
    Config, Device, Family, KernelProfile, Memory, Neighbor, Operator, PiecewiseLinear,
    Problem, Regime, Service, Slo,
)
from .scenario import Scenario

__all__ = [
    "Config", "Device", "Family", "KernelProfile", "Memory", "Neighbor", "Operator",
    "PiecewiseLinear", "Problem", "Regime", "Scenario", "Service", "Slo", "load_problem", "resolve_assignment",
]
