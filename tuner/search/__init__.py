"""Search: one Optuna study per (problem, regime) for the joint assignment with the most goodput.

What a library caller uses is exported here; the layers below (the trial loop, the
objective, the ranking rule, the leases of a fleet) are modules of their own. Optuna is
imported here, never by :mod:`tuner.sim` or the runtime.
"""

from ..errors import SearchError
from .baselines import BASELINES, ONE_CONFIG, PER_BUCKET, SMALLEST, Baseline
from .evaluate import Evaluation, evaluate
from .outcome import OracleResult, RegimeOutcome, tune_regime
from .ranking import Choice
from .run import table_rows
from .settings import TuneSettings, study_name
from .space import JointSpace
from .tuning import tune_problem

__all__ = [
    "BASELINES", "Baseline", "Choice", "Evaluation", "JointSpace", "ONE_CONFIG", "OracleResult", "PER_BUCKET",
    "RegimeOutcome", "SMALLEST", "SearchError", "TuneSettings", "evaluate", "study_name", "table_rows",
    "tune_problem", "tune_regime",
]
