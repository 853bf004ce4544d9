"""The error tree of tuner.

Every error a user can cause derives from :class:`TunerError`; the CLI turns one into a
single line and exit code 2. Messages name the thing, the value and the reason::

    TunerError
    ├── ProblemError      a problem file is malformed or inconsistent
    │   └── TraceError    a request trace cannot be read
    ├── AssignmentError   a requested config assignment does not fit the problem
    ├── IllegalConfigError a config cannot run a shape (limit, compile, device)
    ├── SearchError       a study cannot run as asked (unknown regime, other settings)
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


class StorageError(TunerError):
    """A database (the compile cache, the config table) cannot be opened, read or written."""


class SearchError(TunerError):
    """A study cannot run as asked: an unknown regime, a study made with other settings,
    a space with no legal baseline."""


class SchemaMismatchError(StorageError):
    """The database's ``tuner_schema`` version is not the one this code reads and writes."""
