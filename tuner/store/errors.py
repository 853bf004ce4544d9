"""Errors of the table store (each a :class:`~tuner.errors.TunerError`: one line, exit 2)."""

from __future__ import annotations

from ..errors import TunerError


class StoreError(TunerError):
    """A storage URL cannot be used: malformed, unreachable, not a database, no table."""


class SchemaMismatchError(StoreError):
    """The database's ``tuner_schema`` version is not the one this code reads and writes."""
