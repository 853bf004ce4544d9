"""The config table as values: one frozen :class:`TableRow` per (problem, regime, operator,
bucket), and its one codec.

This module imports nothing heavy: the store (SQLAlchemy), the runtime (``sqlite3``) and
the JSON export all turn records into rows with :meth:`TableRow.decode` and rows into
records with :meth:`TableRow.to_dict`, so a field is added in one place.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from functools import lru_cache
from numbers import Integral
from typing import Any

#: Fields stored as JSON (a ``sqlite3`` cursor hands them over as text).
JSON_FIELDS = ("params", "shape", "bucket_bounds", "realized_rates_rps", "family_options", "resources",
               "engine_args")


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
        realized_rates_rps: the arrival rate each seed's judged window realised (the
            same requests for every assignment).
        warmup_s: the start of each window served but not judged.
        overloaded_seeds, baseline_overloaded_seeds: seeds whose backlog grew through the
            window under the tuned assignment and under THE baseline: there goodput
            depends on the window's length, not a steady-state figure.
        objective: what the study maximised, ``goodput`` or ``capacity``; both figures are
            stored whichever it was.
        attainment_target: the share of requests meeting the SLO that defines capacity.
        capacity_rps, capacity_ci_rps: the tuned assignment's capacity at the SLO (mean
            over seeds, 95% half-width) on the regime's traffic shape.
        baseline_capacity_rps, capacity_delta_ci_rps: THE baseline's capacity and the
            half-width of the paired per-seed difference tuned − baseline.
        one_config_capacity_rps: the one-config-per-operator baseline's capacity.
        created_at: when the row was written (UTC).
        family, family_options: the built-in kernel family of the operator and the
            options it was built with (``{"epilogue": "silu", "dtype": "bf16"}``); None
            for a declared profile. What ``tuner.requirements`` needs, with ``params``.
        sms: the SMs the config is told (the device's, or its partition's when kernels
            are sized to it), before its ``SM_MARGIN``; None when not a built-in family.
        workspace_bytes: the workspace the simulator reserves for this cell: the config's
            at the bucket's representative shape (``shape``) when the service can reach
            the bucket, else 0 (schema version 4).
        resources: per launch name, ``shared_bytes`` and ``registers`` per CTA and
            ``ctas_per_sm`` from the compiled kernel at ``shape``; None when unknown.
        guard: why the regime stores THE baseline's configs instead of the study's best
            (:mod:`tuner.search.guard`: not a gain beyond the paired interval, or a loss
            in goodput, capacity or p90 latency); None when the study's configs passed,
            or were the baseline's (schema version 5). The figures above are then the
            baseline's, the stored configs'.
        engine_args: the engine knob values the regime's figures were simulated with
            and the engine is to be started with (``{"max_num_batched_tokens": 2048,
            "cudagraph_capture_sizes": [1, 2, 4]}``; null: the engine's own default),
            the same in every regime of a problem; None for a problem that lists no
            ``service.knobs`` (schema version 6).
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
    realized_rates_rps: list[float] | None
    warmup_s: float
    overloaded_seeds: int
    baseline_overloaded_seeds: int
    objective: str
    attainment_target: float
    capacity_rps: float | None
    capacity_ci_rps: float | None
    baseline_capacity_rps: float | None
    capacity_delta_ci_rps: float | None
    one_config_capacity_rps: float | None
    created_at: datetime
    family: str | None = None
    family_options: dict[str, Any] | None = None
    sms: int | None = None
    workspace_bytes: float | None = None
    resources: dict[str, Any] | None = None
    guard: str | None = None
    engine_args: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready record (``created_at`` in ISO 8601)."""
        out = {name: getattr(self, name) for name in ROW_FIELDS}
        out["created_at"] = self.created_at.isoformat()
        return out

    @classmethod
    def decode(cls, record: Mapping[str, Any] | Sequence[Any]) -> TableRow:
        """A row from a record: a mapping of the fields (a database row, JSON cells as text
        or decoded, or an exported row; other keys are ignored) or a sequence of their
        values in :data:`ROW_FIELDS` order (what a ``SELECT`` of those columns gives). A
        naive ``created_at`` is UTC (SQLite drops the zone).

        Raises:
            KeyError: a missing field (the field's name).
            TypeError, ValueError: a malformed value, the message naming the field.
        """
        # The generated __init__ (one object.__setattr__ per field of a frozen dataclass)
        # is skipped: every field is set here, and a runtime decodes thousands of rows.
        row = object.__new__(cls)
        values = row.__dict__
        if isinstance(record, Mapping):
            if type(record) is dict and record.keys() == _FIELD_SET:
                values.update(record)  # the common case, exactly the fields: a C-level copy
            else:
                values.update({name: record[name] for name in ROW_FIELDS})
        elif isinstance(record, (tuple, list)) and len(record) == len(ROW_FIELDS):
            values.update(zip(ROW_FIELDS, record))
        else:
            raise TypeError(f"a table row is a mapping or {len(ROW_FIELDS)} values, not {type(record).__name__}")
        for name in JSON_FIELDS:
            if isinstance(values[name], str):
                values[name] = json_cell(name, values[name])
        check_params(values["params"])
        created = values["created_at"]
        values["created_at"] = _time(created) if isinstance(created, str) else _utc(created)
        values["bucket"] = bucket_number(values["bucket"])
        return row


ROW_FIELDS = tuple(f.name for f in fields(TableRow))

#: The fields a runtime lookup reads (which config serves which bucket of which operator
#: in which regime, on which device), in the order ``tuner.runtime``'s ``ServedRow``
#: takes them. A project JSON export puts them first, apart from the rest of each row,
#: so that a runtime parses only them at load (:mod:`tuner.store.export`).
SERVED_FIELDS = ("problem", "regime", "op", "bucket", "bucket_bounds", "regime_index", "op_index", "config",
                 "params", "device", "regime_rate_rps")

_FIELD_SET = frozenset(ROW_FIELDS)
_scan = json.JSONDecoder().scan_once


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlevel = 2


def short_repr(value: Any) -> str:
    """``repr(value)`` for a message about a malformed value: capped, and two levels deep
    at most (a table file is not ours: a full repr could be megabytes, and one of a value
    nested thousands deep would recurse past Python's limit)."""
    return _SHORT.repr(value)


@lru_cache(maxsize=256)
def _time(text: str) -> datetime:
    """An ISO 8601 time, naive meaning UTC (every row of a regime has the same one:
    parsed once; datetimes are immutable, so sharing them is safe)."""
    try:
        return _utc(datetime.fromisoformat(text))
    except ValueError:
        raise ValueError(f"field 'created_at' must be an ISO 8601 time, found {short_repr(text)}") from None


def _utc(value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"field 'created_at' must be a time, found {short_repr(value)}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def check_params(params: Any) -> None:
    """Refuse ``params`` that are not an object (the codec's rule, also the runtime's).

    Raises:
        TypeError: naming the field and the value.
    """
    if not isinstance(params, dict):
        raise TypeError(f"field 'params' must be an object, found {short_repr(params)}")


def bucket_number(bucket: Any) -> int:
    """The ``bucket`` field as an int (an integral number of another type converted).

    Raises:
        TypeError: not an integer (a bool is not one), naming the field.
    """
    if type(bucket) is int:
        return bucket
    if isinstance(bucket, bool) or not isinstance(bucket, Integral):
        raise TypeError(f"field 'bucket' must be an integer, found {short_repr(bucket)}")
    return int(bucket)


def json_cell(name: str, text: str) -> Any:
    """``json.loads`` for the JSON cell ``name``, calling the C scanner directly when the
    text is one value without surrounding whitespace (what the store writes).

    Raises:
        ValueError: not JSON text, or nested past the parser's limit, naming the field.
    """
    try:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            return json.loads(text)  # raises the usual JSONDecodeError
        return value if end == len(text) else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"field {name!r} must be JSON text, found {short_repr(text)} ({exc.msg})") from None
    except RecursionError:
        raise ValueError(f"field {name!r} nests deeper than Python's JSON parser reads") from None


def bucket_label(bounds: Mapping[str, Any] | None) -> str:
    """A bucket's name from its bounds ``{dim: [low, high]}``: short, typeable, without
    ``=`` or ``,``: ``M..16`` (open low end), ``M17..64``, ``M2`` (one value),
    ``B..1/L17..32`` (several dimensions); empty for an operator's only bucket."""
    parts = []
    for dim, (low, high) in (bounds or {}).items():
        first = None if low is None else math.floor(low) + 1
        if first == high:
            parts.append(f"{dim}{number(high)}")
        else:
            parts.append(f"{dim}{'' if first is None else number(first)}..{number(high)}")
    return "/".join(parts)


def span_label(bounds: Sequence[Mapping[str, Any] | None]) -> str:
    """The label of consecutive buckets: one range when they vary along one key dimension
    only (``M..16`` + … + ``M33..64`` → ``M..64``), else ``first–last``."""
    if not bounds or bounds[0] is None:
        return ""
    first, last = bounds[0], bounds[-1]
    if len(bounds) == 1 or last is None:
        return bucket_label(first)
    varying = [dim for dim in first if len({tuple(b[dim]) for b in bounds if b is not None}) > 1]
    if len(varying) == 1:
        dim = varying[0]
        return bucket_label({d: ([first[d][0], last[d][1]] if d == dim else first[d]) for d in first})
    return f"{bucket_label(first)}–{bucket_label(last)}"


def number(value: float) -> float | int:
    """A bound as an int when it is integral, for labels (``M17..32``, not ``M17.0..32.0``)."""
    return int(value) if float(value).is_integer() else float(value)
