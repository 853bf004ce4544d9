"""Search: one Optuna study per (problem, regime) for the joint assignment with the most goodput.

Optuna is imported here, never by :mod:`tuner.sim` or the runtime.
"""

from ..errors import SearchError
from .evaluate import Constraints, Evaluation, check_constraints, ci_half_width, evaluate
from .run import open_storage, table_rows, tune_problem
from .space import (
    JointSpace, Point, footprint_ladder, isolated_fastest, isolated_latency, representative_variables,
    smallest_footprint,
)
from .study import (
    Choice, OracleResult, Progress, RegimeOutcome, TuneSettings, exhaustive, select_best, study_name, tune_regime,
    warm_starts,
)

__all__ = [
    "Choice", "Constraints", "Evaluation", "JointSpace", "OracleResult", "Point", "Progress", "RegimeOutcome",
    "SearchError", "TuneSettings", "check_constraints", "ci_half_width", "evaluate", "exhaustive", "footprint_ladder",
    "isolated_fastest", "isolated_latency", "open_storage", "representative_variables", "select_best",
    "smallest_footprint", "study_name", "table_rows", "tune_problem", "tune_regime", "warm_starts",
]
