"""What a command may write over.

A command that writes a file writes a temporary sibling and renames it over the target,
so a target that is not a regular file would be replaced, not written: as root, a device
node becomes a regular file; a link is replaced by a file instead of written through; and
merely opening a FIFO to read its first bytes blocks forever. The tuning database is the
one file a user cannot recreate, so no output ever overwrites a SQLite database. This is
the one rule every writing command applies before any work.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from .readonly_sqlite import is_sqlite_file

__all__ = ["STDOUT", "is_stdout", "output_problem", "output_target", "umask", "write_atomically", "write_output"]

#: The output target that means standard output (a file named ``-`` is written as ``./-``).
STDOUT = Path("-")


def is_stdout(path: object) -> bool:
    """Whether ``path`` is ``-``: standard output, written through, never renamed over."""
    return str(path) == "-"


#: What each writer's file begins with (in its first bytes; a gzipped trace, once unzipped).
EXPORT_MARK = b'"schema_version"'
ENGINE_ARGS_MARK = b"written by `tuner table export`"
TRACE_MARK = b'{"displayTimeUnit":"ms","traceEvents"'
GATE_REPORT_MARK = "## tuner gate:".encode()
HTML_REPORT_MARK = b"<title>tuner report"


def written_by_tuner(path: Path, mark: bytes) -> bool:
    """Whether the regular file ``path`` begins as the writer that owns ``mark`` writes it
    (within its first 4 KiB; gzip is read through)."""
    import gzip

    try:
        with open(path, "rb") as raw:
            head = raw.read(4096)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as unzipped:
                head = unzipped.read(4096)
    except (OSError, EOFError):
        return False
    return mark in head


def refuse_foreign(path: Path, mark: bytes, force: bool) -> None:
    """Refuse to replace an existing file this writer did not write (a user's notes, a
    file of another tool) unless ``force``: outputs replace their own earlier runs only.

    Raises:
        TunerError: the file exists, is not this writer's, and ``force`` is off.
    """
    from .errors import TunerError

    if force or is_stdout(path) or not path.is_file() or written_by_tuner(path, mark):
        return
    raise TunerError(f"{path}: exists and was not written by this tuner command; pass --force to replace it")


def write_output(path: Path, text: str) -> None:
    """``text`` to standard output for ``-``, else :func:`write_atomically` to ``path``."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomically(path, text)


def write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary sibling renamed over it, so an interrupted
    write never leaves half a file (the temporary one is removed on failure).

    Raises:
        StorageError: ``path``'s directory does not exist.
    """
    import tempfile

    from .errors import StorageError

    if not path.parent.is_dir():
        raise StorageError(f"{path}: no directory {path.parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600; an output is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """The process's umask (read by setting it, the only portable way, and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_problem(path: Path) -> str | None:
    """Why ``path`` must not be written, in words that follow it ("is a directory; ..."),
    or None for a new path or a regular file (reached through links) that is not a SQLite
    database."""
    try:
        mode = os.stat(path).st_mode  # through links: what a write would reach
    except FileNotFoundError:
        return "is a link to nothing; name the file itself" if path.is_symlink() else None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a directory; name a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, FIFO or socket, or a link to one); name a file"
    if is_sqlite_file(path):  # (a regular file: reading its first bytes cannot block)
        return "is a SQLite database (the tuning database, or another); an output never overwrites one: name another file"
    return None


def output_target(path: Path) -> Path:
    """Where to write for ``path`` once :func:`output_problem` passed: the file a link
    points to (written through, the link kept), else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path
