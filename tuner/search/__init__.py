"""Search: one Optuna study per (problem, regime) for the joint assignment with the most goodput.

Optuna is imported here, never by :mod:`tuner.sim` or the runtime.
"""

from ..errors import SearchError
from .baselines import (
    BASELINES, ONE_CONFIG, PER_BUCKET, SMALLEST, Baseline, OneConfigPerOperator, PerBucketIsolatedFastest,
    SmallestFootprint, footprint_ladder,
)
from .evaluate import Constraints, Evaluation, check_constraints, evaluate
from .run import open_storage, table_rows
from .tuning import tune_problem
from .settings import TuneSettings
from .space import CellCost, JointSpace, Point, seconds_alone
from .study import (
    Choice, OracleResult, Progress, RegimeOutcome, exhaustive, select_best, study_name, tune_regime,
    warm_starts,
)

__all__ = [
    "BASELINES", "Baseline", "CellCost", "Choice", "Constraints", "Evaluation", "JointSpace", "ONE_CONFIG",
    "OneConfigPerOperator", "OracleResult", "PER_BUCKET", "PerBucketIsolatedFastest", "Point", "Progress",
    "RegimeOutcome", "SMALLEST", "SearchError", "SmallestFootprint", "TuneSettings", "check_constraints",
    "evaluate", "exhaustive", "footprint_ladder", "open_storage", "seconds_alone", "select_best",
    "study_name", "table_rows", "tune_problem", "tune_regime", "warm_starts",
]
