"""The first page's config matrix: per regime and operator, only what the tuned configs
change against THE baseline (the per-bucket isolated-fastest config of each bucket).

A config's name spells every parameter (``bm64_bn128_bk32_gm8_nw4_ns4_sk1_p1_fe1``), so a
table of names hides the one parameter that differs; a cell shows ``SPLIT_K 1→4`` or
``= baseline`` instead, and an operator with shape buckets lists its runs of buckets.
Parameters come from the rows (each stores its tuned config's); a baseline config that no
row runs is looked up through ``resolve`` (the problem file), and where neither knows it
the cell names the two configs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..problem.changes import SAME, Span, changes
from ..store.row import TableRow
from .cells import operator_runs

__all__ = ["Cell", "Matrix", "Resolve", "config_matrix", "no_file"]

#: ``(problem, operator, config name)`` → that config's parameters, or None when unknown.
Resolve = Callable[[str, str, str], "Mapping[str, Any] | None"]


def no_file(problem: str, op: str, name: str) -> None:
    """A :data:`Resolve` that knows nothing beyond the rows."""
    return None


@dataclass(frozen=True)
class Cell:
    """One operator of one regime: its spans of buckets in bucket order."""

    op: str
    spans: tuple[Span, ...]

    @property
    def buckets(self) -> int:
        return sum(s.buckets for s in self.spans)

    @property
    def differing(self) -> int:
        """How many of its buckets run another config than the baseline's."""
        return sum(s.buckets for s in self.spans if s.differs)

    def summary(self) -> str:
        """The cell in one short line: ``= baseline``; the change where one span differs
        (``M9..64: BLOCK_N 64→128``); else how many buckets differ and in which
        parameters (``5 of 14 buckets: BLOCK_N, num_stages``)."""
        differing = [s for s in self.spans if s.differs]
        if not differing:
            return SAME
        if len(differing) == 1:
            span = differing[0]
            return f"{span.label}: {span.text()}" if span.label and span.buckets < self.buckets else span.text()
        params = dict.fromkeys(c.param for s in differing for c in s.changes or ())
        which = f": {', '.join(params)}" if params and all(s.changes for s in differing) else " differ"
        return f"{self.differing} of {self.buckets} buckets{which}"


@dataclass(frozen=True)
class Matrix:
    """One problem's configs, regime × operator.

    Attributes:
        operators: ``(operator, buckets)`` in the problem's order.
        regimes: ``(regime, {operator: cell})`` in the problem's order; an operator a
            regime's rows lack has no cell.
    """

    operators: tuple[tuple[str, int], ...]
    regimes: tuple[tuple[str, dict[str, Cell]], ...]


def config_matrix(rows: Sequence[TableRow], resolve: Resolve = no_file) -> Matrix:
    """The matrix of one problem's rows."""
    known = {(r.op, r.config): r.params for r in rows}
    looked_up: dict[tuple[str, str], Mapping[str, Any] | None] = {}

    def params(op: str, name: str) -> Mapping[str, Any] | None:
        if (op, name) in known:
            return known[op, name]
        if (op, name) not in looked_up:
            looked_up[op, name] = resolve(rows[0].problem, op, name)
        return looked_up[op, name]

    by_regime: dict[str, list[TableRow]] = {}
    for row in sorted(rows, key=lambda r: r.regime_index):
        by_regime.setdefault(row.regime, []).append(row)
    regimes = []
    for regime, regime_rows in by_regime.items():
        cells = {}
        for op, runs in operator_runs(regime_rows, "pair"):
            spans = []
            for run in runs:
                base = params(op, run.baseline[0])
                spans.append(Span(run.label, run.config, run.baseline[0],
                                  None if base is None else changes(base, run.params), run.buckets))
            cells[op] = Cell(op, tuple(spans))
        regimes.append((regime, cells))
    order = sorted({(r.op_index, r.op) for r in rows})
    sizes = {op: max(cells[op].buckets for _, cells in regimes if op in cells) for _, op in order}
    return Matrix(tuple((op, sizes[op]) for _, op in order), tuple(regimes))
