"""The error tree of tuner.

Every error a user can cause derives from :class:`TunerError`; the CLI turns one into a
single line and exit code 2. Messages name the thing, the value and the reason::

    TunerError
    ├── ProblemError      a problem file is malformed or inconsistent
    │   └── TraceError    a request trace cannot be read
    ├── AssignmentError   a requested config assignment does not fit the problem
    ├── IllegalConfigError a config cannot run a shape (limit, compile, device)
    ├── KernelError       a kernel family was asked for what it lacks or cannot do
    ├── SearchError       a study cannot run as asked (unknown regime, other settings)
    ├── RunError          a model config or a measured serving run cannot be read
    ├── SimulationError   a simulation passed its event budget
    └── StorageError      a database cannot be opened, read or written
        └── SchemaMismatchError  its tuner_schema version is not this code's
"""

from __future__ import annotations


class TunerError(Exception):
    """Root of every error tuner raises on purpose."""


class ProblemError(TunerError):
    """A problem file (or something it references) is malformed or inconsistent."""


class TraceError(ProblemError):
    """A request trace is missing, unreadable or malformed."""


class AssignmentError(TunerError):
    """An operator-to-config assignment names an unknown operator or config."""


class IllegalConfigError(TunerError):
    """A config cannot run a shape: a shape limit, a failed compile or a device limit."""


class KernelError(TunerError):
    """A kernel family was asked for something it does not have or support: an unknown
    family or option, a shape or routing it cannot take, a launch it cannot make here."""


class StorageError(TunerError):
    """A database (the compile cache, the config table) cannot be opened, read or written."""


class SearchError(TunerError):
    """A study cannot run as asked: an unknown regime, a study made with other settings,
    a space with no legal baseline."""


class RunError(TunerError):
    """A model's config or a measured serving run (``tuner check-run``) is missing,
    unreadable or inconsistent."""


class SimulationError(TunerError):
    """A simulation stopped at its event budget (:data:`tuner.problem.bounds.MAX_LAUNCHES`):
    what the problem asks would take hours, and the message names what drove it."""


class SchemaMismatchError(StorageError):
    """The database's ``tuner_schema`` version is not the one this code reads and writes."""


#: The most characters of a user's input that an error message echoes.
SHOWN_CHARS = 80


def shown_value(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` quoted as an error message echoes it (``'abc'``), cut to ``limit``
    characters with its length said (``'aaa…' (20,000 characters)``): a reason after a
    20,000-character expression is lost, and ``repr`` keeps a newline from splitting
    the one error line."""
    text = str(value)
    head = repr(text[:limit])
    if len(text) <= limit:
        return head
    return f"{head[:-1]}…{head[-1]} ({len(text):,} characters)"


#: The most characters of a path or URL that a message shows (a real one fits; a message
#: echoing a 5,000-character path is not one readable line).
PATH_CHARS = 240


def shortened(text: object, limit: int = PATH_CHARS) -> str:
    """A path or URL as a message shows it, unquoted: cut past ``limit`` characters with
    its length said."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
