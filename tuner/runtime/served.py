"""Read the config table for serving: SQLite (with the standard library) or project JSON.

This module is the runtime's boundary: everything a table file can get wrong is found
here, once, and raised as a :class:`~tuner.errors.StorageError` (a
:class:`~tuner.errors.SchemaMismatchError` for another schema version) whose one line
names the file and the cause. :func:`~tuner.runtime.load_table` turns those into one
warning and a fallback; nothing here is on the lookup path but :class:`OpConfigs`.

No SQLAlchemy: the SQLite file is read through :mod:`sqlite3`, opened read-only (a
missing file is an error, never a new empty database), from the tables
``tuner_schema`` and ``tuner_configs`` that :mod:`tuner.store.models` defines. A load
reads only the columns lookups need (:func:`~tuner.runtime.rows.served_rows`); the full
rows, decoded by the store's own codec (:meth:`tuner.store.row.TableRow.decode`), are
read when :attr:`Table.rows` is first asked for (by ``Dispatcher.requirements``, say),
from the same file, and checked to be the rows that were loaded.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from ..errors import StorageError
from ..readonly_sqlite import SQLITE_HEADER
from ..store.row import ROW_FIELDS, SERVED_FIELDS, TableRow, bucket_label, short_repr
from ..store.version import check_version
from .jsonfile import json_records
from .rows import ServedRow, brief, check_regimes, decode_rows, disagree, label, served_rows

__all__ = ["OpConfigs", "Table", "read_table"]

_CONFIGS = "tuner_configs"
_SCHEMA = "tuner_schema"

#: An operator keyed on one dimension whose edges are integers no larger than this gets
#: a precomputed ``value -> bucket`` index for the integer values ``0..last edge`` (one
#: per distinct edge list, shared, at most 128 KiB); other values (floats, values above
#: the last edge), other operators, are bisected.
DENSE_LIMIT = 16384

Params = Mapping[str, Any]
#: An operator's bucket grid: its key dimensions and, per dimension, the ascending upper edges.
Grid = tuple[tuple[str, ...], tuple[tuple[float, ...], ...]]


def position(edges: Sequence[Any], value: Any) -> int:
    """Where ``value`` falls among ascending ``edges`` (``bisect_left``), a NaN counting
    as above them all: it compares with nothing, so bisect would put it in the first
    bucket, where a value that is not a number is documented to get the last."""
    i = bisect_left(edges, value)
    return len(edges) if value != value else i


@dataclass(frozen=True, slots=True)
class OpConfigs:
    """One operator's configs in one regime, by shape bucket, ready for lookups.

    Attributes:
        key: the shape dimensions that pick the bucket (empty: one config).
        edges: per key dimension, the buckets' strictly ascending upper edges; a value
            ``v`` falls in the first bucket whose edge is ``>= v`` (bisect), values above
            the last edge in the last bucket, as the tuner's simulator does
            (:meth:`tuner.problem.buckets.Bucketing.index`).
        params: per bucket (first key dimension slowest), read-only parameters.
        names: per bucket, the config's name.
        single: ``params[0]`` when there is one bucket, else None (the fast path).

    Derived (not arguments): ``dim``, the key dimension when there is exactly one (else
    None); ``dense``, for such an operator with integer edges up to :data:`DENSE_LIMIT`,
    the bucket of every integer ``0..edges[-1]``, computed by the same bisect (else None);
    ``last``, the last bucket's index; ``fast``, what the dispatcher's lookup unpacks in
    one step: ``(single, dim, index, size, params, self)``: for an operator with one key
    dimension, ``dim``, its ``dense`` index (empty when it has none: bisected) and the
    index's length; for one with two key dimensions whose edges both have a ``dense``
    index, ``dim`` None and ``index`` ``(first, its index, its length, second, its index,
    its length)``, the first's buckets multiplied by the second's count; else ``dim`` and
    ``index`` None (:meth:`pick` serves).
    """

    key: tuple[str, ...]
    edges: tuple[tuple[float, ...], ...]
    params: tuple[Params, ...]
    names: tuple[str, ...]
    single: Params | None
    dim: str | None = field(init=False, repr=False, compare=False)
    dense: tuple[int, ...] | None = field(init=False, repr=False, compare=False)
    last: int = field(init=False, repr=False, compare=False)
    fast: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        count = math.prod(len(e) for e in self.edges) if self.key else 1
        if len(self.edges) != len(self.key) or any(not e for e in self.edges):
            raise ValueError(f"OpConfigs: key {self.key} needs one non-empty edge list per dimension")
        if any(b <= a for e in self.edges for a, b in zip(e, e[1:])):
            raise ValueError(f"OpConfigs: edges {self.edges} are not strictly ascending")
        if len(self.params) != count or len(self.names) != count:
            raise ValueError(f"OpConfigs: {len(self.params)} params and {len(self.names)} names "
                             f"for {count} buckets")
        one = len(self.key) == 1
        object.__setattr__(self, "dim", self.key[0] if one else None)
        object.__setattr__(self, "dense", _dense_index(self.edges[0]) if one else None)
        object.__setattr__(self, "last", count - 1)
        dim: str | None = None
        index: Any = None
        size = 0
        if self.single is None and one:  # (edges without the integer index: bisected)
            dim, index = self.dim, self.dense or ()
            size = len(index)
        elif self.single is None and len(self.key) == 2:
            outer, inner = _scaled_index(self.edges[0], len(self.edges[1])), _dense_index(self.edges[1])
            if outer is not None and inner is not None:
                index = (self.key[0], outer, len(outer), self.key[1], inner, len(inner))
        object.__setattr__(self, "fast", (self.single, dim, index, size, self.params, self))

    @classmethod
    def fixed(cls, params: Params, name: str = "fallback") -> OpConfigs:
        """One config for every shape."""
        params = params if isinstance(params, MappingProxyType) else MappingProxyType(dict(params))
        return cls((), (), (params,), (name,), params)

    def index(self, shape: Mapping[str, Any] | None) -> int:
        """The bucket of ``shape`` (never raises): per key dimension, the bucket its value
        falls in; a dimension whose value is missing or not comparable takes its last
        bucket (so no shape at all gives the last bucket)."""
        if self.single is not None:
            return 0
        if shape is None:
            return self.last
        dim = self.dim
        if dim is not None:
            try:
                if dim not in shape:
                    return self.last
                value = shape[dim]
            except Exception:  # noqa: BLE001 - a shape that is not a mapping: the last bucket
                return self.last
            return self.bucket(value)
        flat = 0
        for dim, edges in zip(self.key, self.edges):
            last = len(edges) - 1
            try:
                i = min(position(edges, shape[dim]), last) if dim in shape else last
            except Exception:  # noqa: BLE001 - no value, or a value edges cannot be compared with
                i = last
            flat = flat * len(edges) + i
        return flat

    def bucket(self, value: Any) -> int:
        """The bucket of ``value`` of the one key dimension (never raises): from the
        integer index when it has ``value``, else by bisect; not comparable (NaN
        included): the last."""
        dense = self.dense
        if dense is not None and type(value) is int and 0 <= value < len(dense):
            return dense[value]
        try:
            i = position(self.edges[0], value)
        except Exception:  # noqa: BLE001 - a value the edges cannot be compared with
            return self.last
        return i if i <= self.last else self.last

    def pick(self, shape: Mapping[str, Any] | None) -> Params:
        """The params serving ``shape`` (never raises)."""
        single = self.single
        if single is not None:
            return single
        return self.params[self.index(shape)]

    def name(self, shape: Mapping[str, Any] | None = None) -> str:
        """The config name serving ``shape``."""
        return self.names[self.index(shape)]


@lru_cache(maxsize=32)
def _dense_index(edges: tuple[float, ...]) -> tuple[int, ...] | None:
    """The bucket of each integer ``0..edges[-1]``, or None when the edges are not
    integers up to :data:`DENSE_LIMIT`. A tuple of small ints (8 bytes a value, shared by
    every operator with these edges): the fastest index there is; callers skip negative
    values, which would wrap around."""
    if edges[0] < 0 or edges[-1] > DENSE_LIMIT or not all(float(e).is_integer() for e in edges):
        return None
    index: list[int] = []
    for i, edge in enumerate(edges):
        index.extend([i] * (int(edge) + 1 - len(index)))
    return tuple(index)


@lru_cache(maxsize=32)
def _scaled_index(edges: tuple[float, ...], stride: int) -> tuple[int, ...] | None:
    """:func:`_dense_index` with every bucket multiplied by ``stride`` (the first key
    dimension's of a two-dimensional operator: its buckets are rows of ``stride``)."""
    dense = _dense_index(edges)
    return None if dense is None else tuple(i * stride for i in dense)


@dataclass(frozen=True)
class Table:
    """One problem's config table, frozen for lookups.

    Attributes:
        problem: the problem's name.
        device: the device the table was tuned for.
        regimes: regime names in the problem file's order.
        configs: ``regime -> op -> OpConfigs`` (read-only, shared by every lookup).
        rates: ``regime -> mean arrival rate (req/s)`` as the table stores them (None
            when no regime has one).
        source: where the table was read from (for messages).
        read_rows: reads the full rows (:attr:`rows`), called once, when first asked
            for (default: none, for a table built in code).
    """

    problem: str
    device: str
    regimes: tuple[str, ...]
    configs: Mapping[str, Mapping[str, OpConfigs]]
    rates: Mapping[str, float] | None
    source: str
    read_rows: Callable[[], tuple[TableRow, ...]] = field(default=tuple, repr=False, compare=False)

    @property
    def rows(self) -> tuple[TableRow, ...]:
        """The full rows the table was built from, in table order (``regime_rows`` gives a
        regime's, for :meth:`tuner.problem.assignment.Assignment.from_rows`), read and
        decoded on first use (a failure too: the file is not read again).

        Raises:
            StorageError: a malformed field the lookups do not read (provenance,
                requirements), or a SQLite file whose rows changed since the load.
        """
        rows, error = self._read_once
        if error is not None:
            raise StorageError(error)
        return rows

    @cached_property
    def _read_once(self) -> tuple[tuple[TableRow, ...], str | None]:
        try:
            return self.read_rows(), None
        except StorageError as exc:
            return (), str(exc)

    @property
    def ops(self) -> frozenset[str]:
        return frozenset(op for ops in self.configs.values() for op in ops)

    def regime_rows(self, regime: str) -> tuple[TableRow, ...]:
        return tuple(row for row in self.rows if row.regime == regime)


def read_table(source: str | Path, *, problem: str | None = None, device: str | None = None) -> Table:
    """Read and check a table: a SQLite path, a ``sqlite:///`` URL or a project JSON export.

    Args:
        source: the file (its kind is told by its first bytes, not its name).
        problem: the problem to serve; required when the source holds several.
        device: when given, a table tuned for another device is refused.

    Raises:
        StorageError: missing, unreadable, corrupt or empty source; no such problem;
            rows of another device; a malformed row.
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
    source = str(path)
    if head == SQLITE_HEADER:
        served = _build(served_rows(_sqlite_records(path, SERVED_FIELDS), source), source, problem, device)
        again = path.resolve()  # (the same file later, whatever the working directory is then)
        return served.table(lambda: _full_rows(_sqlite_records(again, ROW_FIELDS), served))
    records, whole = json_records(path)  # (the rows' details are parsed when first asked for)
    served = _build(served_rows(records, source), source, problem, device)
    return served.table(lambda: _full_rows(whole(), served))


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


def _sqlite_records(path: Path, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Every row of the config table, ``columns`` of it, in storage order, after the
    schema version is checked."""
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
        check_version(versions[0] if len(versions) == 1 else None, path)
        query = f"SELECT {', '.join(columns)} FROM {_CONFIGS}"  # ordered by _build
        return connection.execute(query).fetchall()  # tuples in the order of columns
    except sqlite3.Error as exc:
        raise StorageError(f"{path}: cannot read the SQLite table ({exc})") from None
    finally:
        connection.close()


_TABLE_ORDER = attrgetter("regime_index", "regime", "op_index", "op", "bucket")


@dataclass(frozen=True)
class _Served:
    """A table as its load builds it: the lookups, and the served rows the full rows
    must match when read."""

    problem: str
    device: str
    configs: Mapping[str, Mapping[str, OpConfigs]]
    rates: Mapping[str, float] | None
    rows: list[ServedRow]  # the problem's, in table order
    source: str

    def table(self, read_rows: Callable[[], tuple[TableRow, ...]]) -> Table:
        return Table(problem=self.problem, device=self.device, regimes=tuple(self.configs),
                     configs=MappingProxyType(self.configs), rates=self.rates, source=self.source,
                     read_rows=read_rows)


def _build(rows: Sequence[ServedRow], source: str, problem: str | None, device: str | None) -> _Served:
    """The lookups of ``problem`` from checked rows (:func:`~tuner.runtime.rows.served_rows`):
    one problem, one device, one rate per regime, no (regime, op, bucket) twice (found
    by :func:`_op_configs`)."""
    if not rows:
        raise StorageError(f"{source}: the config table holds no row")
    problems = sorted({r.problem for r in rows})
    if problem is None:
        if len(problems) > 1:
            raise StorageError(f"{source}: holds the problems {', '.join(problems)}; pass problem= to choose one")
        problem = problems[0]
    elif problem not in problems:
        raise StorageError(f"{source}: no rows for problem {problem!r} (it holds {', '.join(problems)})")
    mine = sorted((r for r in rows if r.problem == problem), key=_TABLE_ORDER)
    devices = sorted({r.device for r in mine})
    if len(devices) > 1:
        raise StorageError(f"{source}: problem {problem!r} mixes rows of devices {', '.join(devices)}")
    if device is not None and devices[0] != device:
        raise StorageError(f"{source}: tuned for device {devices[0]!r}, not {device!r}")
    grouped: dict[str, dict[str, list[ServedRow]]] = {}
    for row in mine:
        grouped.setdefault(row.regime, {}).setdefault(row.op, []).append(row)
    rates = check_regimes(grouped, source)
    proxies: dict[int, MappingProxyType] = {}  # one read-only view per params object (rows share them)
    grids: dict[tuple[int, ...], Grid] = {}
    configs = {regime: MappingProxyType({op: _op_configs(group, source, proxies, grids) for op, group in ops.items()})
               for regime, ops in grouped.items()}
    return _Served(problem, devices[0], configs, MappingProxyType(rates) if rates else None, mine, source)


def _full_rows(records: Sequence[Any], served: _Served) -> tuple[TableRow, ...]:
    """The full rows of the served problem from ``records`` (the whole table, read
    again), in table order, each the one its lookup serves.

    Raises:
        StorageError: a malformed row (:func:`~tuner.runtime.rows.decode_rows`); rows
            that are not those loaded (the file was written since: ``reload()`` it).
    """
    rows = decode_rows(records, served.source)
    mine = sorted((r for r in rows if r.problem == served.problem), key=_TABLE_ORDER)
    if len(mine) != len(served.rows):
        raise StorageError(f"{served.source}: the table changed since it was loaded ({len(served.rows)} rows "
                           f"of {served.problem!r} then, {len(mine)} now); reload() it")
    for full, row in zip(mine, served.rows):
        if (full.regime, full.op, full.bucket, full.config, full.params) != (
                row.regime, row.op, row.bucket, row.config, row.params):
            raise StorageError(f"{served.source}: the table changed since it was loaded ({label(row.at, row)}, "
                               f"bucket {row.bucket}, now {short_repr(full.config)}); reload() it")
    return tuple(mine)


def _op_configs(rows: list[ServedRow], source: str, proxies: dict[int, MappingProxyType],
                grids: dict[tuple[int, ...], Grid]) -> OpConfigs:
    """The lookup of one (regime, operator) from its rows, checked: buckets ``0..n-1``
    (no bucket twice: which of two rows to serve would be a guess) whose bounds are the
    cells of a grid of ascending edges, first dimension slowest. ``proxies``: the
    read-only view of each params object already wrapped; ``grids``: the key and edges
    of each sequence of bounds objects already checked (an operator's buckets are the
    same in every regime, and a SQLite table's rows share their parsed bounds)."""
    def where() -> str:  # (messages are built when raised: a table loads thousands of these)
        return f"{source}: {brief(rows[0].regime)}/{brief(rows[0].op)}"

    def bucket(r: ServedRow) -> str:
        return f"bucket {r.bucket} (row {r.at}, {bucket_label(r.bucket_bounds)})"

    if len({r.op_index for r in rows}) > 1:
        disagree(rows, "op_index", f"operator {short_repr(rows[0].op)} in regime {short_repr(rows[0].regime)}",
                 source)
    if [r.bucket for r in rows] != list(range(len(rows))):
        seen: dict[int, ServedRow] = {}
        for r in rows:
            first = seen.setdefault(r.bucket, r)
            if first is not r:
                raise StorageError(f"{where()}: rows {first.at} and {r.at} are both bucket {r.bucket}; "
                                   "a table has one row per (regime, op, bucket)")
        shown = short_repr([r.at for r in rows[:7]])  # (short_repr shows 6, then "...")
        raise StorageError(f"{where()}: buckets {short_repr([r.bucket for r in rows])} (rows {shown}) are not "
                           f"0..{len(rows) - 1}")
    params = tuple([proxies.get(id(r.params)) or proxies.setdefault(id(r.params), MappingProxyType(r.params))
                    for r in rows])
    names = tuple([r.config for r in rows])
    single = params[0] if len(rows) == 1 else None
    if rows[0].bucket_bounds is None and single is not None:
        return OpConfigs((), (), params, names, single)
    same = tuple([id(r.bucket_bounds) for r in rows])
    grid = grids.get(same)
    if grid is None:
        grid = grids[same] = _grid(rows, where, bucket)
    return OpConfigs(*grid, params, names, single)


def _grid(rows: list[ServedRow], where: Callable[[], str], bucket: Callable[[ServedRow], str]) -> Grid:
    """The key dimensions and edges of an operator's buckets (rows ``0..n-1``), checked
    to be the cells of a grid, first dimension slowest (:func:`_op_configs`)."""
    key = tuple(rows[0].bucket_bounds or ())
    if not key:
        raise StorageError(f"{where()}: {len(rows)} rows but no bucket bounds")
    dims = rows[0].bucket_bounds.keys()  # type: ignore[union-attr]
    try:
        cells = []
        for r in rows:
            b = r.bucket_bounds
            if b is None or b.keys() != dims:
                raise ValueError(f"bucket {r.bucket} (row {r.at}) has bounds "
                                 f"{short_repr(b)}, not over {', '.join(key)}")
            cell = []
            for dim in key:
                low, high = b[dim]
                if type(low) is not int and low is not None:  # (ints, the common case, are bounds as they are)
                    low = _bound(low)
                if type(high) is not int:
                    high = _bound(high)
                    if high is None:
                        raise ValueError(f"bucket {r.bucket} (row {r.at}) has no upper edge")
                cell.append((low, high))
            cells.append(cell)
    except ValueError as exc:
        raise StorageError(f"{where()}: malformed bucket bounds ({exc})") from None
    if len(key) == 1:
        return _one_dimension(rows, key[0], [cell[0] for cell in cells], where, bucket)
    edges = tuple(tuple(sorted({cell[d][1] for cell in cells})) for d in range(len(key)))
    if math.prod(len(e) for e in edges) != len(rows):
        raise StorageError(f"{where()}: {len(rows)} buckets do not form a grid over {', '.join(key)}")
    indices = [{edge: i for i, edge in enumerate(dim_edges)} for dim_edges in edges]
    for r, cell in zip(rows, cells):  # each row where a lookup will look for it
        flat = 0
        for (low, high), dim_edges, index in zip(cell, edges, indices):
            i = index[high]
            if i and low != dim_edges[i - 1]:
                raise StorageError(f"{where()}: {bucket(r)} does not start where the bucket before it ends")
            flat = flat * len(dim_edges) + i
        if flat != r.bucket:
            raise StorageError(f"{where()}: {bucket(r)} is out of order (its bounds are bucket {flat}'s)")
    return key, edges


def _one_dimension(rows: list[ServedRow], dim: str, cells: list[tuple[Any, Any]], where: Callable[[], str],
                   bucket: Callable[[ServedRow], str]) -> Grid:
    """:func:`_grid` for the common key of one dimension (``cells``: each row's
    ``(low, high)``), with the same checks."""
    highs = [high for _, high in cells]
    edges = sorted(highs)
    if len(set(edges)) != len(edges):
        raise StorageError(f"{where()}: {len(rows)} buckets do not form a grid over {dim}")
    for i, (r, (low, high)) in enumerate(zip(rows, cells)):
        if high != edges[i]:
            raise StorageError(f"{where()}: {bucket(r)} is out of order (its bounds are bucket {edges.index(high)}'s)")
        if i and low != edges[i - 1]:
            raise StorageError(f"{where()}: {bucket(r)} does not start where the bucket before it ends")
    return (dim,), (tuple(edges),)


def _bound(value: Any) -> float | int | None:
    """A bucket bound as a number (int when integral: faster to compare with int shapes)."""
    if value is None or type(value) is int:
        return value
    if type(value) is not float or not math.isfinite(value):
        raise ValueError(f"bound {short_repr(value)} is not a finite number")
    return int(value) if float(value).is_integer() else float(value)
