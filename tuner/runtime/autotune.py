"""``@tuner.runtime.autotune``: a drop-in for ``@triton.autotune`` that serves the table.

It takes ``triton.autotune``'s arguments (``configs``, ``key``, ``prune_configs_by``,
``reset_to_zero``, ``restore_value``, ``pre_hook``, ``post_hook``, ``warmup``, ``rep``,
``use_cuda_graph``, ``do_bench``, ``cache_results``) plus ``op``/``table`` (where configs
come from) and ``names`` (table parameter names → the kernel's). The wrapper keeps the
kernel's calling interface (``kernel[grid](*args, **kwargs)``, ``grid`` a tuple or a
callable of the meta-parameters, and Triton's ``run(*args, grid=, warmup=, **kwargs)``, so
it stacks with ``@triton.heuristics`` in either order, as Triton's ``Heuristics`` calls
the wrapped object's ``run`` with ``grid``/``warmup`` as keywords).

Per launch, with a usable table, it asks the dispatcher for ``op``'s config in the current
regime for the bucket of the launch's ``key`` arguments; its meta-parameters (renamed by
``names``) are passed as constexpr keyword arguments (only those the kernel declares: a
table config may carry planning parameters such as ``PERSISTENT``) and ``num_warps``,
``num_stages``, ``num_ctas``, ``maxnreg`` as launch options. With ``configs`` given, the
table's choice must be one of them and that ``triton.Config`` is launched, its
``pre_hook`` first (as ``Autotuner.run`` does). Nothing is benchmarked on this path.

Without a usable table (none, unreadable, another problem, an unknown ``op``, a config
not among ``configs``, a config lacking a constexpr the kernel requires) it does what
``triton.autotune`` does with ``configs`` — it hands the launch to Triton's own
``triton.runtime.autotuner.Autotuner`` built with the same arguments (a benchmark per key,
the key holding the key arguments' values and every tensor argument's dtype) — after one
warning naming the cause. Under the interpreter, where timings mean nothing, the first
config left after ``prune_configs_by`` is taken (the best by ``perf_model`` when given),
unless the caller gave ``do_bench``: then its timings choose, as on a GPU.

This module imports no Triton at import time: the kernel object the caller decorates
already did; Triton's autotuner and ``Config`` are imported when first needed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import KernelError
from ..families import family_names, family_spec
from ..triton_objects import is_autotuner, is_launchable, python_function
from .arguments import check_autotune
from .dispatcher import Dispatcher, _why
from .rows import describe
from .served import read_table

__all__ = ["Autotuned", "autotune"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

#: Parameters a table config may carry that shape how a launch is planned (the grid, a
#: fused or separate epilogue, SMs left free) and that a kernel need not declare.
PLANNING = frozenset({"PERSISTENT", "SM_MARGIN", "FUSE_EPILOGUE", "FUSE_RESIDUAL", "VARIANT"})

#: Parameters that change the work a kernel does, with their neutral value: a kernel that
#: does not declare one can only take its neutral value (the tuned goodput assumed it).
SEMANTIC: Mapping[str, Any] = MappingProxyType({"SPLIT_K": 1, "NUM_SPLITS": 1})

def known_names(asked: object = None) -> dict[str, Mapping[str, str]]:
    """Family name → its table names → the Triton kernel's a server already has (its
    spec's ``runtime_names``: for ``matmul``, Triton's tutorial
    ``python/tutorials/03-matrix-multiplication.py``). For ``asked``, a registered
    family that offers them, only that one: the registry then reads no plugin's entry
    point, so a serving process imports none it does not use. Otherwise every family
    that offers them (for the error that lists them)."""
    if isinstance(asked, str):
        try:
            spec = family_spec(asked)
        except KernelError:
            spec = None
        if spec is not None and spec.runtime_names is not None:
            return {spec.name: spec.runtime_names}
    specs = (family_spec(name) for name in family_names())
    return {spec.name: spec.runtime_names for spec in specs if spec.runtime_names is not None}


logger = logging.getLogger("tuner.runtime")


@dataclass
class _Served:
    """What one table config launches with this kernel."""

    kwargs: dict[str, Any]          # constexpr arguments the kernel declares
    options: dict[str, Any]         # launch options
    config: Any = None              # the matching triton.Config of ``configs``
    reason: str | None = None       # why it cannot be served (not among ``configs``)
    launch: dict[str, Any] = field(default_factory=dict)
    _as_config: Any = None

    def __post_init__(self) -> None:
        self.launch = self.config.all_kwargs() if self.config is not None else {**self.kwargs, **self.options}

    def as_config(self) -> Any:
        if self.config is not None:
            return self.config
        if self._as_config is None:
            from triton import Config  # the kernel's own Triton, already imported

            self._as_config = Config(dict(self.kwargs), **self.options)
        return self._as_config


def _constexprs(fn: Any) -> tuple[list[str] | None, list[str], set[str]]:
    """(the kernel's constexpr parameters, those without a default, names set by a
    decorator underneath): None when ``fn`` is no Triton kernel (a stand-in)."""
    import inspect   # only when a kernel is decorated: keeps `import tuner.runtime` light

    provided: set[str] = set()
    obj, base = fn, None
    for _ in range(16):
        if inspect.isfunction(obj):
            base = obj
            break
        values = getattr(obj, "values", None)
        if isinstance(values, Mapping):  # triton.heuristics sets these
            provided.update(values)
        configs = getattr(obj, "configs", None)
        if isinstance(configs, list) and configs and hasattr(configs[0], "kwargs"):  # triton.autotune
            provided.update(configs[0].kwargs)
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    if base is None:
        return None, [], provided
    constexprs, required = [], []
    for p in inspect.signature(base).parameters.values():
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", type(ann).__name__)
        if "constexpr" in str(text):
            constexprs.append(p.name)
            if p.default is p.empty and p.name not in provided:
                required.append(p.name)
    return constexprs, required, provided


def _interpreting() -> bool:
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except Exception:  # noqa: BLE001 - an older Triton: the environment variable
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


class Autotuned:
    """A kernel whose config comes from a :class:`~tuner.runtime.Dispatcher`, else from
    ``configs`` as ``triton.autotune`` would choose it.

    Args:
        fn: the ``@triton.jit`` kernel (or a Triton decorator over one; anything with
            ``arg_names`` and ``[grid]``).
        op: the operator's name in the table (None: no table, Triton's behaviour).
        key: the shape of a launch, from the kernel's arguments: argument names, each
            passed under its own name (``["M", "N", "K"]``), or ``{dim: argument}`` when
            the table's key dimension and the kernel's argument are named otherwise
            (``{"M": "num_tokens"}``). The table's key dimensions of ``op`` pick its bucket;
            the arguments are ``triton.autotune``'s ``key`` on the fallback.
        dispatcher: where configs come from.
        configs, prune_configs_by, reset_to_zero, restore_value, pre_hook, post_hook,
        warmup, rep, use_cuda_graph, do_bench, cache_results: as ``triton.autotune``.
        names: table parameter name → the kernel's (``{"BLOCK_M": "BLOCK_SIZE_M"}``).

    Raises:
        ValueError: ``key``, ``reset_to_zero`` or ``restore_value`` names an argument the
            kernel does not have; the table sets a semantic parameter (``SPLIT_K``) to a
            value other than its neutral one and the kernel does not declare it.
    """

    def __init__(self, fn: Any, *, op: str | None, key: Sequence[str] | Mapping[str, str],
                 dispatcher: Dispatcher | None, configs: Sequence[Any] | None = None,
                 names: Mapping[str, str] | None = None, prune_configs_by: Mapping[str, Any] | None = None,
                 reset_to_zero: Sequence[str] | None = None, restore_value: Sequence[str] | None = None,
                 pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
                 warmup: int | None = None, rep: int | None = None, use_cuda_graph: bool = False,
                 do_bench: Callable[..., Any] | None = None, cache_results: bool = False) -> None:
        self.fn = fn
        self.op = op
        pairs = tuple(key.items()) if isinstance(key, Mapping) else tuple((k, k) for k in key)
        self.key: tuple[tuple[str, str], ...] = tuple((str(dim), str(arg)) for dim, arg in pairs)
        self.keys: list[str] = [arg for _, arg in self.key]  # triton.autotune's key: argument names
        self.dispatcher = dispatcher
        self.arg_names: list[str] = list(getattr(fn, "arg_names", ()))
        self._positions = {name: i for i, name in enumerate(self.arg_names)}
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", repr(fn))
        self.__name__ = str(name)
        for what, listed in (("key", self.keys), ("reset_to_zero", reset_to_zero or ()),
                             ("restore_value", restore_value or ())):
            unknown = [arg for arg in listed if self.arg_names and arg not in self._positions]
            if unknown:
                raise ValueError(f"autotune {what} {unknown!r} names no argument of {self.__name__!r} "
                                 f"(it has {self.arg_names})")
        self.configs: list[Any] = list(configs) if configs else []
        self.names: dict[str, str] = dict(names or {})
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        self.prune_configs_by = dict(prune_configs_by) if prune_configs_by else None
        self.num_warmups, self.num_reps = warmup, rep
        self._triton_args = dict(pre_hook=pre_hook, post_hook=post_hook, warmup=warmup, rep=rep,
                                 use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)
        self._constexprs, required, _ = _constexprs(fn)
        self._declared = set(self._constexprs if self._constexprs is not None else ()) | set(self.arg_names)
        #: the kernel's runtime (non-constexpr) arguments, which the caller passes: a table
        #: parameter of that name would be passed twice (known only for a Triton kernel)
        self._runtime = set(self.arg_names) - set(self._constexprs) if self._constexprs is not None else set()
        self._required = [(n, self._positions.get(n, len(self.arg_names))) for n in required]
        self._served: dict[int, tuple[Any, _Served]] = {}
        self._seen: tuple[Any, str | None] = (object(), None)
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._best: Any = None
        self._delegate: Any = None
        self._check_key()
        self._table_reason()  # warnings and errors of the table at decoration
        if self.configs and self._constexprs is not None:
            self._triton()  # Triton's checks of its own arguments at decoration

    # --- Triton's attributes ---------------------------------------------------------

    @property
    def best_config(self) -> Any:
        """The ``triton.Config`` of the last launch (None before the first), as Triton's."""
        best = self._best
        return best.as_config() if isinstance(best, _Served) else best

    @property
    def cache(self) -> dict:
        """Triton's per-key choices on the fallback (``{key: Config}``, the key holding the
        key arguments' values and the tensor arguments' dtypes)."""
        return self._delegate.cache if self._delegate is not None else {}

    # --- the table -------------------------------------------------------------------

    def _check_key(self) -> None:
        """Warn once when the table buckets ``op`` by a dimension ``key`` does not give:
        every launch would get that dimension's last bucket."""
        table = self.dispatcher.table if self.dispatcher is not None else None
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

    def _table_reason(self) -> str | None:
        """Why the table cannot be served to this kernel (None when it can); computed
        once per table object, so a reload is looked at again."""
        table = self.dispatcher.table if self.dispatcher is not None else None
        seen, reason = self._seen
        if table is seen:
            return reason
        if self.dispatcher is None or self.op is None:
            reason = "no table given (autotune(op=..., table=...))"
        elif table is None:
            reason = self.dispatcher.fallback_reason or "no table"
        elif not any(self.op in ops for ops in table.configs.values()):
            reason = (f"operator {self.op!r} is not in the table {table.source} "
                      f"(it has {', '.join(sorted(table.ops))})")
        else:
            reason = None
            for ops in table.configs.values():
                entry = ops.get(self.op)
                for params in entry.params if entry is not None else ():
                    served = self._served_for(params)
                    if served.reason is not None:
                        self._warn(served.reason)
        self._seen = (table, reason)
        if reason is not None:
            self._warn(reason)
        return reason

    def _served_for(self, params: Mapping[str, Any]) -> _Served:
        """The launch of one table config (kept per config object, which the table shares)."""
        hit = self._served.get(id(params))
        if hit is not None and hit[0] is params:
            return hit[1]
        served = self._translate(params)
        self._served[id(params)] = (params, served)  # holding params keeps its id unique
        return served

    def _translate(self, params: Mapping[str, Any]) -> _Served:
        kwargs: dict[str, Any] = {}
        options: dict[str, Any] = {}
        stand_in = not self.arg_names
        for table_name, value in params.items():
            name = self.names.get(table_name, table_name)
            if name in self._runtime:
                return _Served({}, {}, reason=f"the table's config for {self.op!r} sets {table_name}={value!r}, "
                               + (f"named {name!r}, " if name != table_name else "")
                               + f"a runtime argument of {self.__name__!r} (not a meta-parameter); it is not served")
            if name in LAUNCH_OPTIONS:
                options[name] = value
            elif stand_in or name in self._declared:
                kwargs[name] = value
            elif name in SEMANTIC:
                if value != SEMANTIC[name]:
                    raise ValueError(f"tuner.runtime: the table's config for {self.op!r} sets {name}={value!r}, which "
                                     f"{self.__name__!r} does not take (its goodput assumed it); declare "
                                     f"{name}: tl.constexpr or map it with names=")
            elif name not in PLANNING:
                self._warn(f"the table's parameter {table_name!r}"
                           + (f" (named {name!r})" if name != table_name else "")
                           + f" is not an argument of {self.__name__!r}",
                           "it is not passed (map it with names= if the kernel calls it otherwise)")
        if not self.configs:
            return _Served(kwargs, options)
        for config in self.configs:
            if dict(config.kwargs) == kwargs and all(getattr(config, k, v) == v for k, v in options.items()):
                return _Served(kwargs, options, config=config)
        return _Served(kwargs, options, reason=f"the table's config for {self.op!r} "
                       f"({', '.join(f'{k}={v!r}' for k, v in {**kwargs, **options}.items())}) is not among configs=")

    def _missing(self, args: tuple, kwargs: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
        n = len(args)
        return [name for name, pos in self._required if pos >= n and name not in kwargs and name not in given]

    def _warn(self, reason: str, then: str | None = None) -> None:
        """One warning per cause."""
        with self._lock:
            if reason in self._warned:
                return
            self._warned.add(reason)
        if then is None:
            then = (f"choosing among its {len(self.configs)} configs as triton.autotune does"
                    if self.configs else "it has no configs= to fall back on")
        logger.warning("tuner.runtime: %s (op %r): %s; %s", self.__name__, self.op, reason, then)

    # --- launches --------------------------------------------------------------------

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
        """The keyword arguments the table adds to a launch with ``args``/``kwargs``: its
        meta-parameters and launch options for the current regime and the launch's bucket
        ({} when the table cannot be served)."""
        if self._table_reason() is not None:
            return {}
        served = self._served_for(self.dispatcher.config(self.op, self.shape(*args, **kwargs)))
        if served.reason is not None:
            return {}
        self._clash(served.launch, kwargs)
        return dict(served.launch)

    def _clash(self, extra: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:
        clash = sorted(k for k in extra if k in kwargs)
        if clash:
            raise ValueError(f"{self.op}: arguments {clash} are set both by the caller and by the config table; "
                             "drop them from the call")

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        """Launch the kernel as Triton's ``Autotuner.run`` would, with the table's config for
        these arguments' shape; when the table cannot serve it (no table, a config lacking a
        parameter the kernel requires), a warning says why and the fallback runs."""
        reason = self._table_reason()
        if reason is None:
            served = self._served_for(self.dispatcher.config(self.op, self.shape(*args, **kwargs)))
            reason = served.reason
            if reason is None:
                extra = served.launch
                missing = self._missing(args, kwargs, extra)
                if not missing:
                    self._clash(extra, kwargs)
                    self._best = served
                    config = served.config
                    if config is not None and config.pre_hook is not None:
                        config.pre_hook({**dict(zip(self.arg_names, args)), **kwargs, **extra})
                    return self._launch(args, grid, warmup, {**kwargs, **extra})
                reason = (f"the table's config for {self.op!r} lacks {', '.join(missing)}, which "
                          f"{self.__name__!r} requires")
            self._warn(reason)
        return self._fall_back(reason, args, grid, warmup, kwargs)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Compile without launching (Triton's ``KernelInterface.warmup``)."""
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def _launch(self, args: tuple, grid: Any, warmup: bool, kwargs: dict[str, Any]) -> Any:
        run = getattr(self.fn, "run", None)
        if run is not None:
            return run(*args, grid=grid, warmup=warmup, **kwargs)
        return None if warmup else self.fn[grid](*args, **kwargs)

    def _fall_back(self, reason: str, args: tuple, grid: Any, warmup: bool, kwargs: dict[str, Any]) -> Any:
        if self.configs:
            if len(self.configs) == 1:  # Triton launches a lone config unpruned: check it here
                self._refuse(self._missing(args, kwargs, self.configs[0].kwargs), reason)
            delegate = self._triton()
            try:
                return delegate.run(*args, grid=grid, warmup=warmup, **kwargs)
            finally:
                self._best = getattr(delegate, "best_config", None)
        params = self.dispatcher.config(self.op, self.shape(*args, **kwargs)) \
            if self.dispatcher is not None and self.op is not None else {}
        if params and self._served_for(params).reason is not None:  # the table's, refused: the fallback=
            params = self.dispatcher.fallback(self.op) if self.dispatcher is not None and self.op is not None else {}
        if not params:
            raise RuntimeError(f"tuner.runtime: {self.__name__!r} (op {self.op!r}) has no config to launch: {reason}, "
                               "and autotune() was given no configs= to fall back on")
        served = self._served_for(params)  # the dispatcher's fallback=
        self._refuse(self._missing(args, kwargs, served.launch), reason)
        self._clash(served.launch, kwargs)
        self._best = served
        return self._launch(args, grid, warmup, {**kwargs, **served.launch})

    def _refuse(self, missing: list[str], reason: str) -> None:
        if missing:
            raise RuntimeError(f"tuner.runtime: {self.__name__!r} (op {self.op!r}) needs {', '.join(missing)}, which "
                               f"no config gives ({reason}); add it to configs= or pass it at the call")

    # --- Triton's autotuner, for the fallback ----------------------------------------

    def _triton(self) -> Any:
        """Triton's ``Autotuner`` over the same kernel and arguments, built once."""
        if self._delegate is not None:
            return self._delegate
        from triton.runtime.autotuner import Autotuner

        prune = dict(self.prune_configs_by or {})
        user_prune, perf_model = prune.get("early_config_prune"), prune.get("perf_model")

        def early_config_prune(configs: list, named_args: dict, **kwargs: Any) -> list:
            if user_prune is not None:
                configs = user_prune(configs, named_args, **kwargs)
            given = {**named_args, **kwargs}
            usable = [c for c in configs if not self._missing((), given, c.kwargs)]
            if configs and not usable:
                self._refuse(self._missing((), given, configs[0].kwargs), "falling back to configs=")
            if not _interpreting() or self._triton_args["do_bench"] is not None:
                return usable  # benchmarked (under the interpreter only with the caller's do_bench)
            if perf_model is not None:  # Triton's own ranking, without the benchmark
                usable = sorted(usable, key=lambda c: perf_model(**named_args, **kwargs, **c.all_kwargs()))
            return usable[:1]  # timings under the interpreter mean nothing: the first

        prune["early_config_prune"] = early_config_prune
        args = dict(self._triton_args)
        with self._lock:
            if self._delegate is None:
                self._delegate = Autotuner(self.fn, self.arg_names, self.configs, self.keys, self.reset_to_zero,
                                           self.restore_value, prune_configs_by=prune, **args)
        return self._delegate


def autotune(configs: Sequence[Any] | None = None, key: Sequence[str] | Mapping[str, str] = (),
             prune_configs_by: Mapping[str, Any] | None = None, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None, warmup: int | None = None, rep: int | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None, cache_results: bool = False,
             *, op: str | None = None, table: Dispatcher | str | Path | None = None,
             names: Mapping[str, str] | str | None = None,
             fallback: Mapping[str, Any] | None = None) -> Callable[[Any], Autotuned]:
    """Decorate a ``@triton.jit`` kernel to launch with the config table's choice, else
    as ``triton.autotune(configs, key, ...)`` would.

    Args:
        configs, key, prune_configs_by, reset_to_zero, restore_value, pre_hook, post_hook,
        warmup, rep, use_cuda_graph, do_bench, cache_results: ``triton.autotune``'s, with
            its meaning (hooks and ``reset_to_zero``/``restore_value`` act where configs
            are benchmarked, that is on the fallback; a config's ``pre_hook`` runs before
            every launch with it). ``key`` may also be ``{dim: argument}`` for a kernel
            whose argument is named otherwise than the table's key dimension.
        op: the operator's name in the table.
        table: a :class:`Dispatcher` (shared by the service's kernels, fed by its load
            monitor), or a table path, read here.
        names: the table's parameter names → the kernel's (``{"BLOCK_M": "BLOCK_SIZE_M"}``),
            or a registered family's name for its spec's ``runtime_names`` (``"matmul"``:
            Triton's tutorial names, ``BLOCK_SIZE_M``/``N``/``K``, ``GROUP_SIZE_M``).
        fallback: with a path, what to launch when the table cannot be served and there
            are no ``configs``.

    Example::

        @tuner.runtime.autotune(configs=[triton.Config({...}), ...], key=["M", "N", "K"],
                                op="qkv", table=dispatcher, names="matmul")
        @triton.jit
        def matmul_kernel(a_ptr, ..., M, N, K, BLOCK_SIZE_M: tl.constexpr, ...): ...

        matmul_kernel[grid](a, b, c, M, N, K, ...)  # the table's config for M's bucket

    Raises:
        TypeError, ValueError: an argument of the wrong type or value (at decoration).
    """
    if configs is not None and not isinstance(configs, (str, bytes, Mapping)) and hasattr(configs, "__iter__"):
        configs = list(configs)  # once: a generator would be spent by the checks below
    known = known_names(names)
    check_autotune(op=op, configs=configs, names=names, known_names=known, prune_configs_by=prune_configs_by,
                   lists={"reset_to_zero": reset_to_zero, "restore_value": restore_value},
                   hooks={"pre_hook": pre_hook, "post_hook": post_hook, "do_bench": do_bench})
    mapping = known[names] if isinstance(names, str) else names
    if table is None or isinstance(table, Dispatcher):
        dispatcher = table
    elif not isinstance(table, (str, os.PathLike)):
        raise TypeError(f"autotune: table must be a Dispatcher or a table path, found {type(table).__name__}")
    else:  # read here, so that a bad table is one warning (the decorator's, naming the cause)
        def reader(where: str | Path) -> Any:
            return read_table(where)

        try:
            loaded, reason = read_table(table), None
        except Exception as exc:  # noqa: BLE001 - a bad table falls back, never raises
            loaded, reason = None, _why(exc, table)
        dispatcher = Dispatcher(loaded, fallback=fallback, reason=reason, reader=reader, source=table)

    def decorate(fn: Any) -> Autotuned:
        if is_autotuner(fn):
            name = getattr(python_function(fn), "__name__", type(fn).__name__)
            raise TypeError(f"autotune: {name} is already wrapped by @triton.autotune, and the two would launch "
                            "with conflicting meta-parameters; remove @triton.autotune and give its configs and "
                            "key to tuner.runtime.autotune(configs=..., key=...), which falls back on them as "
                            "triton.autotune would")
        if not is_launchable(fn):  # (it failed at the first launch, inside Triton's autotuner)
            raise TypeError(f"autotune: decorates a @triton.jit kernel (bare or under @triton.heuristics), not "
                            f"{describe(fn)}")
        return Autotuned(fn, op=op, key=key, dispatcher=dispatcher, configs=configs, names=mapping,
                         prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, pre_hook=pre_hook, post_hook=post_hook, warmup=warmup,
                         rep=rep, use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)

    return decorate
