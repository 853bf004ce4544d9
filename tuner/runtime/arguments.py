"""The checks of :func:`~tuner.runtime.load_table`'s and the dispatcher's arguments.

A bad table is data, found at run time: it warns and serves the fallback. A bad argument
is a mistake in the service's code, the same on every start: it raises at once, a
``TypeError`` for the wrong type and a ``ValueError`` for a wrong value, naming the
argument, so it is fixed before it ships instead of failing later where it is used (an
``AttributeError`` deep in the fallback, a ``'<' not supported`` in the classifier).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from numbers import Integral, Real
from types import MappingProxyType
from typing import Any

from .rows import describe

__all__ = ["OPTIONS", "PRUNE_FIELDS", "check_autotune", "check_dispatcher", "check_load", "split_fallback"]

Params = Mapping[str, Any]

#: The options :func:`~tuner.runtime.load_table` passes on to the dispatcher.
OPTIONS = ("regime_rates", "classifier", "initial_regime", "confirm", "margin", "alpha", "clock")

_EMPTY: Params = MappingProxyType({})

#: The fields of ``prune_configs_by`` (as ``triton.autotune`` documents them).
PRUNE_FIELDS = ("perf_model", "top_k", "early_config_prune")


def check_load(source: Any, problem: Any, device: Any, options: Mapping[str, Any]) -> None:
    """``load_table``'s own arguments, and the names of the options it passes on.

    Raises:
        TypeError: ``source`` not a path, ``problem``/``device`` not strings, an unknown option.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_table: source must be a path or a sqlite:/// URL (str or os.PathLike), "
                        f"found {describe(source)}")
    _optional_text("load_table", "problem", problem)
    _optional_text("load_table", "device", device)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"load_table: unknown option {', '.join(map(repr, unknown))} "
                        f"(it takes problem, device, fallback, {', '.join(OPTIONS)})")


def check_autotune(*, op: Any, configs: Any, names: Any, known_names: Mapping[str, Any], prune_configs_by: Any,
                   lists: Mapping[str, Any], hooks: Mapping[str, Any]) -> None:
    """:func:`~tuner.runtime.autotune`'s own arguments (the key is checked against the
    kernel at decoration, as Triton checks it).

    Raises:
        TypeError: ``op`` not a string, ``configs`` not a list of ``triton.Config``,
            ``names`` neither a mapping of strings nor a registered family's name,
            ``prune_configs_by`` not a mapping or with an unknown field, a list argument
            (``reset_to_zero``, ``restore_value``) not a list of names, a hook not callable.
        ValueError: an empty ``op``, a family ``names`` does not know.
    """
    if op is not None and not isinstance(op, str):
        raise TypeError(f"autotune: op must be the operator's name in the table (a string), found {describe(op)}")
    if op == "":
        raise ValueError("autotune: op is empty; pass the operator's name in the table")
    if configs is not None:
        if isinstance(configs, (str, bytes, Mapping)) or not hasattr(configs, "__iter__"):
            raise TypeError(f"autotune: configs must be a list of triton.Config, found {describe(configs)}")
        for i, config in enumerate(configs):
            if not isinstance(getattr(config, "kwargs", None), Mapping):
                raise TypeError(f"autotune: configs[{i}] is not a triton.Config (it has no kwargs mapping): "
                                f"{describe(config)}")
    if isinstance(names, str):
        if names not in known_names:
            raise ValueError(f"autotune: names={names!r} is not a registered family with runtime names "
                             f"(known: {', '.join(known_names)}); pass a mapping {{table name: kernel name}}")
    elif names is not None:
        if not isinstance(names, Mapping):
            raise TypeError(f"autotune: names must map table parameter names to the kernel's, found {describe(names)}")
        bad = next(((k, v) for k, v in names.items() if not isinstance(k, str) or not isinstance(v, str)), None)
        if bad is not None:
            raise TypeError(f"autotune: names must map strings to strings, found {describe(bad[0])}: "
                            f"{describe(bad[1])}")
    if prune_configs_by is not None:
        if not isinstance(prune_configs_by, Mapping):
            raise TypeError(f"autotune: prune_configs_by must be a dict with fields {', '.join(PRUNE_FIELDS)}, "
                            f"found {describe(prune_configs_by)}")
        unknown = sorted(set(prune_configs_by) - set(PRUNE_FIELDS))
        if unknown:
            raise TypeError(f"autotune: prune_configs_by has unknown field(s) {', '.join(map(repr, unknown))} "
                            f"(it takes {', '.join(PRUNE_FIELDS)})")
    for name, value in lists.items():
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or \
                not all(isinstance(v, str) for v in value):
            raise TypeError(f"autotune: {name} must be a list of argument names, found {describe(value)}")
    for name, value in hooks.items():
        if value is not None and not callable(value):
            raise TypeError(f"autotune: {name} must be callable, found {describe(value)}")


def check_dispatcher(*, regime_rates: Any, classifier: Any, initial_regime: Any, confirm: Any, margin: Any,
                     alpha: Any, clock: Any) -> None:
    """The dispatcher's settings (the fallback is checked by :func:`split_fallback`).

    Raises:
        TypeError: a setting of the wrong type.
        ValueError: ``regime_rates`` empty or with a rate that is not a finite number > 0,
            ``confirm`` < 1, ``margin`` outside [0, 1), ``alpha`` outside (0, 1].
    """
    if regime_rates is not None:
        if not isinstance(regime_rates, Mapping):
            raise TypeError(f"regime_rates must map regime names to rates (req/s), found {describe(regime_rates)}")
        if not regime_rates:
            raise ValueError("regime_rates is empty; pass None to classify by the table's own rates")
        for regime, rate in regime_rates.items():
            if not isinstance(regime, str) or not regime:
                raise TypeError(f"regime_rates: a regime name must be a non-empty string, found {describe(regime)}")
            if not _number(rate) or not 0 < rate < math.inf:
                raise ValueError(f"regime_rates[{regime!r}] must be a finite number > 0, found {describe(rate)}")
    if classifier is not None and not callable(classifier):
        raise TypeError(f"classifier must be a callable (snapshot, regime) -> regime, found {describe(classifier)}")
    _optional_text("the dispatcher", "initial_regime", initial_regime)
    if isinstance(confirm, bool) or not isinstance(confirm, Integral):
        raise TypeError(f"confirm must be an integer, found {describe(confirm)}")
    if confirm < 1:
        raise ValueError(f"confirm must be at least 1, found {confirm}")
    for name, value in (("margin", margin), ("alpha", alpha)):
        if not _number(value):
            raise TypeError(f"{name} must be a number, found {describe(value)}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), found {margin}")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], found {alpha}")
    if not callable(clock):
        raise TypeError(f"clock must be a callable returning seconds, found {describe(clock)}")


def split_fallback(fallback: Any) -> tuple[dict[str, Params], Params]:
    """(per-op fallbacks, the default for any other op) of ``fallback``: None, one params
    mapping, or ``{op: params}`` with an optional ``"*"`` for any other op.

    Raises:
        TypeError: not a mapping, a name that is not a string.
        ValueError: per-operator mappings mixed with parameters (which was meant is a guess).
    """
    if fallback is None:
        return {}, _EMPTY
    if not isinstance(fallback, Mapping):
        raise TypeError(f"fallback must be a mapping of parameters or {{op: parameters}}, found {describe(fallback)}")
    _names("fallback", fallback)
    nested = [name for name, value in fallback.items() if isinstance(value, Mapping)]
    if not nested:
        return {}, MappingProxyType(dict(fallback))
    if len(nested) != len(fallback):
        flat = next(name for name in fallback if name not in nested)
        raise ValueError(f"fallback mixes per-operator mappings ({nested[0]!r}) and parameters ({flat!r}); "
                         "pass {op: parameters} (with '*' for any other op) or one parameters mapping")
    for op, params in fallback.items():
        _names(f"fallback[{op!r}]", params)
    per_op = {op: MappingProxyType(dict(params)) for op, params in fallback.items() if op != "*"}
    return per_op, MappingProxyType(dict(fallback.get("*", {})))


def _names(where: str, mapping: Mapping[Any, Any]) -> None:
    bad = next((name for name in mapping if not isinstance(name, str)), None)
    if bad is not None:
        raise TypeError(f"{where}: names must be strings, found {describe(bad)}")


def _optional_text(who: str, name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{who}: {name} must be a string or None, found {describe(value)}")


def _number(value: Any) -> bool:
    """A real number that compares as one (not a bool, not NaN)."""
    return isinstance(value, Real) and not isinstance(value, bool) and not math.isnan(value)
