"""What a tuned config changes against THE baseline's, parameter by parameter.

A config's name spells every parameter (``bm64_bn128_bk32_gm8_nw4_ns4_sk1_p1_fe1``), so
two names side by side hide the one parameter that differs: ``SPLIT_K 1→4`` or
``= baseline`` says it. The dashboard's config matrix and ``tuner tune``'s printed config
table both show runs of buckets this way (kept here, below both, so that neither imports
the other).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: What a cell says where the tuned config is the baseline's.
SAME = "= baseline"
_ABSENT = object()  # a parameter one of the two configs does not have


def _value(value: Any) -> str:
    if value is _ABSENT:
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class Change:
    """One parameter the tuned config sets otherwise than the baseline's."""

    param: str
    baseline: Any
    tuned: Any

    def text(self) -> str:
        """``SPLIT_K 1→4``; flags as on/off, a parameter one side lacks as —."""
        return f"{self.param} {_value(self.baseline)}→{_value(self.tuned)}"


def changes(baseline: Mapping[str, Any], tuned: Mapping[str, Any]) -> tuple[Change, ...]:
    """The parameters whose values differ, in the tuned config's order (then those only
    the baseline has)."""
    keys = [*tuned, *(k for k in baseline if k not in tuned)]
    pairs = ((k, baseline.get(k, _ABSENT), tuned.get(k, _ABSENT)) for k in keys)
    return tuple(Change(k, b, t) for k, b, t in pairs if b is _ABSENT or t is _ABSENT or b != t)


@dataclass(frozen=True)
class Span:
    """Consecutive buckets of one operator sharing one tuned and one baseline config.

    Attributes:
        label: the buckets (``M9..64``); "" for an operator's only bucket.
        config, baseline: the tuned config's name and the baseline's.
        changes: the parameters that differ; None when the baseline's are unknown.
        buckets: how many buckets the span covers.
    """

    label: str
    config: str
    baseline: str
    changes: tuple[Change, ...] | None
    buckets: int

    @property
    def differs(self) -> bool:
        return self.config != self.baseline

    def text(self) -> str:
        """``= baseline``, the changed parameters, or ``baseline → tuned`` by name where
        the parameters are unknown (or equal under two names)."""
        if not self.differs:
            return SAME
        if self.changes:
            return ", ".join(c.text() for c in self.changes)
        return f"{self.baseline} → {self.config}"

    def title(self) -> str:
        """Both configs' full names, for a tooltip."""
        return f"tuned {self.config}; baseline {self.baseline}"
