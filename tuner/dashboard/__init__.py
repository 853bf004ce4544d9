"""A read-only view of a tuner database: the regime table, goodput versus offered load,
and M(t)/R(t) timelines, as server-rendered HTML pages with Plotly figures.

:class:`Dashboard` renders; :mod:`.server` serves it with :mod:`http.server`;
:func:`write_report` writes the same pages into one self-contained HTML file.
"""

from .render import Dashboard, open_readonly, readonly_url, write_report

__all__ = ["Dashboard", "open_readonly", "readonly_url", "write_report"]
