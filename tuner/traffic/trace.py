"""Request traces: arrival times and per-request sizes read from a CSV file.

A trace is loaded once per (file, modification time, column choice) and shared by every
seed of a study, so its arrays are read-only.

Rows must be in time order and times in seconds must not be negative: a recorder writes
neither, so either is a damaged or hand-edited file, and sorting it silently would pair
sizes with arrivals nobody recorded. A file above :data:`MAX_TRACE_BYTES` is refused
before it is read, because parsing holds every cell as a Python string.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from tuner.errors import TraceError

#: The largest trace file read: parsing measured 13.6 to 24.5 B of memory per byte of CSV
#: (1 M rows shaped like the Azure traces, datetimes and seconds), so 64 MiB (about 1.8 M
#: rows of the Azure conversation trace) parses in about 1.6 GB.
MAX_TRACE_BYTES = 64 * 2**20


@dataclass(frozen=True, eq=False)
class Trace:
    """Arrival times and request sizes of a recorded workload.

    Equality and hashing are by identity (the arrays are not hashable); :func:`load_trace`
    caches, so loading the same file twice yields the same object.

    Attributes:
        path: The file the trace was read from.
        times_s: Arrival times in seconds, float64, sorted, starting at 0.
        columns: One int64 array of sizes per field (e.g. ``prompt``, ``output``), each as
            long as ``times_s`` and indexed by the same row.
    """

    path: str
    times_s: np.ndarray
    columns: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        times = self.times_s
        if times.ndim != 1 or len(times) < 2:
            raise ValueError(f"a trace needs at least 2 arrivals but got {len(times)}")
        if times[0] != 0.0 or np.any(np.diff(times) < 0) or times[-1] <= 0.0:
            raise ValueError(
                "trace times must be sorted, start at 0 and span > 0 s "
                f"but got {times[0]!r} .. {times[-1]!r}"
            )
        for name, values in self.columns.items():
            if values.shape != times.shape:
                raise ValueError(
                    f"trace column {name!r} has {len(values)} rows but the trace has "
                    f"{len(times)} arrivals"
                )

    def __len__(self) -> int:
        return len(self.times_s)

    @property
    def span_s(self) -> float:
        """Time from the first to the last arrival."""
        return float(self.times_s[-1])

    @property
    def mean_rate(self) -> float:
        """Mean arrival rate in requests per second: gaps per second of span."""
        return (len(self) - 1) / self.span_s

    def gap_cv(self) -> float:
        """Coefficient of variation of the inter-arrival gaps (1 for Poisson traffic)."""
        gaps = np.diff(self.times_s)
        return float(gaps.std() / gaps.mean())


def load_trace(
    path: str | Path,
    time_column: str = "TIMESTAMP",
    size_columns: Mapping[str, str] | None = None,
) -> Trace:
    """Read a request trace from a CSV file with a header row.

    Times are shifted to start at 0. Results are
    cached on the resolved path and its modification time, so every seed of a study
    reuses one parse and an edited file is read again.

    Args:
        path: The CSV file.
        time_column: The column of arrival times: datetimes (``2023-11-16 18:15:46.68``
            or ISO 8601) or plain numbers of seconds.
        size_columns: Maps size field names to CSV columns, e.g.
            ``{"prompt": "ContextTokens", "output": "GeneratedTokens"}``. None takes
            every other column under its own name.

    Returns:
        The trace, with read-only arrays.

    Raises:
        TraceError: The file cannot be read or is larger than :data:`MAX_TRACE_BYTES`, a
            column is missing, a value does not parse, a time in seconds is negative, a row
            is earlier than the one above it, or the trace has fewer than 2 arrivals or
            zero span.
    """
    resolved = Path(path).resolve()
    try:
        stat = resolved.stat()
    except OSError as e:
        raise TraceError(f"{path}: cannot read trace ({e.strerror})") from e
    if stat.st_size > MAX_TRACE_BYTES:
        raise TraceError(
            f"{path}: the trace is {stat.st_size / 2**20:.1f} MiB; at most {MAX_TRACE_BYTES // 2**20} MiB "
            "can be loaded (parsing holds about 25 bytes of memory per byte of CSV); keep the rows you replay"
        )
    mtime_ns = stat.st_mtime_ns
    items = None if size_columns is None else tuple(size_columns.items())
    return _load(resolved, mtime_ns, time_column, items)


@functools.lru_cache(maxsize=16)
def _load(
    path: Path,
    mtime_ns: int,  # part of the cache key only
    time_column: str,
    size_columns: tuple[tuple[str, str], ...] | None,
) -> Trace:
    header, rows, lines = _read_rows(path)
    if size_columns is None:
        size_columns = tuple((name, name) for name in header if name != time_column)
    for column in (time_column, *(column for _, column in size_columns)):
        if column not in header:
            raise TraceError(
                f"{path}: column {column!r} missing (columns: {', '.join(header)})"
            )
    cells = dict(zip(header, zip(*rows))) if rows else {name: () for name in header}
    times = _parse_times(cells[time_column], path, time_column, lines)
    sizes = {
        name: _parse_sizes(cells[column], path, column, lines)
        for name, column in size_columns
    }
    span_s = float(np.ptp(times)) if len(times) else 0.0
    if len(times) < 2 or span_s == 0.0:
        raise TraceError(
            f"{path}: a trace needs at least 2 arrivals spanning > 0 s "
            f"but has {len(times)} rows spanning {span_s:g} s"
        )
    _check_order(times, cells[time_column], path, time_column, lines)
    times = times - times[0]
    times.flags.writeable = False
    for values in sizes.values():
        values.flags.writeable = False
    return Trace(str(path), times, MappingProxyType(sizes))


def _check_order(
    times: np.ndarray, raw: Sequence[str], path: Path, column: str, lines: list[int]
) -> None:
    """Refuse the first row earlier than the row above it, naming both."""
    backwards = np.flatnonzero(np.diff(times) < 0)
    if len(backwards):
        bad = int(backwards[0]) + 1
        raise TraceError(
            f"{path}: line {lines[bad]}, column {column!r}: {_cell(raw[bad])} is earlier than "
            f"{_cell(raw[bad - 1])} on line {lines[bad - 1]}; rows must be in time order "
            "(sort the file by its time column)"
        )


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The header, the non-blank data rows, and each row's line number in the file."""
    try:
        with path.open(newline="") as file:
            reader = csv.reader(file)
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{path}: file is empty (expected a header row)")
            header = [name.strip() for name in header]
            rows, lines = [], []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise TraceError(
                        f"{path}: line {reader.line_num} has {len(row)} fields "
                        f"but the header has {len(header)}"
                    )
                rows.append(row)
                lines.append(reader.line_num)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TraceError(f"{path}: cannot read trace ({e})") from e
    return header, rows, lines


def _parse_times(
    raw: Sequence[str], path: Path, column: str, lines: list[int]
) -> np.ndarray:
    """Seconds (float64, unshifted) from numbers of seconds or datetimes."""
    try:
        seconds = np.array(raw, dtype=np.float64)
    except ValueError:
        pass
    else:
        _check_finite(~np.isfinite(seconds), raw, path, column, lines)
        negative = np.flatnonzero(seconds < 0)
        if len(negative):
            bad = int(negative[0])
            raise TraceError(
                f"{path}: line {lines[bad]}, column {column!r}: time {_cell(raw[bad])} is negative; "
                "times in seconds count from the recording's start"
            )
        return seconds
    iso = [value.strip().replace(" ", "T") for value in raw]
    try:
        stamps = np.array(iso, dtype="datetime64[ns]")
    except ValueError:
        bad = _first_failure(iso, lambda value: np.datetime64(value, "ns"))
        raise TraceError(
            f"{path}: line {lines[bad]}, column {column!r}: cannot parse {_cell(raw[bad])} "
            "as a datetime or a number of seconds"
        ) from None
    _check_finite(np.isnat(stamps), raw, path, column, lines)
    return (stamps - stamps.min()).astype(np.int64) / 1e9


def _parse_sizes(
    raw: Sequence[str], path: Path, column: str, lines: list[int]
) -> np.ndarray:
    try:
        values = np.array(raw, dtype=np.int64)
    except (ValueError, OverflowError):
        bad = _first_failure(raw, lambda value: np.array([value], dtype=np.int64))
        raise TraceError(
            f"{path}: line {lines[bad]}, column {column!r}: {_cell(raw[bad])} is not an integer"
        ) from None
    negative = np.flatnonzero(values < 0)
    if len(negative):
        bad = int(negative[0])
        raise TraceError(
            f"{path}: line {lines[bad]}, column {column!r}: size {_cell(raw[bad])} is negative"
        )
    return values


def _check_finite(
    invalid: np.ndarray, raw: Sequence[str], path: Path, column: str, lines: list[int]
) -> None:
    if invalid.any():
        bad = int(np.flatnonzero(invalid)[0])
        raise TraceError(
            f"{path}: line {lines[bad]}, column {column!r}: {_cell(raw[bad])} is not a valid time"
        )


def _first_failure(values: Sequence[str], parse: Callable[[str], object]) -> int:
    """Index of the first value `parse` rejects; only called once a bulk parse failed."""
    for index, value in enumerate(values):
        try:
            parse(value)
        except (ValueError, OverflowError):
            return index
    raise AssertionError("bulk parse failed but every value parses alone")


def _cell(value: str) -> str:
    """A cell as a message quotes it, cut to 40 characters (a damaged file may hold a long one)."""
    return repr(value if len(value) <= 40 else value[:37] + "...")
