"""A :class:`Scenario`: what an evaluation simulates — a problem's regime, over a set of
seeds, for a horizon — as one value built where a command starts.

Before this value the four travelled apart through every signature of the search
(``problem, regime, seeds, horizon``) and each call site re-derived the regime's facts;
now they travel together and the facts are its properties, computed by the regime's own
rules (:meth:`~tuner.problem.model.Regime.window_s`, ``warmup_for``, ``nominal_rate``).
One simulation is one seed of a scenario (:func:`tuner.search.parallel.run_seed`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from .model import Problem, Regime


@dataclass(frozen=True, eq=False)
class Scenario:
    """A regime of a problem, simulated on ``seeds`` for ``horizon_s`` seconds each.

    Attributes:
        problem: the problem (a knob variant of a file's problem included).
        regime: the regime's name; checked when the scenario is made.
        seeds: the workload seeds, in the order their values are reported.
        horizon_s: seconds of traffic per simulation; None: the regime's own.

    Raises:
        SearchError: ``problem`` has no regime ``regime`` (one line naming those it has).
    """

    problem: Problem
    regime: str
    seeds: tuple[int, ...]
    horizon_s: float | None = None

    def __post_init__(self) -> None:
        self.problem.regime(self.regime)
        object.__setattr__(self, "seeds", tuple(int(seed) for seed in self.seeds))

    @classmethod
    def of(cls, problem: Problem, regime: str, seeds: Iterable[int], horizon_s: float | None = None) -> Scenario:
        return cls(problem, regime, tuple(seeds), horizon_s)

    @property
    def spec(self) -> Regime:
        """The regime itself."""
        return self.problem.regime(self.regime)

    @property
    def window_s(self) -> float:
        """Seconds of traffic each simulation runs: ``horizon_s``, else the regime's."""
        return self.spec.window_s(self.horizon_s)

    @property
    def warmup_s(self) -> float:
        """The start of each window whose requests are served but not judged."""
        return self.spec.warmup_for(self.window_s)

    @property
    def rate_rps(self) -> float:
        """The regime's nominal arrival rate (req/s)."""
        return float(self.spec.arrivals.nominal_rate)

    def on(self, problem: Problem) -> Scenario:
        """The same regime, seeds and horizon on ``problem`` (a knob variant of this one)."""
        return replace(self, problem=problem)
