"""Open a SQLite file read-only, whatever characters its path holds.

``sqlite:///file:PATH?mode=ro&uri=true`` breaks on ``#`` or ``%`` in PATH (the URL is
decoded before SQLite reads the URI); a connection factory given a percent-encoded
``file:`` URI does not. Used for the committed compile cache and for the databases the
dashboard shows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.request import pathname2url


def read_only_connect(path: Path) -> Callable[[], sqlite3.Connection]:
    """A connection factory (SQLAlchemy's ``creator``) for ``path`` opened with ``mode=ro``."""
    uri = f"file:{pathname2url(str(path.resolve()))}?mode=ro"
    return lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
