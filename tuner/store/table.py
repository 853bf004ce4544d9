"""The config table as values: one frozen :class:`TableRow` per (problem, regime, operator,
bucket), and its one codec.

This module imports nothing heavy: the store (SQLAlchemy), the runtime (``sqlite3``) and
the JSON export all turn records into rows with :meth:`TableRow.decode` and rows into
records with :meth:`TableRow.to_dict`, so a field is added in one place.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

#: Fields stored as JSON (a ``sqlite3`` cursor hands them over as text).
JSON_FIELDS = ("params", "shape", "bucket_bounds")


@dataclass(frozen=True)
class TableRow:
    """A tuned config for one bucket of one operator in one regime, with provenance (DESIGN §6).

    Attributes:
        problem, regime, op, bucket: the key; ``bucket`` indexes the operator's buckets.
        bucket_bounds: ``{dim: [low, high]}`` of the bucket (low exclusive, None when
            open; the last bucket also serves values above ``high``); None for an
            operator with one bucket.
        regime_index, op_index: positions in the problem file (for display order).
        config, params: the chosen config's name and parameters.
        shape: the operator's shape at the bucket's representative shape.
        device, source: the problem's device; the profile source (declared, modeled, measured).
        triton_version, kernel_source_hash: None when unknown (declared profiles have no kernel).
        problem_hash: sha256 of the problem file.
        study_name, trial_number: the Optuna study and trial the config comes from.
        seeds, horizon_s: how many traffic samples, and the window of each.
        goodput_rps, goodput_ci_rps: the regime's tuned joint assignment: mean goodput over
            the seeds and the half-width of its 95% t-interval (None with one seed).
        baseline_config: this cell's config in THE baseline, the per-bucket isolated-fastest
            assignment.
        baseline_goodput_rps: that baseline's mean goodput, same seeds.
        delta_ci_rps: half-width of the 95% t-interval of the paired per-seed difference
            tuned − baseline (None with one seed).
        one_config_goodput_rps: the one-config-per-operator baseline (labelled as such).
        oracle_goodput_rps: the exhaustive search's best, when it ran.
        regime_rate_rps: the regime's mean arrival rate (its rate bucket's midpoint, else
            the rate its seeded workloads realised): what the runtime classifies load by.
        created_at: when the row was written (UTC).
    """

    problem: str
    regime: str
    op: str
    bucket: int
    bucket_bounds: dict[str, Any] | None
    regime_index: int
    op_index: int
    config: str
    params: dict[str, Any]
    shape: dict[str, Any] | None
    device: str
    source: str
    triton_version: str | None
    kernel_source_hash: str | None
    problem_hash: str
    study_name: str
    trial_number: int
    seeds: int
    horizon_s: float
    goodput_rps: float
    goodput_ci_rps: float | None
    baseline_config: str
    baseline_goodput_rps: float
    delta_ci_rps: float | None
    one_config_goodput_rps: float | None
    oracle_goodput_rps: float | None
    regime_rate_rps: float | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready record (``created_at`` in ISO 8601)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["created_at"] = self.created_at.isoformat()
        return out

    @classmethod
    def decode(cls, record: Mapping[str, Any]) -> TableRow:
        """A row from a record: a database row (JSON cells as text or decoded) or an
        exported one. A naive ``created_at`` is UTC (SQLite drops the zone).

        Raises:
            KeyError, TypeError, ValueError: a missing field or a malformed value.
        """
        values = {f.name: record[f.name] for f in fields(cls)}
        for name in JSON_FIELDS:
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        if not isinstance(values["params"], dict):
            raise TypeError(f"params {values['params']!r} is not an object")
        created = values["created_at"]
        if isinstance(created, str):
            created = datetime.fromisoformat(created)
        if created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        values["created_at"] = created
        values["bucket"] = int(values["bucket"])
        return cls(**values)


ROW_FIELDS = tuple(f.name for f in fields(TableRow))


def bucket_label(bounds: Mapping[str, Any] | None) -> str:
    """A bucket's name from its bounds ``{dim: [low, high]}``: short, typeable, without
    ``=`` or ``,``: ``M..16`` (open low end), ``M17..64``, ``M2`` (one value),
    ``B..1/L17..32`` (several dimensions); empty for an operator's only bucket."""
    parts = []
    for dim, (low, high) in (bounds or {}).items():
        first = None if low is None else math.floor(low) + 1
        if first == high:
            parts.append(f"{dim}{_number(high)}")
        else:
            parts.append(f"{dim}{'' if first is None else _number(first)}..{_number(high)}")
    return "/".join(parts)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(value)
