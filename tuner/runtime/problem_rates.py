"""Each regime's mean arrival rate, read from a problem file without loading the problem.

``tuner.problem`` validates a whole problem (pydantic, NumPy, traces): too heavy for a
serving process. The classifier only needs ``regimes.NAME.arrivals.rate``: a number, or
a bucket ``[low, high]`` whose midpoint is taken. A regime without a rate (a trace
replayed at its own rate) is left out; PyYAML is imported only when this is called.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ProblemError

__all__ = ["regime_rates_from_problem"]


def regime_rates_from_problem(path: str | Path) -> dict[str, float]:
    """``regime -> mean arrival rate (req/s)`` for the regimes of the problem file at ``path``.

    Raises:
        ProblemError: the file cannot be read, is not YAML, or a rate is not a rate.
    """
    import yaml

    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProblemError(f"{path}: cannot read the problem file ({exc})") from None
    regimes = document.get("regimes") if isinstance(document, dict) else None
    if not isinstance(regimes, dict):
        raise ProblemError(f"{path}: no 'regimes' mapping")
    rates: dict[str, float] = {}
    for name, spec in regimes.items():
        rate = ((spec or {}).get("arrivals") or {}).get("rate") if isinstance(spec, dict) else None
        if rate is None:
            continue
        if isinstance(rate, (list, tuple)) and len(rate) == 2:
            value = (float(rate[0]) + float(rate[1])) / 2.0
        elif isinstance(rate, (int, float)) and not isinstance(rate, bool):
            value = float(rate)
        else:
            raise ProblemError(f"{path}: regimes.{name}.arrivals.rate is {rate!r}; expected a number or [low, high]")
        if not (value > 0 and math.isfinite(value)):
            raise ProblemError(f"{path}: regimes.{name}.arrivals.rate is {rate!r}; expected a rate > 0")
        rates[str(name)] = value
    return rates
