"""What a trial records of its run, as one typed value with one codec.

Optuna keeps a trial's extra facts as JSON user attributes, one key each. The objective
writes them, the ranking rule, the incumbent, the equivalence test, leases and the run's
summary read them back; before this value each side spelled the keys and their defaults
on its own. :meth:`TrialRecord.write` and :meth:`TrialRecord.of` are the only places the
keys are spelled. A field that is None was not recorded (the key is absent), as studies
written before a key existed read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from optuna.trial import FrozenTrial

from .evaluate import Constraints, Evaluation

#: What a trial records about its own run, not about its result: not copied from another trial.
BOOKKEEPING = ("worker", "simulations", "duplicate_of", "equivalent_to")


@dataclass(frozen=True)
class TrialRecord:
    """A trial's user attributes.

    Attributes:
        constraint: ``(memory, legality)``, Optuna's constraints mirrored for readers of
            the attributes alone (the dashboard).
        simulations: simulations this trial ran (0 when it reused a result).
        reserved_bytes: the workspace its assignment reserves (feasible trials).
        infeasible: why it cannot run, one line.
        latency_p50_s: the mean over seeds of the median latency.
        rates, overloaded: the realised arrival rates of the goodput seeds, and how many
            seeds' backlogs grew through the window.
        latency_p90_s: each goodput seed's 90th-percentile latency; None in the list
            where none completed (JSON has no infinity).
        lower_bounds, limit: capacity seeds that only bound the capacity from below, and why.
        visited: the indices of the cells some launch used (``JointSpace.cells``).
        worker: the process that ran it (leases).
        duplicate_of, equivalent_to: the trial whose result it repeats (same point, or
            a point whose run is the same).
    """

    constraint: tuple[float, float] | None = None
    simulations: int | None = None
    reserved_bytes: float | None = None
    infeasible: str | None = None
    latency_p50_s: float | None = None
    rates: tuple[float, ...] | None = None
    overloaded: int | None = None
    latency_p90_s: tuple[float | None, ...] | None = None
    lower_bounds: int | None = None
    limit: str | None = None
    visited: tuple[int, ...] | None = None
    worker: str | None = None
    duplicate_of: int | None = None
    equivalent_to: int | None = None

    @classmethod
    def run(cls, constraints: Constraints, simulations: int, evaluation: Evaluation | None = None,
            cell_index: Mapping[Any, int] | None = None) -> TrialRecord:
        """What a trial that ran (or was pruned) records: its constraints, its simulations,
        and what its evaluation found out (``cell_index``: cell → its index, for ``visited``)."""
        record = cls(constraint=(constraints.memory, constraints.legality), simulations=simulations,
                     reserved_bytes=constraints.reserved_bytes, infeasible=constraints.reason)
        if evaluation is None:
            return record
        return replace(
            record, latency_p50_s=evaluation.latency_p50_s,
            rates=tuple(evaluation.rates) if evaluation.rates else None,
            overloaded=evaluation.overloaded if evaluation.rates else None,
            latency_p90_s=(tuple(v if math.isfinite(v) else None for v in evaluation.latency_p90_s)
                           if evaluation.latency_p90_s else None),
            lower_bounds=evaluation.lower_bounds if evaluation.lower_bound else None,
            limit=evaluation.limit if evaluation.lower_bound else None,
            visited=(tuple(sorted(cell_index[cell] for cell in evaluation.visited))
                     if evaluation.visited and cell_index is not None else None),
        )

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        """The record ``trial`` holds (keys it lacks read as None)."""
        attrs = trial.user_attrs
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = attrs.get(f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)

    def attributes(self) -> dict[str, Any]:
        """The JSON user attributes: every recorded field."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def write(self, trial: Any) -> None:
        """Set every recorded field on ``trial`` (an ``optuna.Trial``)."""
        for key, value in self.attributes().items():
            trial.set_user_attr(key, value)

    def evaluation(self, values: tuple[float, ...], constraints: Constraints, metric: str) -> Evaluation:
        """The evaluation a finished trial with this record and these per-seed values measured."""
        return Evaluation(values if constraints.feasible else (), constraints, self.latency_p50_s,
                          metric=metric, rates=self.rates or (), overloaded=self.overloaded or 0,
                          lower_bounds=self.lower_bounds or 0, limit=self.limit,
                          latency_p90_s=tuple(math.inf if v is None else float(v) for v in self.latency_p90_s or ()))
