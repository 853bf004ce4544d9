"""A user's Triton kernel in a problem file: import it, read its configs, check them.

``kernel: tutorial_matmul:matmul_kernel`` is resolved like a console-script entry point,
``module:attribute``, with the problem file's directory searched first, then
``sys.path``. Everything that can go wrong with user code (a module that does not
import, a name it lacks, a config with a parameter the kernel does not take, an
argument builder that raises) becomes one :class:`~tuner.problem.explain.Invalid`
naming the key, so ``tuner validate`` prints one line and exits 2.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TunerError
from ..expr import compile_expr
from ..triton_objects import is_autotuner, is_heuristics
from . import schema as s
from .explain import Invalid, checked


def user_family(fam: s.FamilySpec, key: str, base: Path, constants: Mapping[str, float]) -> Any:
    """The :class:`~tuner.kernels.user.UserKernelFamily` a ``kernel: module:function``
    family names, its expressions compiled over its key's dimensions.

    Raises:
        Invalid: keyed by the part of the family at fault, with the reason.
    """
    from ..kernels.user import GemmCost, StreamCost, UserKernelFamily

    spec = fam.user
    assert spec is not None and fam.kernel is not None
    kernel = unwrap(resolve(fam.kernel, base, f"{key}.kernel"), fam.kernel, f"{key}.kernel")
    if spec.configs is not None:
        configs = _configs(spec.configs, base, f"{key}.user.configs")
    elif kernel.configs is not None:
        configs = _triton_configs(kernel.configs, f"{s.show(fam.kernel)}'s @triton.autotune", f"{key}.kernel")
    else:
        raise Invalid(f"{key}.user.configs", "required: name a triton.Config list or write the configs "
                                             "(only a kernel under @triton.autotune brings its own)")
    spec_key = spec.key if spec.key is not None else kernel.key
    if not spec_key:
        raise Invalid(f"{key}.user.key", "required: the kernel arguments a config is chosen by (only a kernel "
                                         "under @triton.autotune brings its own)")
    arguments = resolve(spec.arguments, base, f"{key}.user.arguments")
    if not callable(arguments):
        raise Invalid(f"{key}.user.arguments", f"{s.show(spec.arguments)} is not a function")
    dims = frozenset(spec_key)

    def dimension(value: object, where: str) -> Any:
        expr = checked(where, lambda: compile_expr(value, dims, constants))
        return expr.evaluate

    if spec.cost.gemm is not None:
        g = spec.cost.gemm
        where = f"{key}.user.cost.gemm"
        m, n, k = dimension(g.M, f"{where}.M"), dimension(g.N, f"{where}.N"), dimension(g.K, f"{where}.K")
        try:
            cost: Any = GemmCost(m, n, k, tuple(g.tile.items()))
        except TunerError as exc:
            raise Invalid(f"{where}.tile", str(exc)) from None
    else:
        m = spec.cost.memory_bound
        assert m is not None
        where = f"{key}.user.cost.memory_bound"
        cost = StreamCost(dimension(m.bytes, f"{where}.bytes"),
                          dimension(m.flops, f"{where}.flops") if m.flops is not None else None)
    workspace = dimension(spec.workspace, f"{key}.user.workspace")
    try:
        return UserKernelFamily(fam.kernel, kernel.fn, configs, tuple(spec_key), arguments, cost, workspace,
                                spec.output, kernel.heuristics)
    except TunerError as exc:
        raise Invalid(f"{key}.user", str(exc)) from None


@dataclass(frozen=True)
class Unwrapped:
    """A kernel as a problem file names it, its decorators taken off: the ``@triton.jit``
    function, the configs and key of an ``@triton.autotune`` over it (None without one),
    and the meta-parameters ``@triton.heuristics`` computes from the arguments."""

    fn: Any
    configs: tuple[Any, ...] | None = None
    key: tuple[str, ...] | None = None
    heuristics: Mapping[str, Callable[[dict[str, Any]], Any]] = field(default_factory=dict)


def unwrap(found: Any, path: str, key: str) -> Unwrapped:
    """``found`` without its ``@triton.autotune`` and ``@triton.heuristics`` (told by what
    they hold: an Autotuner its ``configs``, ``keys`` and ``fn``, a Heuristics its
    ``values`` and ``fn``), in any order; what remains must be a ``@triton.jit`` function.

    Raises:
        Invalid: what remains is not a ``@triton.jit`` kernel.
    """
    configs = autotune_key = None
    heuristics: dict[str, Any] = {}
    for _ in range(8):  # decorators stack a few deep; a cycle of .fn would not end
        if is_autotuner(found):
            configs, autotune_key, found = tuple(found.configs), tuple(found.keys), found.fn
        elif is_heuristics(found):
            heuristics = {**found.values, **heuristics}  # the outer decorator's run last, and win
            found = found.fn
        else:
            break
    if not hasattr(found, "params") or not hasattr(found, "arg_names"):
        raise Invalid(key, f"{s.show(path)} is a {type(found).__name__}, not a @triton.jit kernel "
                           "(under @triton.autotune or @triton.heuristics, or neither)")
    return Unwrapped(found, configs, autotune_key, heuristics)


def resolve(path: str, base: Path, key: str) -> Any:
    """``module:attribute`` imported with ``base`` searched first.

    Raises:
        Invalid: not of that form, or the module or attribute cannot be had.
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise Invalid(key, f"expected 'module:name' but got {s.show(path)}")
    base = base.resolve()
    sys.path.insert(0, str(base))
    try:
        with contextlib.redirect_stdout(sys.stderr):  # its prints never reach --json
            module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: one line, never a traceback or a silent exit
        raise Invalid(key, f"cannot import {s.show(module_name)} (searched {base} first): "
                           f"{type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(base))
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise Invalid(key, f"module {s.show(module_name)} has no {s.show(attribute)}")
        found = getattr(found, part)
    return found


def _configs(written: str | list[dict[str, Any]], base: Path, key: str) -> tuple[dict[str, Any], ...]:
    """The configs as parameter maps: a ``triton.Config`` list named ``module:NAME``
    (parameters and launch options), or the file's own maps."""
    if isinstance(written, str):
        return _triton_configs(resolve(written, base, key), s.show(written), key)
    return _distinct(tuple(dict(config) for config in written), key, "")


def _triton_configs(found: Any, what: str, key: str) -> tuple[dict[str, Any], ...]:
    """A ``triton.Config`` list as parameter maps (its parameters and launch options)."""
    if not isinstance(found, (list, tuple)) or not found:
        raise Invalid(key, f"{what} is not a non-empty list of triton.Config")
    configs = []
    for i, config in enumerate(found):
        if not hasattr(config, "kwargs") or not hasattr(config, "num_warps"):
            raise Invalid(key, f"item {i} of {what} is a {type(config).__name__}, not a triton.Config")
        configs.append({**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages})
    return _distinct(tuple(configs), key, "as tuner keeps them (parameters, num_warps, num_stages: it does "
                                          "not model maxnreg or num_ctas)")


def _distinct(configs: tuple[dict[str, Any], ...], key: str, kept: str) -> tuple[dict[str, Any], ...]:
    """``configs``, refused when two are the same (one name for two trials' configs failed
    the tune midway) or when a value is not a constexpr's (a list, None: a traceback
    later), as the second fuzz round found."""
    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for i, config in enumerate(configs):
        for name, value in config.items():
            if not isinstance(value, (bool, int, float, str)):
                raise Invalid(key, f"configs {i} sets {name} to {value!r}; a config's values are numbers, "
                                   "booleans or strings")
            if name in ("num_warps", "num_stages") and (isinstance(value, bool) or not isinstance(value, int)
                                                        or value < 1):
                raise Invalid(key, f"configs {i} sets {name} to {value!r}; it must be a positive integer")
        identity = tuple(sorted((name, repr(value)) for name, value in config.items()))
        if identity in seen:
            raise Invalid(key, f"configs {seen[identity]} and {i} are the same config{' ' + kept if kept else ''}; "
                               "remove one")
        seen[identity] = i
    return configs
