"""Open a tuner database for viewing only: the config table and the Optuna studies.

A dashboard that shows a database must not create, migrate or lock it, and must keep
working while ``tuner tune`` writes the same SQLite file; SQLite files are therefore
opened with ``mode=ro`` (no journal, no schema changes) and Optuna's storage skips table
creation and its version check.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from ..errors import TunerError


def readonly_url(url: str) -> str:
    """A SQLite URL rewritten to open its file read-only; other URLs unchanged."""
    from ..store.store import parse_url

    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return url
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return url
    path = Path(database)
    if not path.is_file():
        raise TunerError(f"{url}: no such database file {path}")
    with path.open("rb") as file:
        if file.read(16) != b"SQLite format 3\x00":
            raise TunerError(f"{url}: {path} is not a SQLite database")
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"


def open_readonly(url: str):
    """A :class:`~tuner.store.Store` on ``url`` that never writes."""
    from ..store import Store

    return Store(readonly_url(url), create=False)


def readonly_study_storage(url: str):
    """Optuna's RDB storage on ``url`` without table creation, migration or writes."""
    from optuna.storages import RDBStorage

    return RDBStorage(readonly_url(url), skip_table_creation=True, skip_compatibility_check=True)


def default_storage() -> str:
    return "sqlite:///results.db" if Path("results.db").is_file() else "sqlite:///results.db.example"
