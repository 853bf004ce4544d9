"""Where tuner keeps what it compiles and measures when no ``--storage`` names a database:
a per-user cache directory, never the working directory.

Why: ``tuner simulate`` and ``tuner profile`` used to create ``./results.db`` (the compile
cache) in whatever directory they ran, and a later ``tuner table show`` or ``tuner
dashboard`` there opened that file and said it "holds no tuner table". The directory is
``$TUNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/tuner``, else ``~/.cache/tuner`` (the XDG
base-directory convention pip and Triton follow); ``$TUNER_STORAGE`` still names one
database for everything.

The directory also remembers, per working directory, the database the last ``tuner
tune`` there wrote, so that commands reading a table without ``--storage`` find it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Overrides the cache directory.
CACHE_DIR_ENV = "TUNER_CACHE_DIR"
#: The compile cache's file in the directory.
COMPILED_FILE = "compiled.db"
#: ``{working directory: storage URL}`` of the last tune run there.
LAST_TUNES_FILE = "last_tunes.json"


def cache_directory() -> Path:
    """``$TUNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/tuner``, else ``~/.cache/tuner``."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "tuner"


def writable_cache_directory() -> tuple[Path | None, str | None]:
    """The cache directory, created if need be, or None and why it cannot be written."""
    directory = cache_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return None, f"{directory}: {exc.strerror or exc}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return None, f"{directory}: not writable"
    return directory, None


def compile_cache_url() -> tuple[str | None, str | None]:
    """The compile cache's URL: ``$TUNER_STORAGE`` when set, else the cache directory's
    file; None and the reason when the directory cannot be written (the caller keeps
    compiles in memory for the run, and says so)."""
    storage = os.environ.get("TUNER_STORAGE")
    if storage:
        return storage, None
    directory, reason = writable_cache_directory()
    if directory is None:
        return None, reason
    return f"sqlite:///{directory / COMPILED_FILE}", None


def existing_cache_file() -> Path | None:
    """The user's cache file when it exists (where ``tuner profile --device cuda``
    measures by default), without creating anything: a load that only reads uses it."""
    path = cache_directory() / COMPILED_FILE
    return path if path.is_file() else None


def existing_cache_url() -> str | None:
    """:func:`existing_cache_file` as a database URL."""
    path = existing_cache_file()
    return None if path is None else f"sqlite:///{path}"


def remember_tune(storage_url: str, here: Path | None = None) -> None:
    """Record that the last tune in ``here`` (default: the working directory) wrote to
    ``storage_url``. Best effort: a cache that cannot be written records nothing."""
    directory, _ = writable_cache_directory()
    if directory is None:
        return
    path = directory / LAST_TUNES_FILE
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    if storage_url.startswith("sqlite:///") and not Path(storage_url[len("sqlite:///"):]).is_absolute():
        storage_url = f"sqlite:///{Path(storage_url[len('sqlite:///'):]).resolve()}"  # read from anywhere
    known[str((here or Path.cwd()).resolve())] = storage_url
    try:
        staged = path.with_suffix(f".{os.getpid()}.tmp")
        staged.write_text(json.dumps(known, indent=1, sort_keys=True))
        staged.replace(path)
    except OSError:
        return


def local_or_last_tune() -> str | None:
    """The table a command here reads without ``--storage``: ``./results.db`` when it
    exists, else the database the last tune here wrote, else None."""
    return "sqlite:///results.db" if Path("results.db").is_file() else last_tune()


def last_tune(here: Path | None = None) -> str | None:
    """The storage URL the last tune in ``here`` wrote, if the cache remembers one."""
    path = cache_directory() / LAST_TUNES_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    found = known.get(str((here or Path.cwd()).resolve())) if isinstance(known, dict) else None
    return found if isinstance(found, str) else None
