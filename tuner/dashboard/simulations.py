"""The dashboard's simulations: :class:`tuner.search.parallel.Simulation` values run for
their metrics, in this process or the board's worker pool, on the viewed database's
compiled resources (read, never written)."""

from __future__ import annotations

from ..errors import IllegalConfigError, TunerError
from ..search.parallel import Simulation
from ..sim.metrics import Metrics


def metrics_of(simulation: Simulation) -> Metrics:
    """The metrics of a goodput simulation.

    Raises:
        TunerError: the problem file changed since the page was made.
        IllegalConfigError: a config of the assignment cannot run a shape it meets.
    """
    result = simulation.run()
    if result is None:
        raise TunerError(f"{simulation.problem_path}: changed while being simulated; open the page again")
    if result.illegal is not None:
        raise IllegalConfigError(result.illegal)
    assert result.metrics is not None  # a goodput simulation always ends with metrics
    return result.metrics


def serially(simulations: list[Simulation]) -> list[Metrics]:
    """The metrics of each simulation, one after another in this process."""
    return [metrics_of(s) for s in simulations]
