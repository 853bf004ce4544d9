"""The version of the tuner tables' schema, and the one check every reader makes.

Kept apart so readers of exports and the runtime need no SQLAlchemy. Version 2 keys
rows by shape bucket; version 3 adds capacity at the SLO, realised rates, the warm-up
and overload flags, and judges goodput on one accounting base; version 4 adds what a
config needs to run (family, options, SMs, reserved workspace, compiled resources);
version 5 stores THE baseline's configs where the study's did not beat them, with the
reason (``guard``), so a version-4 table may hold configs that lose to the baseline; version 6
adds the engine knob values a regime was tuned with (``engine_args``). A database or export of
another version is refused, never read silently (a version-1 table has one config per
operator and no buckets; a version-2 one counts goodput from an empty start).
"""

from __future__ import annotations

from typing import Any

from ..errors import SchemaMismatchError, StorageError

#: Version of the tuner tables this code reads and writes; ``tuner_schema`` holds it.
SCHEMA_VERSION = 6


#: The fix for a database of an older version (or none recorded).
RETUNE_DATABASE = ("tune again into a new database (`tuner tune --storage sqlite:///new.db`) or delete its "
                   "tuner_* tables; nothing was changed")
#: The fix for a JSON export of an older version.
RETUNE_EXPORT = ("tune again into a new database (`tuner tune --storage sqlite:///new.db`) and export that "
                 "(`tuner table export --format json`)")


def check_version(found: Any, where: object, *, fix: str = RETUNE_DATABASE) -> None:
    """Refuse a table of another schema version with one line naming the fix.

    Args:
        found: the version the table records (None when it records none, or several).
        where: the database URL or file, for the message.
        fix: what to do about an older (or unknown) version; a newer one needs a newer tuner.

    Raises:
        SchemaMismatchError: ``found`` is not :data:`SCHEMA_VERSION`.
    """
    if found == SCHEMA_VERSION and isinstance(found, int) and not isinstance(found, bool):
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > SCHEMA_VERSION:
        fix = "upgrade tuner to read it"
    shown = "unknown" if found is None else found if isinstance(found, int) and not isinstance(found, bool) \
        else repr(found)
    raise SchemaMismatchError(f"{where}: tuner schema version {shown} found, this tuner reads and writes "
                              f"version {SCHEMA_VERSION} (buckets, capacities, requirements, the guard, engine arguments): {fix}")


def check_export(document: Any, path: object) -> None:
    """Refuse a JSON document that is not a table export of this schema version.

    Raises:
        StorageError: not a tuner table export.
        SchemaMismatchError: an export of another schema version.
    """
    if not isinstance(document, dict) or "schema_version" not in document:
        raise StorageError(f"{path}: not a tuner table export (no schema_version)")
    check_version(document["schema_version"], path, fix=RETUNE_EXPORT)
