"""The regime-indexed config table in a SQL database (SQLAlchemy 2), and its exports.

Importing this package is light: :class:`TableRow`, :data:`SCHEMA_VERSION`, the errors
and the exports load without SQLAlchemy; :class:`Store` and :class:`Base` import it on
first use.
"""

from __future__ import annotations

from typing import Any

from .row import TableRow
from .version import SCHEMA_VERSION

_LAZY = {
    "Base": ".models", "Store": ".store", "DEFAULT_URL": ".store",
    "parse_url": ".store", "export_json": ".export", "export_vllm": ".export", "read_json": ".export",
}

__all__ = [
    "DEFAULT_URL", "SCHEMA_VERSION", "Base", "Store", "TableRow",
    "export_json", "export_vllm", "parse_url", "read_json",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module, __name__), name)
