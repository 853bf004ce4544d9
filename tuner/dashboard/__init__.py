"""A read-only view of a tuner database: the regime table, goodput versus offered load,
M(t)/R(t)/queue timelines and the Optuna study behind each row, as server-rendered HTML
pages with Plotly figures.

:class:`Dashboard` renders; :mod:`.server` serves it (and optuna-dashboard beside it);
:func:`write_report` writes the same pages into one self-contained HTML file;
:func:`save_into_studies` copies the figures into the studies for optuna-dashboard.
"""

from .board import Dashboard
from .standalone import save_into_studies, write_report
from .storage import default_storage, open_readonly

__all__ = ["Dashboard", "default_storage", "open_readonly", "save_into_studies", "write_report"]
