"""The config table as values: one frozen :class:`TableRow` per (problem, regime, operator).

This module imports nothing heavy: an exported table is these rows as JSON, and the
runtime can read that without SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class TableRow:
    """A tuned config and its provenance (DESIGN §6).

    Attributes:
        problem, regime, op: the key (problem name, regime name, operator name).
        regime_index, op_index: positions in the problem file (for display order).
        config, params: the chosen config's name and parameters.
        shape: the operator's shape at the representative (largest) batch.
        device, source: the problem's device; the profile source (declared, modeled, measured).
        triton_version, kernel_source_hash: None when unknown (declared profiles have no kernel).
        problem_hash: sha256 of the problem file.
        study_name, trial_number: the Optuna study and trial the config comes from.
        seeds, horizon_s: how many traffic samples, and the window of each.
        goodput_rps, goodput_ci_rps: the regime's tuned joint assignment: mean goodput over
            the seeds and the half-width of its 95% t-interval (None with one seed).
        baseline_goodput_rps: the isolated-fastest assignment, same seeds.
        oracle_goodput_rps: the exhaustive search's best, when it ran.
        created_at: when the row was written (UTC).
    """

    problem: str
    regime: str
    op: str
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
    baseline_goodput_rps: float
    oracle_goodput_rps: float | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``config`` becomes ``{"name", "params"}``, ``created_at`` ISO 8601."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "config":
                out["config"] = {"name": value, "params": dict(self.params)}
            elif f.name == "params":
                continue
            elif isinstance(value, datetime):
                out[f.name] = value.isoformat()
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableRow:
        """Inverse of :meth:`to_dict` (for exported JSON)."""
        values = dict(data)
        config = values.pop("config")
        values["config"] = config["name"]
        values["params"] = dict(config["params"])
        values["created_at"] = datetime.fromisoformat(values["created_at"])
        return cls(**{f.name: values[f.name] for f in fields(cls)})


ROW_FIELDS = tuple(f.name for f in fields(TableRow))
