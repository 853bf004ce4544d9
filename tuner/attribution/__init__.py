"""Which kernel change moved the service: substitution attribution and a regression gate.

* :mod:`tuner.stats` — paired differences over seeds with a Student-t interval.
* :mod:`.assignments` — BASE/CAND (:class:`~tuner.problem.assignment.Assignment` per
  regime) given as a config table or as ``op=config`` / ``op@BUCKET=config`` specs.
* :mod:`.attribute` — run base and candidate on common random numbers, substitute each
  differing operator (or, by bucket, each differing (operator, bucket) cell) alone in
  both directions, report effects, a per-operator summary and the interaction.
* :mod:`.gate` — a non-inferiority decision per regime, blaming an operator and bucket.
* :mod:`.render` — waterfall (rich), JSON documents and the Markdown PR report.

Everything is computed per regime, with operators (then buckets) and regimes sorted
internally, so results do not depend on the order they were given in.
"""

from __future__ import annotations

from .assignments import assignments_per_regime, check_regimes
from .attribute import Attribution, Comparison, Effect, attribute, compare
from .gate import GateResult, RegimeVerdict, decide, gate
from ..stats import Delta, paired

__all__ = [
    "Attribution", "Comparison", "Delta", "Effect", "GateResult", "RegimeVerdict", "assignments_per_regime",
    "attribute", "check_regimes", "compare", "decide", "gate", "paired",
]
