"""What a Triton decorator made, told apart by what it holds, not by its class.

``triton.autotune``, ``triton.heuristics`` and ``triton.jit`` return objects of classes
whose module paths move between Triton releases, and a kernel may be wrapped a few
deep; what each holds is stable: an ``Autotuner`` its ``configs``, ``keys`` and ``fn``, a
``Heuristics`` its ``values`` mapping and ``fn``, anything launchable its ``arg_names``
and ``run``. The runtime's decorator and the problem loader both ask; this module
imports nothing so the runtime stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_autotuner(obj: Any) -> bool:
    """A kernel under ``@triton.autotune``."""
    return all(hasattr(obj, name) for name in ("configs", "keys", "fn"))


def is_heuristics(obj: Any) -> bool:
    """A kernel under ``@triton.heuristics``."""
    return isinstance(getattr(obj, "values", None), Mapping) and hasattr(obj, "fn")


def is_launchable(obj: Any) -> bool:
    """Something launched as ``kernel[grid](...)`` whose arguments are named: a
    ``@triton.jit`` kernel, bare or under ``@triton.heuristics`` (what Triton's autotuner
    wraps: it reads ``arg_names``)."""
    return (isinstance(getattr(obj, "arg_names", None), (list, tuple))
            and callable(getattr(type(obj), "__getitem__", None)))


def python_function(obj: Any) -> Any:
    """The Python function under a few layers of decorators (each holding the next in ``fn``)."""
    for _ in range(8):  # a cycle of .fn would not end
        inner = getattr(obj, "fn", None)
        if inner is None:
            break
        obj = inner
    return obj
