"""Read the config table for serving: SQLite (with the standard library) or project JSON.

This module is the runtime's boundary: everything a table file can get wrong is found
here, once, and raised as a :class:`~tuner.errors.StorageError` (a
:class:`~tuner.errors.SchemaMismatchError` for another schema version) whose one line
names the file and the cause. :func:`~tuner.runtime.load_table` turns those into one
warning and a fallback; nothing here is on the lookup path.

No SQLAlchemy: the SQLite file is read through :mod:`sqlite3`, opened read-only (a
missing file is an error, never a new empty database), from the tables
``tuner_schema`` and ``tuner_configs`` that :mod:`tuner.store.models` defines.
"""

from __future__ import annotations

import gc
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from ..errors import SchemaMismatchError, StorageError
from ..store.version import SCHEMA_VERSION, check_export

__all__ = ["Table", "read_table"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_CONFIGS = "tuner_configs"
_SCHEMA = "tuner_schema"
_COLUMNS = ("problem", "regime", "op", "regime_index", "op_index", "config", "params", "device")


@dataclass(frozen=True)
class Table:
    """One problem's config table, frozen for lookups.

    Attributes:
        problem: the problem's name.
        device: the device the table was tuned for.
        regimes: regime names in the problem file's order.
        configs: ``regime -> op -> params`` (read-only mappings, shared by every lookup).
        names: ``regime -> op -> config name``.
        rates: ``regime -> mean arrival rate (req/s)`` when the source carries them.
        source: where the table was read from (for messages).
    """

    problem: str
    device: str
    regimes: tuple[str, ...]
    configs: Mapping[str, Mapping[str, Mapping[str, Any]]]
    names: Mapping[str, Mapping[str, str]]
    rates: Mapping[str, float] | None
    source: str

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(op for ops in self.configs.values() for op in ops)


def read_table(source: str | Path, *, problem: str | None = None, device: str | None = None) -> Table:
    """Read and check a table: a SQLite path, a ``sqlite:///`` URL or a project JSON export.

    Args:
        source: the file (its kind is told by its first bytes, not its name).
        problem: the problem to serve; required when the source holds several.
        device: when given, a table tuned for another device is refused.

    Raises:
        StorageError: missing, unreadable, corrupt or empty source; no such problem;
            rows of another device.
        SchemaMismatchError: another tuner schema version.
    """
    path = _path(source)
    collecting = gc.isenabled()
    gc.disable()  # parsing makes many small objects: cyclic GC passes would dominate a large table
    try:
        return _read(path, problem, device)
    finally:
        if collecting:
            gc.enable()


def _read(path: Path, problem: str | None, device: str | None) -> Table:
    try:
        with path.open("rb") as file:
            head = file.read(16)
    except FileNotFoundError:
        raise StorageError(f"{path}: no such table file") from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot read the table file ({exc.strerror or exc})") from None
    if not head:
        raise StorageError(f"{path}: the table file is empty")
    if head == _SQLITE_MAGIC:
        rows, rates = _sqlite_rows(path), None
    else:
        rows, rates = _json_rows(path)
    return _build(rows, rates, str(path), problem, device)


def _path(source: str | Path) -> Path:
    text = str(source)
    if text.startswith("sqlite:"):
        if not text.startswith("sqlite:///"):
            raise StorageError(f"{text}: not a SQLite file URL; expected sqlite:///PATH")
        database = text[len("sqlite:///"):].split("?", 1)[0]
        if database in ("", ":memory:"):
            raise StorageError(f"{text}: an in-memory database holds no table")
        return Path(database)
    return Path(text)


def _sqlite_rows(path: Path) -> list[tuple[Any, ...]]:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise StorageError(f"{path}: cannot open the SQLite table ({exc})") from None
    try:
        names = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if _SCHEMA not in names or _CONFIGS not in names:
            raise StorageError(f"{path}: holds no tuner table ({_SCHEMA} and {_CONFIGS} expected)")
        versions = [v for (v,) in connection.execute(f"SELECT version FROM {_SCHEMA}")]
        found = versions[0] if len(versions) == 1 else None
        if found != SCHEMA_VERSION:
            raise SchemaMismatchError(f"{path}: tuner schema version {found if found is not None else 'unknown'} "
                                      f"found, this tuner reads version {SCHEMA_VERSION}")
        query = (f"SELECT {', '.join(_COLUMNS)} FROM {_CONFIGS} "
                 "ORDER BY problem, regime_index, regime, op_index, op")
        parsed: dict[Any, Any] = {}  # a table repeats its configs: parse each distinct cell once
        out = []
        for r in connection.execute(query):
            cell = r[6]
            params = parsed.get(cell) if isinstance(cell, str) else None
            if params is None:
                params = parsed[cell] = _json_cell(cell, path) if isinstance(cell, str) else cell
            out.append((*r[:6], params, r[7]))
        return out
    except sqlite3.Error as exc:
        raise StorageError(f"{path}: cannot read the SQLite table ({exc})") from None
    finally:
        connection.close()


def _json_cell(value: Any, path: Path) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise StorageError(f"{path}: a params cell is not JSON ({exc})") from None
    return value


def _json_rows(path: Path) -> tuple[list[tuple[Any, ...]], dict[str, float] | None]:
    try:
        document = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StorageError(f"{path}: neither a SQLite database nor JSON ({exc})") from None
    check_export(document, path)
    try:
        rows = [(r["problem"], r["regime"], r["op"], r["regime_index"], r["op_index"], r["config"]["name"],
                 r["config"]["params"], r["device"]) for r in document["rows"]]
    except (KeyError, TypeError) as exc:
        raise StorageError(f"{path}: malformed row in the exported table ({exc!r})") from None
    rates = document.get("regime_rates")
    if rates is not None:
        try:
            rates = {str(k): float(v) for k, v in rates.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise StorageError(f"{path}: regime_rates must map regime names to req/s ({exc})") from None
    return rows, rates


def _build(rows: list[tuple[Any, ...]], rates: dict[str, float] | None, source: str,
           problem: str | None, device: str | None) -> Table:
    if not rows:
        raise StorageError(f"{source}: the config table holds no row")
    problems = sorted({r[0] for r in rows})
    if problem is None:
        if len(problems) > 1:
            raise StorageError(f"{source}: holds the problems {', '.join(problems)}; pass problem= to choose one")
        problem = problems[0]
    elif problem not in problems:
        raise StorageError(f"{source}: no rows for problem {problem!r} (it holds {', '.join(problems)})")
    rows = sorted((r for r in rows if r[0] == problem), key=lambda r: (r[3], r[1], r[4], r[2]))
    devices = sorted({r[7] for r in rows})
    if len(devices) > 1:
        raise StorageError(f"{source}: problem {problem!r} mixes rows of devices {', '.join(devices)}")
    if device is not None and devices[0] != device:
        raise StorageError(f"{source}: tuned for device {devices[0]!r}, not {device!r}")
    configs: dict[str, dict[str, Mapping[str, Any]]] = {}
    names: dict[str, dict[str, str]] = {}
    for _, regime, op, _, _, name, params, _ in rows:
        if not isinstance(params, dict):
            raise StorageError(f"{source}: {regime}/{op}: params {params!r} is not an object")
        configs.setdefault(regime, {})[op] = MappingProxyType(dict(params))
        names.setdefault(regime, {})[op] = str(name)
    return Table(
        problem=problem, device=devices[0], regimes=tuple(configs),
        configs=MappingProxyType({k: MappingProxyType(v) for k, v in configs.items()}),
        names=MappingProxyType({k: MappingProxyType(v) for k, v in names.items()}),
        rates=MappingProxyType(rates) if rates is not None else None, source=source,
    )
