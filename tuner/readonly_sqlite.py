"""SQLite files below SQLAlchemy: the header that marks one, and opening one read-only
whatever characters its path holds.

``sqlite:///file:PATH?mode=ro&uri=true`` breaks on ``#`` or ``%`` in PATH (the URL is
decoded before SQLite reads the URI); a connection factory given a percent-encoded
``file:`` URI does not. Used for the committed compile cache and for the databases the
dashboard shows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote


#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a file that starts as a SQLite database does (False when it is
    absent, a directory or unreadable: the caller says what is wrong with it)."""
    try:
        with path.open("rb") as file:
            return file.read(16) == SQLITE_HEADER
    except OSError:
        return False


def read_only_connect(path: Path) -> Callable[[], sqlite3.Connection]:
    """A connection factory (SQLAlchemy's ``creator``) for ``path`` opened with ``mode=ro``."""
    # what urllib.request.pathname2url does on POSIX, without importing urllib.request
    # (~40 ms, http.client and email with it) into the light runtime
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
