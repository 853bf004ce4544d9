"""Which kernel change moved the service: substitution attribution and a regression gate.

* :mod:`.stats` — paired differences over seeds with a Student-t interval.
* :mod:`.assignments` — BASE/CAND given as a config table or as ``op=config`` specs.
* :mod:`.attribute` — run base and candidate on common random numbers, substitute each
  differing operator alone in both directions, report effects and the interaction.
* :mod:`.gate` — a non-inferiority decision per regime.
* :mod:`.render` — waterfall (rich), JSON documents and the Markdown PR report.

Everything is computed per regime, with operators and regimes sorted internally, so
results do not depend on the order they were given in.
"""

from __future__ import annotations

from .assignments import assignments_per_regime, check_regimes
from .attribute import Attribution, Comparison, Effect, attribute, compare
from .gate import GateResult, RegimeVerdict, decide, gate
from .stats import Delta, paired

__all__ = [
    "Attribution", "Comparison", "Delta", "Effect", "GateResult", "RegimeVerdict", "assignments_per_regime",
    "attribute", "check_regimes", "compare", "decide", "gate", "paired",
]
