"""tuner: load-aware autotuning of Triton kernels by service goodput.

The public API; heavy dependencies (torch, triton, optuna) are imported lazily by the
modules that need them.
"""

from .errors import AssignmentError, ProblemError, TraceError, TunerError
from .problem import Problem, load_problem, resolve_assignment
from .sim import Metrics, SimResult, simulate

__all__ = [
    "AssignmentError", "Metrics", "Problem", "ProblemError", "SimResult", "TraceError",
    "TunerError", "load_problem", "resolve_assignment", "simulate",
]
