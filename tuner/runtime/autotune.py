"""``@tuner.runtime.autotune``: launch a ``@triton.jit`` kernel with the table's config.

A drop-in for ``@triton.autotune(configs, key)``: the wrapper keeps the kernel's calling
interface (``kernel[grid](*args, **kwargs)``, ``grid`` a tuple or a callable of the
meta-parameters) and, per launch, asks the dispatcher for the operator's config in the
current regime: its meta-parameters are passed as constexpr keyword arguments (only those
the kernel declares: a table config may carry planning parameters such as
``PERSISTENT`` that are not kernel arguments) and ``num_warps``, ``num_stages``,
``num_ctas``, ``maxnreg`` as launch options. Nothing is benchmarked at run time.

This module imports no Triton: the kernel object the caller decorates already did, and
the wrapper only calls it. It keeps no per-call state, so one wrapper serves any number
of threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .dispatcher import Dispatcher, load_table

__all__ = ["Autotuned", "autotune"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class Autotuned:
    """A kernel whose config comes from a :class:`~tuner.runtime.Dispatcher`.

    Args:
        fn: the ``@triton.jit`` kernel (anything with ``arg_names`` and ``[grid]``).
        op: the operator's name in the table.
        key: kernel arguments whose values form the ``shape`` passed to the dispatcher.
        dispatcher: where configs come from.
    """

    def __init__(self, fn: Any, *, op: str, key: Sequence[str], dispatcher: Dispatcher) -> None:
        self.fn = fn
        self.op = op
        self.key = tuple(key)
        self.dispatcher = dispatcher
        self.arg_names: list[str] = list(getattr(fn, "arg_names", ()))
        unknown = [k for k in self.key if self.arg_names and k not in self.arg_names]
        if unknown:
            raise ValueError(f"autotune key {unknown!r} names no argument of {getattr(fn, '__name__', fn)!r} "
                             f"(it has {self.arg_names})")

    def launch_kwargs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments a launch with ``args``/``kwargs`` adds: the table's
        meta-parameters and launch options for the current regime."""
        shape = None
        if self.key:
            bound = dict(zip(self.arg_names, args))
            bound.update(kwargs)
            shape = {k: bound.get(k) for k in self.key}
        params = self.dispatcher.config(self.op, shape)
        declared = set(self.arg_names)
        extra = {k: v for k, v in params.items()
                 if k in LAUNCH_OPTIONS or not declared or k in declared}
        clash = sorted(set(extra) & set(kwargs))
        if clash:
            raise ValueError(f"{self.op}: arguments {clash} are set both by the caller and by the config table; "
                             "drop them from the call")
        return extra

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self.fn[grid](*args, **kwargs, **self.launch_kwargs(*args, **kwargs))

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)


def autotune(*, op: str, key: Sequence[str] = (), table: Dispatcher | str | Path,
             fallback: Mapping[str, Any] | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a ``@triton.jit`` kernel to launch with the config table's choice.

    Args:
        op: the operator's name in the table.
        key: argument names describing the shape (passed to ``Dispatcher.config``).
        table: a :class:`Dispatcher` (shared by the service's kernels, fed by its load
            monitor), or a table path, loaded here with :func:`load_table`.
        fallback: with a path, what to launch when the table cannot be served.

    Example::

        @tuner.runtime.autotune(op="qkv", key=["M", "N", "K"], table=dispatcher)
        @triton.jit
        def kernel(a_ptr, ..., BLOCK_M: tl.constexpr, ...): ...

        kernel[grid](a, b, c, M, N, K)
    """
    dispatcher = table if isinstance(table, Dispatcher) else load_table(table, fallback=fallback)

    def decorate(fn: Any) -> Autotuned:
        return Autotuned(fn, op=op, key=key, dispatcher=dispatcher)

    return decorate
