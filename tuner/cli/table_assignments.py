"""The assignments a stored table holds for a problem, per regime: what ``tuner simulate
--policy table|static:REGIME`` and ``tuner replay --table`` run."""

from __future__ import annotations

from typing import Any

from ..errors import TunerError
from ..problem.assignment import Assignment
from ..problem.model import Problem
from .group import table_storage, warn


def table_assignments(problem: Problem, storage: str, option: str) -> tuple[Any, dict[str, Assignment]]:
    """The table in ``storage`` (see :func:`table_storage`) for ``problem`` and its
    assignment per regime; a drift between the table and the problem file is warned of.
    ``option`` names the command's option in the one-line error an unreadable table gives."""
    from ..runtime.served import read_table

    try:
        storage = table_storage(storage)
        table = read_table(storage, problem=problem.name)
    except Exception as exc:  # noqa: BLE001 - any unreadable table is one line for the user
        raise TunerError(f"{option}: cannot read the table in {storage}: {exc}") from None
    rows = {regime: table.regime_rows(regime) for regime in table.regimes}
    assignments = {regime: Assignment.from_rows(problem, found, table.source) for regime, found in rows.items()}
    drift = Assignment.drift(problem, [row for found in rows.values() for row in found], table.source)
    if drift is not None:
        warn([drift])
    return table, assignments
