"""BASE and CAND: a config table (one assignment per regime) or ``op=config`` specs.

A value is a table when it is a ``sqlite:`` URL, an existing file, or has no ``=`` in it
(then a missing file is reported as such). Otherwise it is one or more ``OP=CONFIG`` or
``OP@BUCKET=CONFIG`` specs separated by spaces or ``;`` (``OP=K=V,K=V`` picks a config by
parameters, as ``tuner simulate --assign`` does; ``BUCKET`` is a bucket's label such as
``M17..32`` or its index); operators and buckets not named keep the family default. The
word ``default`` alone is the default assignment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import StorageError
from ..problem import resolve_assignment
from ..problem.assignment import Assignment
from ..problem.model import Problem


def check_regimes(problem: Problem, regimes: Iterable[str]) -> tuple[str, ...]:
    """The named regimes (default: all of the problem's), checked, deduplicated, sorted."""
    chosen = sorted(set(regimes)) or sorted(problem.regimes)
    for name in chosen:
        problem.regime(name)
    return tuple(chosen)


def _is_table(text: str) -> bool:
    if text.startswith("sqlite:"):
        return True
    if text.strip() == "default":
        return False
    return "=" not in text or _is_file(text)


def _is_file(text: str) -> bool:
    """Whether ``text`` names a file: a long ``OP=CONFIG,…`` list is no file name, and
    asking the OS about it raises (``File name too long``)."""
    try:
        return Path(text).is_file()
    except OSError:
        return False


def assignments_per_regime(problem: Problem, text: str, regimes: Iterable[str],
                           what: str = "assignment", warn: Callable[[str], None] | None = None
                           ) -> dict[str, Assignment]:
    """``regime -> Assignment`` for ``text`` (see the module doc): a table's own rows for
    each regime (one config per operator and bucket), or the same specs in every regime.
    ``warn`` is told when the table was tuned from another version of the problem file
    (:meth:`Assignment.drift`), and for each regime whose rows are THE baseline's configs
    kept by the guard (:mod:`tuner.search.guard`), why.

    Raises:
        StorageError: an unreadable table, one without rows for a regime, or rows that do
            not match the problem's operators, buckets or configs.
        AssignmentError: an unknown operator, bucket or config in the specs.
    """
    regimes = tuple(regimes)
    if _is_table(text):
        from ..runtime.served import read_table

        table = read_table(text, problem=problem.name)
        out: dict[str, Assignment] = {}
        for regime in regimes:
            rows = table.regime_rows(regime)
            if not rows:
                raise StorageError(f"{table.source}: {what}: the table has no row for regime {regime!r} "
                                   f"(regimes: {', '.join(table.regimes)})")
            out[regime] = Assignment.from_rows(problem, rows, where=f"{table.source}: {what}: regime {regime}")
        drift = Assignment.drift(problem, [row for regime in regimes for row in table.regime_rows(regime)],
                                 f"{table.source}: {what}")
        if warn is not None:
            if drift is not None:
                warn(drift)
            for regime in regimes:  # the table holds the baseline's configs there, and says why
                guarded = table.regime_rows(regime)[0].guard
                if guarded:
                    warn(f"{table.source}: {what}: regime {regime}: {guarded}")
        return out
    specs = [] if text.strip() == "default" else [s for s in re.split(r"[;\s]+", text) if s]
    assignment = resolve_assignment(problem, specs)
    return {regime: assignment for regime in regimes}
