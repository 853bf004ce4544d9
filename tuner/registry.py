"""The one rule of tuner's registries (batching policies, engine knobs): an extension
registers under its name, once; a second registration under a name is a mistake, not an
override, so it raises instead of silently replacing what the first registered."""

from __future__ import annotations

from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)


def register_named(registry: dict[str, T], item: T, what: str) -> T:
    """Put ``item`` in ``registry`` under its ``name``.

    Raises:
        ValueError: the name is registered already.
    """
    if item.name in registry:
        raise ValueError(f"{what} {item.name!r} is registered twice")
    registry[item.name] = item
    return item
