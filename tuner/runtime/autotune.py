"""``@tuner.runtime.autotune``: launch a ``@triton.jit`` kernel with the table's config.

A drop-in for ``@triton.autotune(configs, key)``: the wrapper keeps the kernel's calling
interface (``kernel[grid](*args, **kwargs)``, ``grid`` a tuple or a callable of the
meta-parameters) and, per launch, asks the dispatcher for the operator's config in the
current regime for the bucket of the launch's key arguments (``key``, as Triton's
autotuner keys its cache): its meta-parameters are passed as constexpr keyword
arguments (only those the kernel declares: a table config may carry planning parameters
such as ``PERSISTENT`` that are not kernel arguments) and ``num_warps``, ``num_stages``,
``num_ctas``, ``maxnreg`` as launch options. Nothing is benchmarked at run time.

This module imports no Triton: the kernel object the caller decorates already did, and
the wrapper only calls it. It keeps no per-call state, so one wrapper serves any number
of threads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .dispatcher import Dispatcher, load_table

__all__ = ["Autotuned", "autotune"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

logger = logging.getLogger("tuner.runtime")


class Autotuned:
    """A kernel whose config comes from a :class:`~tuner.runtime.Dispatcher`.

    Args:
        fn: the ``@triton.jit`` kernel (anything with ``arg_names`` and ``[grid]``).
        op: the operator's name in the table.
        key: the shape of a launch, from the kernel's arguments: argument names, each
            passed under its own name (``["M", "N", "K"]``), or ``{dim: argument}`` when
            the table's key dimension and the kernel's argument are named differently
            (``{"M": "num_tokens"}``). The table's key dimensions of ``op`` pick its bucket.
        dispatcher: where configs come from.

    Raises:
        ValueError: ``key`` names an argument the kernel does not have.
    """

    def __init__(self, fn: Any, *, op: str, key: Sequence[str] | Mapping[str, str],
                 dispatcher: Dispatcher) -> None:
        self.fn = fn
        self.op = op
        pairs = tuple(key.items()) if isinstance(key, Mapping) else tuple((k, k) for k in key)
        self.key: tuple[tuple[str, str], ...] = tuple((str(dim), str(arg)) for dim, arg in pairs)
        self.dispatcher = dispatcher
        self.arg_names: list[str] = list(getattr(fn, "arg_names", ()))
        self._positions = {name: i for i, name in enumerate(self.arg_names)}
        unknown = [arg for _, arg in self.key if self.arg_names and arg not in self._positions]
        if unknown:
            raise ValueError(f"autotune key {unknown!r} names no argument of {getattr(fn, '__name__', fn)!r} "
                             f"(it has {self.arg_names})")
        self._check_key()

    def _check_key(self) -> None:
        """Warn once when the table buckets ``op`` by a dimension ``key`` does not give:
        every launch would get that dimension's last bucket."""
        table = self.dispatcher.table
        if table is None:
            return
        given = {dim for dim, _ in self.key}
        for regime, ops in table.configs.items():
            entry = ops.get(self.op)
            missing = [dim for dim in (entry.key if entry is not None else ()) if dim not in given]
            if missing:
                logger.warning("tuner.runtime: the table %s buckets %r by %s, which autotune(key=...) does not "
                               "give; every launch gets its last bucket's config (regime %s)", table.source,
                               self.op, ", ".join(missing), regime)
                return

    def shape(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """The ``shape`` a launch with ``args``/``kwargs`` passes to the dispatcher."""
        if not self.key:
            return None
        out = {}
        positions = self._positions
        for dim, arg in self.key:
            if arg in kwargs:
                out[dim] = kwargs[arg]
            else:
                i = positions.get(arg)
                out[dim] = args[i] if i is not None and i < len(args) else None
        return out

    def launch_kwargs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments a launch with ``args``/``kwargs`` adds: the table's
        meta-parameters and launch options for the current regime and the launch's bucket."""
        params = self.dispatcher.config(self.op, self.shape(*args, **kwargs))
        declared = self._positions
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


def autotune(*, op: str, key: Sequence[str] | Mapping[str, str] = (), table: Dispatcher | str | Path,
             fallback: Mapping[str, Any] | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a ``@triton.jit`` kernel to launch with the config table's choice.

    Args:
        op: the operator's name in the table.
        key: the arguments giving the launch's shape, passed to ``Dispatcher.config`` as
            ``shape``: names (``["M", "N", "K"]``: the argument ``M`` is the key dimension
            ``M``), or ``{dim: argument}`` for an argument named otherwise. The table
            picks ``op``'s bucket by its key dimensions (``M`` for a matmul).
        table: a :class:`Dispatcher` (shared by the service's kernels, fed by its load
            monitor), or a table path, loaded here with :func:`load_table`.
        fallback: with a path, what to launch when the table cannot be served.

    Example::

        @tuner.runtime.autotune(op="qkv", key=["M", "N", "K"], table=dispatcher)
        @triton.jit
        def kernel(a_ptr, ..., M, N, K, BLOCK_M: tl.constexpr, ...): ...

        kernel[grid](a, b, c, M, N, K)      # the config of M's bucket, current regime

        @tuner.runtime.autotune(op="qkv", key={"M": "num_tokens"}, table=dispatcher)
        @triton.jit
        def kernel2(a_ptr, ..., num_tokens, ...): ...
    """
    dispatcher = table if isinstance(table, Dispatcher) else load_table(table, fallback=fallback)

    def decorate(fn: Any) -> Autotuned:
        return Autotuned(fn, op=op, key=key, dispatcher=dispatcher)

    return decorate
