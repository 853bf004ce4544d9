"""The rows a runtime serves, checked once at load: decoded, typed, unique, one rate per regime.

A table file is data the service did not write, and SQLite's columns and JSON's values
take any type: a row whose ``regime`` is ``7`` or ``null``, whose ``params`` hold an
object, or that repeats another's (regime, op, bucket) must be refused here, with the
file, the row and the field named, not found later as a Python error in a sort or a set
(``'<' not supported``, ``unhashable type``) or served as if it were valid.

Two reads, for two uses. At load, :func:`served_rows` reads only what lookups need
(:data:`~tuner.store.row.SERVED_FIELDS`, as :class:`ServedRow`), checked: a 10,000-row
table loads in tens of milliseconds, and a malformed served field refuses the table. The full rows
(provenance, and what ``Dispatcher.requirements`` reads) are decoded by the store's
codec when first asked for (:func:`decode_rows`): a malformed one is then an error of
that read (``requirements`` warns and answers None), not of the lookups, which never
read it.

Rows are named by their position in the file, counted from 0 (the JSON export's ``rows``
list, the SQLite table's rows in storage order), and by their regime and operator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, NamedTuple

from ..errors import StorageError
from ..store.row import (JSON_FIELDS, ROW_FIELDS, SERVED_FIELDS, TableRow, bucket_number, check_params, json_cell,
                         short_repr)

__all__ = ["ServedRow", "brief", "check_regimes", "decode_rows", "describe", "disagree", "label",
           "served_rows"]


class ServedRow(NamedTuple):
    """What a lookup needs of one table row (:data:`~tuner.store.row.SERVED_FIELDS`, in
    that order: a SQLite ``SELECT`` of those columns gives a row's values in it), checked
    (:func:`served_rows`); ``at`` is the row's position in the file, for messages."""

    problem: str
    regime: str
    op: str
    bucket: int
    bucket_bounds: dict[str, Any] | None
    regime_index: int
    op_index: int
    config: str
    params: dict[str, Any]
    device: str
    regime_rate_rps: float | None
    at: int


#: Fields the runtime reads as text (keys, messages, the device check).
_TEXT = ("problem", "regime", "op", "config", "device")
#: Fields the runtime reads as integers (bucket order, the problem file's order).
_INTEGER = ("bucket", "regime_index", "op_index")
#: What a config parameter may be: a Triton meta-parameter or launch option is one of these.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_REGIME, _OP = ROW_FIELDS.index("regime"), ROW_FIELDS.index("op")
_SERVED_REGIME, _SERVED_OP = SERVED_FIELDS.index("regime"), SERVED_FIELDS.index("op")
#: Where a SELECT's row holds the JSON cells (text in SQLite).
_JSON_AT = tuple(ROW_FIELDS.index(name) for name in JSON_FIELDS)
_CONTAINERS = (dict, list)
_NEW = tuple.__new__


def describe(value: Any) -> str:
    """``value`` for a message, its kind in words and its text capped (never recursing):
    ``the string '1'``, ``the number 7``, ``null``, ``an object {'a': [...]}``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        kind = "the boolean"
    elif isinstance(value, (int, float)):
        kind = "the number"
    elif isinstance(value, str):
        kind = "the string"
    elif isinstance(value, (list, tuple)):
        kind = "a list"
    elif isinstance(value, Mapping):
        kind = "an object"
    else:
        kind = f"a {type(value).__name__}"
    return f"{kind} {short_repr(value)}"


def label(index: int, record: Any) -> str:
    """``row 3 (light/qkv)``: a row by its position and, as far as it has them, its regime and op."""
    if isinstance(record, (TableRow, ServedRow)):
        regime, op = record.regime, record.op
    elif isinstance(record, Mapping):
        regime, op = record.get("regime"), record.get("op")
    elif isinstance(record, (tuple, list)) and len(record) in (len(ROW_FIELDS), len(SERVED_FIELDS)):  # a SELECT's
        regime, op = ((record[_REGIME], record[_OP]) if len(record) == len(ROW_FIELDS)
                      else (record[_SERVED_REGIME], record[_SERVED_OP]))
    else:
        return f"row {index}"
    return f"row {index} ({brief(regime)}/{brief(op)})"


def brief(name: Any) -> str:
    """A regime's or operator's name for a message: as it is when a short string, else
    capped (a table file may hold a megabyte where a name goes)."""
    return name if type(name) is str and 0 < len(name) <= 40 else short_repr(name)


def served_rows(records: Sequence[Any], source: str) -> list[ServedRow]:
    """Every record's :data:`SERVED_FIELDS` as a checked :class:`ServedRow`.

    ``records``: a SQLite ``SELECT`` of :data:`~tuner.store.row.SERVED_FIELDS` (tuples, JSON cells as
    text: each distinct text parsed and checked once per load, its value shared by the
    rows that repeat it, since nothing mutates a served value) or a JSON export's row
    objects (each row's own values; a JSON cell given as text is parsed as the codec
    parses it).

    Raises:
        StorageError: the first malformed record, naming the file, the row and the field.
    """
    width = len(SERVED_FIELDS)
    cells: dict[str, tuple[Any, str | None]] = {}  # JSON text -> (its value, what is wrong with it)
    out = []
    for at, record in enumerate(records):
        if type(record) is tuple and len(record) == width:
            (problem, regime, op, bucket, bounds, regime_index, op_index, config, params, device,
             rate) = record
            wrong = None
            if type(bounds) is str:
                bounds, wrong = cells.get(bounds) or _cell(cells, "bucket_bounds", bounds)
            elif bounds is not None:
                wrong = _cell_problem("bucket_bounds", bounds)
            if wrong is None:
                if type(params) is str:
                    params, wrong = cells.get(params) or _cell(cells, "params", params)
                else:
                    wrong = _cell_problem("params", params)
            if wrong is not None:
                raise StorageError(f"{source}: {label(at, record)}: {wrong}")
            row = _NEW(ServedRow, (problem, regime, op, bucket, bounds, regime_index, op_index, config, params,
                                   device, rate, at))
        else:
            row = _from_record(record, at, source, cells)
            (problem, regime, op, bucket, _, regime_index, op_index, config, _, device, rate, _) = row
        # the common case in one expression; the checks that name a cause only on failure
        if not (type(problem) is str and type(regime) is str and type(op) is str and type(config) is str
                and type(device) is str and problem and regime and op and config and device
                and type(bucket) is int and type(regime_index) is int and type(op_index) is int
                and (rate is None or type(rate) in (int, float) and 0 < rate < math.inf)):
            raise StorageError(f"{source}: {label(at, row)}: {_served_problem(row)}")
        out.append(row)
    return out


def _from_record(record: Any, at: int, source: str, cells: dict[str, tuple[Any, str | None]]) -> ServedRow:
    """A JSON export's row object as a :class:`ServedRow`, its JSON cells checked (their
    values are the record's: :func:`decode_rows` copies them for the full row, so that
    it shares nothing with what is served; a cell given as text is parsed by
    :func:`_cell`, remembered in ``cells``).

    Raises:
        StorageError: a record that is not an object, a missing field, a malformed cell.
    """
    def refuse(why: object) -> StorageError:
        return StorageError(f"{source}: {label(at, record)}: {why}")

    if not isinstance(record, Mapping):
        raise refuse(f"a table row is a mapping or {len(ROW_FIELDS)} values, not {type(record).__name__}")
    try:
        values = [record[name] for name in SERVED_FIELDS]
    except KeyError as exc:
        raise refuse(f"field {exc.args[0]!r} is missing") from None
    for name, i in (("bucket_bounds", 4), ("params", 8)):
        value = values[i]
        if type(value) is str:
            value, wrong = cells.get(value) or _cell(cells, name, value)
        else:
            wrong = _cell_problem(name, value)
        if wrong is not None:
            raise refuse(wrong)
        values[i] = value
    return _NEW(ServedRow, (*values, at))


def _cell(cells: dict[str, tuple[Any, str | None]], name: str, text: str) -> tuple[Any, str | None]:
    """Parse and check the JSON cell ``text`` of field ``name``, remembered in ``cells``."""
    try:
        value = json_cell(name, text)
    except ValueError as exc:
        found: tuple[Any, str | None] = (text, str(exc))
    else:
        found = (value, _cell_problem(name, value))
    cells[text] = found
    return found


def _cell_problem(name: str, value: Any) -> str | None:
    """What is wrong with the served JSON cell ``name`` (``params`` or ``bucket_bounds``), or None."""
    if name == "params":
        try:
            check_params(value)
        except TypeError as exc:
            return str(exc)
        kinds = set(map(type, value.values()))  # JSON's keys are strings: the values are what can be wrong
        if float in kinds or not kinds <= _SCALARS:  # (a float may be NaN or infinite)
            for key, item in value.items():
                if type(item) not in _SCALARS:
                    return (f"field 'params' must map names to numbers, strings, booleans or null, "
                            f"found {describe(item)} at {short_repr(key)}")
                if type(item) is float and not math.isfinite(item):
                    return f"field 'params' holds {item} at {short_repr(key)}, not a finite number"
        return None
    if value is None:
        return None
    if type(value) is not dict:
        return f"field 'bucket_bounds' must be an object or null, found {describe(value)}"
    for dim, pair in value.items():
        if type(pair) not in (list, tuple) or len(pair) != 2:
            return (f"field 'bucket_bounds' must map each dimension to [low, high], found {describe(pair)} "
                    f"at {short_repr(dim)}")
    return None


def _served_problem(row: ServedRow) -> str:
    """What is wrong with the text, integer and rate fields of ``row`` (called once one is)."""
    for name in _TEXT:
        value = getattr(row, name)
        if type(value) is not str or not value:
            return f"field {name!r} must be a non-empty string, found {describe(value)}"
    try:
        bucket_number(row.bucket)
    except TypeError as exc:
        return str(exc)
    for name in _INTEGER:
        value = getattr(row, name)
        if type(value) is not int:
            return f"field {name!r} must be an integer, found {describe(value)}"
    return f"field 'regime_rate_rps' must be a finite number > 0 or null, found {describe(row.regime_rate_rps)}"


def decode_rows(records: Sequence[Any], source: str) -> list[TableRow]:
    """Every record as a :class:`TableRow` by the store's codec, the fields
    ``Dispatcher.requirements`` and ``reservation`` read checked (the served ones were,
    by :func:`served_rows`, when the table was loaded).

    Raises:
        StorageError: the first record that cannot be decoded or is malformed, named.
    """
    decode = TableRow.decode
    records = _json_cells(records)
    try:
        rows = [decode(record) for record in records]
    except Exception:  # noqa: BLE001 - found again below, one record at a time, to name it
        for index, record in enumerate(records):
            try:
                decode(record)
            except KeyError as exc:
                raise StorageError(f"{source}: {label(index, record)}: field {exc.args[0]!r} is missing") from None
            except (TypeError, ValueError, RecursionError) as exc:
                raise StorageError(f"{source}: {label(index, record)}: {exc}") from None
        raise
    for index, row in enumerate(rows):
        problem = _needs_problem(row.__dict__)
        if problem is not None:
            raise StorageError(f"{source}: {label(index, row)}: {problem}")
    return rows


def _json_cells(records: Sequence[Any]) -> Sequence[Any]:
    """SELECT rows (tuples) with their JSON cells decoded, each distinct text parsed once
    per read (a table repeats them: the same params, bounds and shapes in every regime, a
    regime's rates in each of its rows); every row gets its own copy of the value, as if
    parsed alone. A cell that is not valid JSON is left as text, for the codec to refuse
    it with its own message. A JSON export's row objects get their cells copied (what
    :func:`served_rows` read of them is served); other records pass as they are."""
    if records and type(records[0]) is dict:
        return [{**record, **{name: _copy(record[name]) for name in JSON_FIELDS if name in record}}
                if type(record) is dict else record for record in records]
    if not records or type(records[0]) is not tuple or len(records[0]) != len(ROW_FIELDS):
        return records
    parsed: dict[str, tuple[Any, bool]] = {}
    loads = json.loads
    out = []
    for record in records:
        if type(record) is not tuple or len(record) != len(ROW_FIELDS):
            out.append(record)
            continue
        cells = list(record)
        for at in _JSON_AT:
            text = cells[at]
            if type(text) is not str:
                continue
            hit = parsed.get(text)
            if hit is None:
                try:
                    value = loads(text)
                except Exception:  # noqa: BLE001 - refused by the codec, which names the field
                    continue
                hit = parsed[text] = (value, _flat(value))
                cells[at] = value  # the first row keeps the parsed value itself
                continue
            value, flat = hit
            if type(value) in _CONTAINERS:
                value = value.copy() if flat else _copy(value)
            cells[at] = value
        out.append(cells)
    return out


def _flat(value: Any) -> bool:
    """Whether ``value`` holds no container (a shallow copy of it is a full one)."""
    if type(value) is dict:
        return not any(type(v) in _CONTAINERS for v in value.values())
    if type(value) is list:
        return not any(type(v) in _CONTAINERS for v in value)
    return True


def _copy(value: Any) -> Any:
    """A copy of parsed JSON, every container new (JSON that parsed nests within the parser's limit)."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def _needs_problem(values: Mapping[str, Any]) -> str | None:
    """What is wrong with the fields ``Dispatcher.requirements`` and ``reservation``
    read (schema version 4), or None: refused when the full rows are read, so those two
    never meet a malformed value."""
    family = values["family"]
    if family is not None and (type(family) is not str or not family):
        return f"field 'family' must be a non-empty string or null, found {describe(family)}"
    for name in ("family_options", "resources"):
        value = values[name]
        if value is not None and type(value) is not dict:
            return f"field {name!r} must be an object or null, found {describe(value)}"
    sms = values["sms"]
    if sms is not None and (type(sms) is not int or sms < 1):
        return f"field 'sms' must be an integer >= 1 or null, found {describe(sms)}"
    workspace = values["workspace_bytes"]
    if workspace is not None and (type(workspace) not in (int, float) or not 0 <= workspace < math.inf):
        return f"field 'workspace_bytes' must be a finite number >= 0 or null, found {describe(workspace)}"
    return None


def check_regimes(regimes: Mapping[str, Mapping[str, Sequence[ServedRow]]], source: str) -> dict[str, float]:
    """``regime -> regime_rate_rps`` of one problem's rows (``regimes``: ``regime -> op
    -> rows``), each regime's rows agreeing on its place: one ``regime_index`` (the
    table's order) and one rate, and every regime rated or none (the rate classifier can
    place only a regime with a rate).

    Returns an empty mapping when no row has a rate (the dispatcher then serves one regime).

    Raises:
        StorageError: rows of one regime that disagree; a regime without a rate when
            others have one.
    """
    rates: dict[str, float] = {}
    unrated: ServedRow | None = None
    for regime, ops in regimes.items():
        rows = list(chain.from_iterable(ops.values()))
        for name in ("regime_index", "regime_rate_rps"):
            disagree(rows, name, f"regime {short_repr(regime)}", source)
        if rows[0].regime_rate_rps is None:
            unrated = unrated or rows[0]
        else:
            rates[regime] = float(rows[0].regime_rate_rps)
    if rates and unrated is not None:
        raise StorageError(f"{source}: {label(unrated.at, unrated)}: field 'regime_rate_rps' is null while "
                           f"regime {short_repr(next(iter(rates)))} has one: the rate classifier could not place "
                           f"regime {short_repr(unrated.regime)}")
    return rates


def disagree(rows: Sequence[ServedRow], name: str, what: str, source: str) -> None:
    """Refuse ``rows`` (all of ``what``) unless they have one value of the field ``name``.

    Raises:
        StorageError: naming two rows that differ and their values.
    """
    if len({getattr(row, name) for row in rows}) > 1:
        first = rows[0]
        other = next(row for row in rows if getattr(row, name) != getattr(first, name))
        raise StorageError(f"{source}: {label(other.at, other)}: field {name!r} is "
                           f"{describe(getattr(other, name))}, but row {first.at} of {what} has "
                           f"{describe(getattr(first, name))}; the rows of {what} must agree")
