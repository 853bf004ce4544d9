"""Upgrade a tuner database's config table from schema version 5 to 6, in place.

Version 6 adds ``engine_args`` to every row: the engine knob values its regime was tuned
with (see ``tuner.store.row.TableRow``), None for a problem that lists no
``service.knobs``. A version-5 table was tuned before problems could list knobs, so None
is exactly what ``tuner tune`` would write for every one of its rows; nothing else
changes. Used once on the committed ``results.db.example``; a user's own table is refused
with the usual one line (tune again).

    .venv/bin/python scripts/upgrade_table_v6.py results.db.example
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path


def upgrade(path: Path) -> None:
    """Add the version-6 column (null in every row) and record version 6.

    Raises:
        SystemExit: the database is not at version 5 (or 6 already: nothing to do).
    """
    connection = sqlite3.connect(path)
    try:
        (version,), = connection.execute("SELECT version FROM tuner_schema").fetchall()
        if version == 6:
            print(f"{path}: already at schema version 6")
            return
        if version != 5:
            raise SystemExit(f"{path}: schema version {version}, not 5: tune again instead")
        connection.execute("ALTER TABLE tuner_configs ADD COLUMN engine_args JSON")
        connection.execute("UPDATE tuner_schema SET version = 6")
        connection.commit()
    finally:
        connection.close()
    print(f"{path}: upgraded to schema version 6")


if __name__ == "__main__":
    for argument in sys.argv[1:] or ["results.db.example"]:
        upgrade(Path(argument))
