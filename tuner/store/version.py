"""The version of the tuner tables' schema (kept apart so readers of exports need no SQLAlchemy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import SchemaMismatchError, StorageError

#: Version of the tuner tables this code reads and writes; ``tuner_schema`` holds it.
SCHEMA_VERSION = 1


def check_export(document: Any, path: Path) -> None:
    """Refuse a JSON document that is not a table export of this schema version.

    Raises:
        StorageError: not a tuner table export.
        SchemaMismatchError: an export of another schema version.
    """
    if not isinstance(document, dict) or "schema_version" not in document:
        raise StorageError(f"{path}: not a tuner table export (no schema_version)")
    if document["schema_version"] != SCHEMA_VERSION:
        raise SchemaMismatchError(f"{path}: tuner schema version {document['schema_version']!r} found, "
                                  f"this tuner reads version {SCHEMA_VERSION}")
