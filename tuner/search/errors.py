"""Errors of the search (a :class:`~tuner.errors.TunerError`: the CLI prints one line, exit 2)."""

from __future__ import annotations

from ..errors import TunerError


class SearchError(TunerError):
    """A study cannot run as asked: an unknown regime, a study made with other settings,
    a space with no legal baseline."""
