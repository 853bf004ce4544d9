"""tuner: load-aware autotuning of Triton kernels by service goodput.

The public API. The errors are imported eagerly; everything else on first use, so that
``import tuner.runtime`` inside a serving process stays light (no numpy, pydantic or YAML).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import AssignmentError, ProblemError, TraceError, TunerError

if TYPE_CHECKING:
    from .problem import Problem, load_problem, resolve_assignment
    from .sim import Metrics, SimResult, simulate

_LAZY = {
    "Problem": ".problem", "load_problem": ".problem", "resolve_assignment": ".problem",
    "Metrics": ".sim", "SimResult": ".sim", "simulate": ".sim",
}

__all__ = [
    "AssignmentError", "Metrics", "Problem", "ProblemError", "SimResult", "TraceError",
    "TunerError", "load_problem", "resolve_assignment", "simulate",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
