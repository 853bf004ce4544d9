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

__all__ = ["COST_KINDS", "FamilySpec", "family_names", "family_spec", "get_family", "register", "unregister"]

ENTRY_POINT_GROUP = "tuner.families"

_SPECS: dict[str, FamilySpec] = {}
_entry_points_read = False


def register(spec: FamilySpec) -> FamilySpec:
    """Enter ``spec`` in the registry; returns it (usable at module level).

    Raises:
        ValueError: a family of that name is registered already.
    """
    if not isinstance(spec, FamilySpec):
        raise TypeError(f"register() takes a FamilySpec, not {type(spec).__name__}")
    return register_named(_SPECS, spec, "kernel family")


def unregister(name: str) -> None:
    """Take the family ``name`` out of the registry (a test's family, when it ends)."""
    _SPECS.pop(name, None)


def _read_entry_points() -> None:
    """Register the specs packages name under :data:`ENTRY_POINT_GROUP` (once per process)."""
    global _entry_points_read
    if _entry_points_read:
        return
    from importlib.metadata import entry_points  # ~10 ms: only when a name is not registered
    _entry_points_read = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = point.load()
        except Exception as exc:  # a broken plugin is one line, not a traceback in tuner
            raise KernelError(f"entry point {point.name!r} ({point.value}) of {ENTRY_POINT_GROUP} does not load: "
                              f"{type(exc).__name__}: {exc}") from None
        if isinstance(spec, FamilySpec) and spec.name not in _SPECS:
            register(spec)


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
        raise KernelError(f"unknown kernel family {name!r}; the registered families are {', '.join(family_names())}.")
    return spec


def family_names() -> tuple[str, ...]:
    """The registered families' names, sorted (entry-point families included)."""
    _read_entry_points()
    return tuple(sorted(_SPECS))


def get_family(name: str, **options: Any) -> Any:
    """The family ``name``'s kernel built with ``options`` (imports Triton).

    Raises:
        KernelError: an unknown name, or options the family does not take.
    """
    return family_spec(name).build(**options)


# The bundled families: one line each.
register(matmul.SPEC)
register(decode_attention.SPEC)
register(rmsnorm.SPEC)
register(comm.SPEC)
register(fused_moe.SPEC)
