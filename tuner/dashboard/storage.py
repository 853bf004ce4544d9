"""Open a tuner database for viewing only: the config table and the Optuna studies.

A dashboard that shows a database must not create, migrate or lock it, and must keep
working while ``tuner tune`` writes the same database. Every connection it makes is
read-only at the database's own level: a SQLite file is opened with ``mode=ro`` (no
journal, no schema change), a PostgreSQL session with ``default_transaction_read_only``,
a MySQL session with ``SET SESSION TRANSACTION READ ONLY``. Optuna's storage also skips
table creation and its version check. The URL itself is left as the user gave it, so
every message names it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..errors import StorageError
from ..readonly_sqlite import read_only_connect


def read_only_engine_kwargs(url: str) -> dict[str, Any]:
    """:func:`sqlalchemy.create_engine` arguments that make every connection read-only."""
    from ..store.store import parse_url, resolve_url, shown, sqlite_file

    parsed = parse_url(resolve_url(url))
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = sqlite_file(parsed)
        if path is not None:
            return {"creator": read_only_connect(path)}
        database = parsed.database or ""
        if not database.startswith("file:"):
            return {}  # in memory: nothing to protect
        uri = database + ("&" if "?" in database else "?") + "mode=ro"
        return {"creator": lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)}
    if backend == "postgresql":
        return {"connect_args": {"options": "-c default_transaction_read_only=on"}}
    if backend in ("mysql", "mariadb"):
        return {"connect_args": {"init_command": "SET SESSION TRANSACTION READ ONLY"}}
    raise StorageError(f"{shown(parsed)}: the dashboard opens only SQLite, PostgreSQL and MySQL databases "
                       f"(read-only); this is {backend}")


def open_readonly(url: str):
    """A :class:`~tuner.store.Store` on ``url`` whose connections cannot write."""
    from ..store import Store

    return Store(url, create=False, engine_kwargs=read_only_engine_kwargs(url))


def readonly_study_storage(url: str):
    """Optuna's RDB storage on ``url``: read-only connections, no table creation or migration."""
    from optuna.storages import RDBStorage

    from ..store.store import resolve_url

    return RDBStorage(resolve_url(url), engine_kwargs=read_only_engine_kwargs(url),
                      skip_table_creation=True, skip_compatibility_check=True)


def default_storage() -> str:
    """``results.db`` in the working directory, else the database the last ``tuner tune``
    here wrote (:func:`tuner.profile.user_cache.last_tune`), else the bundled example."""
    from ..bundled import EXAMPLE_DATABASE
    from ..profile.user_cache import local_or_last_tune

    return local_or_last_tune() or f"sqlite:///{EXAMPLE_DATABASE}"
