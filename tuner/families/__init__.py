"""The registry of kernel families: every room asks it for a family by name.

Bundled and user families enter it the same way — :func:`register` with a
:class:`FamilySpec` — and nothing else in tuner lists families. A package that ships
families of its own registers them at import, or names them under the ``tuner.families``
entry-point group (each entry point loads a :class:`FamilySpec`), which is read the
first time a name is not found. ``docs/kernel-families.md`` has the recipe for a new
family.

Standard library only: the runtime imports this through :mod:`tuner.requirements`.
"""

from __future__ import annotations

from typing import Any

from ..errors import KernelError
from ..registry import register_named
from . import comm, decode_attention, fused_moe, matmul, rmsnorm
from .spec import COST_KINDS, FamilySpec

__all__ = ["COST_KINDS", "FamilySpec", "broken_entry_points", "family_names", "family_origin", "family_spec",
           "get_family", "register", "unregister"]

ENTRY_POINT_GROUP = "tuner.families"

_SPECS: dict[str, FamilySpec] = {}
_ORIGINS: dict[str, str] = {}  # name -> where its spec came from (bundled, an entry point, a register() call)
_BROKEN: dict[str, str] = {}  # entry-point name -> why it did not load
_entry_points_read = False


def register(spec: FamilySpec, origin: str = "registered") -> FamilySpec:
    """Enter ``spec`` in the registry; returns it (usable at module level). ``origin``
    says where it came from (``tuner families`` shows it).

    Raises:
        ValueError: a family of that name is registered already.
    """
    if not isinstance(spec, FamilySpec):
        raise TypeError(f"register() takes a FamilySpec, not {type(spec).__name__}")
    register_named(_SPECS, spec, "kernel family")
    _ORIGINS[spec.name] = origin
    return spec


def unregister(name: str) -> None:
    """Take the family ``name`` out of the registry (a test's family, when it ends)."""
    _SPECS.pop(name, None)
    _ORIGINS.pop(name, None)


def _read_entry_points() -> None:
    """Register the specs packages name under :data:`ENTRY_POINT_GROUP` (once per process).
    One that does not load is set aside with its reason (:func:`broken_entry_points`), so a
    broken plugin fails only the problems that name it."""
    global _entry_points_read
    if _entry_points_read:
        return
    _entry_points_read = True
    from importlib.metadata import entry_points  # ~10 ms: only when a name is not registered

    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name!r} ({point.value}) of {ENTRY_POINT_GROUP}"
        try:
            spec = point.load()
        except Exception as exc:  # a plugin's own error: one line, never a traceback in tuner
            text = str(exc).strip().splitlines()
            _BROKEN[point.name] = f"{where} does not load: {type(exc).__name__}: {text[0] if text else ''}"
            continue
        if not isinstance(spec, FamilySpec):
            _BROKEN[point.name] = f"{where} is a {type(spec).__name__}, not a tuner.families.FamilySpec"
        elif spec.name in _SPECS:
            _BROKEN[point.name] = (f"{where} names family {spec.name!r}, which is registered already "
                                   f"({_ORIGINS[spec.name]}): not registered again")
        else:
            dist = getattr(point, "dist", None)
            register(spec, f"entry point {point.value}" + (f" ({dist.name} {dist.version})" if dist else ""))


def broken_entry_points() -> dict[str, str]:
    """The entry points of :data:`ENTRY_POINT_GROUP` that did not load: name → why."""
    _read_entry_points()
    return dict(_BROKEN)


def family_spec(name: str) -> FamilySpec:
    """The spec of the family ``name``.

    Raises:
        KernelError: no family of that name is registered.
    """
    spec = _SPECS.get(name)
    if spec is None:
        _read_entry_points()
        spec = _SPECS.get(name)
    if spec is None:
        if name in _BROKEN:
            raise KernelError(_BROKEN[name])
        raise KernelError(f"unknown kernel family {name!r}; the registered families are {', '.join(family_names())}.")
    return spec


def family_names() -> tuple[str, ...]:
    """The registered families' names, sorted (entry-point families included)."""
    _read_entry_points()
    return tuple(sorted(_SPECS))


def family_origin(name: str) -> str:
    """Where the registered family ``name`` came from: ``bundled``, ``entry point
    module:attr (dist version)``, or ``registered`` (a :func:`register` call)."""
    family_spec(name)
    return _ORIGINS[name]


def get_family(name: str, **options: Any) -> Any:
    """The family ``name``'s kernel built with ``options`` (imports Triton).

    Raises:
        KernelError: an unknown name, or options the family does not take.
    """
    return family_spec(name).build(**options)


# The bundled families: one line each.
register(matmul.SPEC, "bundled")
register(decode_attention.SPEC, "bundled")
register(rmsnorm.SPEC, "bundled")
register(comm.SPEC, "bundled")
register(fused_moe.SPEC, "bundled")
