"""The rows a runtime serves, checked once at load: decoded, typed, unique, one rate per regime.

A table file is data the service did not write, and SQLite's columns and JSON's values
take any type: a row whose ``regime`` is ``7`` or ``null``, whose ``params`` hold an
object, or that repeats another's (regime, op, bucket) must be refused here, with the
file, the row and the field named, not found later as a Python error in a sort or a set
(``'<' not supported``, ``unhashable type``) or served as if it were valid. Only the fields
the runtime reads are checked; the provenance is carried as the codec decodes it.

Rows are named by their position in the file, counted from 0 (the JSON export's ``rows``
list, the SQLite table's rows in storage order), and by their regime and operator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

from ..errors import StorageError
from ..store.row import JSON_FIELDS, ROW_FIELDS, TableRow, short_repr

__all__ = ["brief", "check_regimes", "check_rows", "decode_rows", "describe", "disagree", "label"]

#: Fields the runtime reads as text (keys, messages, the device check).
_TEXT = ("problem", "regime", "op", "config", "device")
#: Fields the runtime reads as integers (bucket order, the problem file's order).
_INTEGER = ("bucket", "regime_index", "op_index")
#: What a config parameter may be: a Triton meta-parameter or launch option is one of these.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_REGIME, _OP = ROW_FIELDS.index("regime"), ROW_FIELDS.index("op")
#: Where a SELECT's row holds the JSON cells (text in SQLite).
_JSON_AT = tuple(ROW_FIELDS.index(name) for name in JSON_FIELDS)
_CONTAINERS = (dict, list)


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
    if isinstance(record, TableRow):
        regime, op = record.regime, record.op
    elif isinstance(record, Mapping):
        regime, op = record.get("regime"), record.get("op")
    elif isinstance(record, (tuple, list)) and len(record) == len(ROW_FIELDS):  # a SELECT's row
        regime, op = record[_REGIME], record[_OP]
    else:
        return f"row {index}"
    return f"row {index} ({brief(regime)}/{brief(op)})"


def brief(name: Any) -> str:
    """A regime's or operator's name for a message: as it is when a short string, else
    capped (a table file may hold a megabyte where a name goes)."""
    return name if type(name) is str and 0 < len(name) <= 40 else short_repr(name)


def decode_rows(records: Sequence[Any], source: str) -> list[TableRow]:
    """Every record as a :class:`TableRow` by the store's codec, the fields the runtime
    reads checked (:func:`check_rows`).

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
    check_rows(rows, source)
    return rows


def _json_cells(records: Sequence[Any]) -> Sequence[Any]:
    """SELECT rows (tuples) with their JSON cells decoded, each distinct text parsed once
    per load (a table repeats them: the same params, bounds and shapes in every regime, a
    regime's rates in each of its rows); every row gets its own copy of the value, as if
    parsed alone. A cell that is not valid JSON is left as text, for the codec to refuse
    it with its own message; records of another kind (a JSON export's) pass as they are."""
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


def check_rows(rows: Sequence[TableRow], source: str) -> None:
    """Refuse the first row with a field of the wrong type (text that is not a non-empty
    string, an integer that is not one, a parameter that is not a finite scalar, bucket
    bounds that are not ``{dim: [low, high]}``, a regime rate that is not a finite number
    > 0). The bounds' numbers and their grid are checked per operator, by the table.

    Raises:
        StorageError: naming the file, the row and the field.
    """
    for index, row in enumerate(rows):
        problem = _problem(row)
        if problem is not None:
            raise StorageError(f"{source}: {label(index, row)}: {problem}")


def _problem(row: TableRow) -> str | None:
    """What is wrong with the fields of ``row`` the runtime reads, or None."""
    values = row.__dict__
    for name in _TEXT:
        value = values[name]
        if type(value) is not str or not value:
            return f"field {name!r} must be a non-empty string, found {describe(value)}"
    for name in _INTEGER:
        value = values[name]
        if type(value) is not int:
            return f"field {name!r} must be an integer, found {describe(value)}"
    kinds = set(map(type, row.params.values()))  # JSON's keys are strings: the values are what can be wrong
    if float in kinds or not kinds <= _SCALARS:  # (a float may be NaN or infinite)
        for key, value in row.params.items():
            if type(value) not in _SCALARS:
                return (f"field 'params' must map names to numbers, strings, booleans or null, "
                        f"found {describe(value)} at {short_repr(key)}")
            if type(value) is float and not math.isfinite(value):
                return f"field 'params' holds {value} at {short_repr(key)}, not a finite number"
    bounds = values["bucket_bounds"]
    if bounds is not None:
        if type(bounds) is not dict:
            return f"field 'bucket_bounds' must be an object or null, found {describe(bounds)}"
        for dim, pair in bounds.items():
            if type(pair) not in (list, tuple) or len(pair) != 2:
                return (f"field 'bucket_bounds' must map each dimension to [low, high], found {describe(pair)} "
                        f"at {short_repr(dim)}")
    rate = values["regime_rate_rps"]
    if rate is not None and (type(rate) not in (int, float) or not 0 < rate < math.inf):
        return f"field 'regime_rate_rps' must be a finite number > 0 or null, found {describe(rate)}"
    return _needs_problem(values)


def _needs_problem(values: Mapping[str, Any]) -> str | None:
    """What is wrong with the fields ``Dispatcher.requirements`` and ``reservation``
    read (schema version 4), or None: refused at load like the others, so those two
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


def check_regimes(regimes: Mapping[str, Mapping[str, Sequence[TableRow]]], position: Callable[[TableRow], int],
                  source: str) -> dict[str, float]:
    """``regime -> regime_rate_rps`` of one problem's rows (``regimes``: ``regime -> op
    -> rows``; ``position``: a row's index in the file, for messages), each regime's rows
    agreeing on its place: one ``regime_index`` (the table's order) and one rate, and
    every regime rated or none (the rate classifier can place only a regime with a rate).

    Returns an empty mapping when no row has a rate (the dispatcher then serves one regime).

    Raises:
        StorageError: rows of one regime that disagree; a regime without a rate when
            others have one.
    """
    rates: dict[str, float] = {}
    unrated: TableRow | None = None
    for regime, ops in regimes.items():
        rows = list(chain.from_iterable(ops.values()))
        for name in ("regime_index", "regime_rate_rps"):
            disagree(rows, name, f"regime {short_repr(regime)}", position, source)
        if rows[0].regime_rate_rps is None:
            unrated = unrated or rows[0]
        else:
            rates[regime] = float(rows[0].regime_rate_rps)
    if rates and unrated is not None:
        raise StorageError(f"{source}: {label(position(unrated), unrated)}: field 'regime_rate_rps' is null while "
                           f"regime {short_repr(next(iter(rates)))} has one: the rate classifier could not place "
                           f"regime {short_repr(unrated.regime)}")
    return rates


def disagree(rows: Sequence[TableRow], name: str, what: str, position: Callable[[TableRow], int],
             source: str) -> None:
    """Refuse ``rows`` (all of ``what``) unless they have one value of the field ``name``.

    Raises:
        StorageError: naming two rows that differ and their values.
    """
    if len({row.__dict__[name] for row in rows}) > 1:
        first = rows[0]
        other = next(row for row in rows if row.__dict__[name] != first.__dict__[name])
        raise StorageError(f"{source}: {label(position(other), other)}: field {name!r} is "
                           f"{describe(other.__dict__[name])}, but row {position(first)} of {what} has "
                           f"{describe(first.__dict__[name])}; the rows of {what} must agree")
