"""How to tune a regime, and the name of its study: what every layer of the search reads, below all of them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SearchError
from ..problem.model import Problem
from ..problem.scenario import Scenario


@dataclass(frozen=True)
class TuneSettings:
    """How to tune a regime.

    Attributes:
        trials: target number of finished trials in each study (a rerun continues to it).
        seeds: traffic samples per assignment (K); seed ``k`` is ``base_seed + k``.
        base_seed: first workload seed; also seeds the sampler (same seed, same table).
        horizon_s: measurement window of each simulation (None: the regime's own).
        oracle: also evaluate every joint assignment when there are at most ``oracle_limit``.
        p_threshold: the Wilcoxon pruner's p-value (with K seeds it cannot prune
            before ``2**-K < p_threshold``, i.e. K ≥ 4 at the default 0.1).
    """

    trials: int = 30
    seeds: int = 3
    base_seed: int = 0
    horizon_s: float | None = None
    oracle: bool = False
    oracle_limit: int = 512
    p_threshold: float = 0.1

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise SearchError(f"trials must be at least 1 but got {self.trials}")
        if self.seeds < 1:
            raise SearchError(f"seeds must be at least 1 but got {self.seeds}")
        if self.base_seed < 0:
            raise SearchError(f"seed must be >= 0 but got {self.base_seed}")
        if self.horizon_s is not None and not (math.isfinite(self.horizon_s) and self.horizon_s > 0):
            raise SearchError(f"horizon must be a finite number of seconds > 0 but got {self.horizon_s}")
        if self.oracle_limit < 1:
            raise SearchError(f"oracle_limit must be at least 1 but got {self.oracle_limit}")
        if not 0.0 <= self.p_threshold <= 1.0:
            raise SearchError(f"p_threshold must be between 0 and 1 but got {self.p_threshold}")

    @property
    def seed_list(self) -> tuple[int, ...]:
        return tuple(self.base_seed + k for k in range(self.seeds))

    def scenario(self, problem: Problem, regime: str) -> Scenario:
        """What a study of ``regime`` simulates with these settings: its seeds, each for the
        window ``horizon_s`` sets (the regime's own when None), on ``problem``. The one
        place a tune derives them.

        Raises:
            SearchError: ``problem`` has no regime ``regime``.
        """
        return Scenario(problem, regime, self.seed_list, problem.regime(regime).window_s(self.horizon_s))


def study_name(problem: str, regime: str) -> str:
    """The Optuna study of a (problem, regime): ``tuner:{problem}:{regime}``, the name every
    worker, the table's rows and the dashboard find it by."""
    return f"tuner:{problem}:{regime}"
