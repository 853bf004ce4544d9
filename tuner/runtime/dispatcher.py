"""The dispatcher: the table's config for the current regime, and :func:`load_table`.

Lifecycle. :func:`load_table` reads the table once (never raising: a bad table gives a
dispatcher serving the caller's fallback, with one warning naming the cause). The
service then feeds the load monitor (``observe_*``), calls :meth:`Dispatcher.tick` at
its safe points (between batches, say), and asks :meth:`Dispatcher.config` per launch,
with the launch's shape: an operator's configs are per shape bucket, found by bisecting
the bucket edges precomputed at load (:class:`~tuner.runtime.served.OpConfigs`).

Thread safety. Everything a lookup reads is one snapshot that is never mutated: the
current regime's ``op -> OpConfigs`` mapping (every bucket of every operator), held in
one attribute and replaced whole by :meth:`~Dispatcher.tick` (a regime change) or
:meth:`~Dispatcher.reload` (a new table), both under a lock. A lookup takes no lock and
sees the old assignment or the new one, never a mix, and every operator of a launch
sequence that reads between two ticks gets the same regime's config.
"""

from __future__ import annotations

import copy
import logging
import numbers
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TunerError
from ..requirements import Requirements, RequirementsError, requirements
from ..store.row import TableRow, short_repr
from .arguments import check_dispatcher, check_load, split_fallback
from .classify import RateClassifier
from .monitor import LoadMonitor, LoadSnapshot
from .served import OpConfigs, Table, position, read_table

__all__ = ["Dispatcher", "load_table"]

logger = logging.getLogger("tuner.runtime")

Params = Mapping[str, Any]
Classifier = Callable[[LoadSnapshot, str], str]


@dataclass(frozen=True)
class _State:
    table: Table | None
    regime: str | None
    reason: str | None  # why the fallback is served (None when the table is)
    # requirements() memo of this table and regime, (op, shape items) -> answer: a new
    # state gets a new one, so a lookup never meets another regime's answer
    needs: dict = field(default_factory=dict, compare=False, repr=False)


class Dispatcher:
    """Answers ``config(op, shape)`` from a regime-indexed table of per-bucket configs,
    switching regimes with the load.

    Build one with :func:`load_table`. Contract:

    * :meth:`config` never raises and never blocks; it returns a read-only mapping that
      is shared (do not rely on its identity; copy it to change it).
    * A regime change takes effect only in :meth:`tick`, for every operator at once, and
      only after the classifier has asked for the same new regime at ``confirm``
      consecutive ticks.
    * :meth:`reload` replaces the table atomically; when the new one cannot be read it
      warns and keeps serving what it served.
    * An operator the table does not know gets the fallback, with one warning per
      operator per dispatcher.

    Args:
        table: the table to serve, or None to serve the fallback.
        fallback: per operator (``{op: params}``, with an optional ``"*"`` entry for any
            other op) or one ``params`` mapping for every op; None serves ``{}`` (the
            kernel's own defaults).
        reason: why the fallback is served when ``table`` is None.
        regime_rates: mean arrival rate per regime (req/s), overriding the table's own
            (:attr:`Table.rates`, from the rows' ``regime_rate_rps``).
        classifier: a custom ``(snapshot, current) -> regime``; default: by rate.
        initial_regime: the regime served before the load says otherwise; default the
            table's first (the problem file's order).
        confirm: consecutive ticks a new regime must be asked for before it is taken.
        margin: the rate classifier's hysteresis band (relative).
        alpha: the load monitor's EWMA weight.
        clock: time source of the monitor.
        reader: how :meth:`reload` reads a table (``source -> Table``).
        source: what :meth:`reload` reads by default (else the table's own source).

    Raises:
        TypeError, ValueError: a setting or fallback of the wrong type or value (a mistake
            in the service's code, unlike a bad table: see :func:`load_table`).
    """

    def __init__(
        self,
        table: Table | None,
        *,
        fallback: Mapping[str, Any] | None = None,
        reason: str | None = None,
        regime_rates: Mapping[str, float] | None = None,
        classifier: Classifier | None = None,
        initial_regime: str | None = None,
        confirm: int = 2,
        margin: float = 0.15,
        alpha: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        reader: Callable[[str | Path], Table] | None = None,
        source: str | Path | None = None,
    ) -> None:
        check_dispatcher(regime_rates=regime_rates, classifier=classifier, initial_regime=initial_regime,
                         confirm=confirm, margin=margin, alpha=alpha, clock=clock)
        self.monitor = LoadMonitor(alpha=alpha, clock=clock)
        self._per_op, self._default = split_fallback(fallback)
        self._regime_rates = dict(regime_rates) if regime_rates is not None else None
        self._custom = classifier
        self._initial = initial_regime
        self._confirm = confirm
        self._margin = margin
        self._reader = reader
        self._source = source
        self._lock = threading.Lock()
        self._warn_lock = threading.Lock()
        self._warned: set[str] = set()
        self._pending: tuple[str | None, int] = (None, 0)
        self._classifier: Classifier | None = None
        self._state = _State(None, None, reason or "no table given")
        self._lookup: dict[str, tuple] = {op: OpConfigs.fixed(params).fast for op, params in self._per_op.items()}
        if table is not None:
            self._install(table, initial_regime)

    # --- lookups (the hot path: no lock) ---------------------------------------------

    def config(self, op: str, shape: Mapping[str, Any] | None = None) -> Params:
        """The params of ``op`` for the current regime and the bucket ``shape`` falls in.

        ``shape`` maps the operator's key dimensions to the launch's values
        (``{"M": 4096}``, as ``triton.autotune(key=…)`` reads them; other entries are
        ignored). The bucket is the first whose upper edge is at least the value; a value
        above the last edge gets the last bucket; a missing ``shape``, a missing key value
        or one that is not a number gets the last bucket along that dimension, except a
        number written as text (``"4"``), read as the number; either warns once per
        operator. An operator with one bucket ignores ``shape``. Never raises.
        """
        try:
            single, dim, index, size, params, entry = self._lookup[op]
        except KeyError:
            return self._missing(op)
        if single is not None:
            return single
        if shape is not None:
            try:
                if dim is not None:  # one key dimension: the integer index, else bisect; no value: the last bucket
                    if dim in shape:
                        value = shape[dim]
                        if 0 <= value < size:  # (a negative index would wrap around)
                            return params[index[value]]
                        i = position(entry.edges[0], value)
                        return params[i] if i < len(params) else params[-1]  # above the last edge: the last
                    return params[-1]
                elif index is not None:  # two: an integer index per dimension (no value: its last edge's)
                    first, outer, rows, second, inner, columns = index
                    row = shape[first] if first in shape else rows - 1
                    column = shape[second] if second in shape else columns - 1
                    if 0 <= row < rows and 0 <= column < columns:
                        return params[outer[row] + inner[column]]
            except Exception:  # noqa: BLE001 - a shape that is not a mapping, a value that is not an integer
                return self._odd_shape(op, shape, entry)
        return entry.pick(shape)

    def config_name(self, op: str, shape: Mapping[str, Any] | None = None) -> str | None:
        """The table's config name for ``op`` and ``shape`` in the current regime (None on
        fallback, and for an operator the table does not have)."""
        state = self._state
        if state.table is None or state.regime is None:
            return None
        entry = state.table.configs[state.regime].get(op)
        return None if entry is None else entry.name(shape)

    # --- what a config needs (workspace, launches, SMs) ---------------------------------

    def requirements(self, op: str, shape: Mapping[str, Any] | None = None) -> Requirements | None:
        """What the current regime's config for ``op`` needs at ``shape``
        (:class:`tuner.requirements.Requirements`: workspace by buffer, launches and
        their grids, persistent or not, the SMs it is sized to, shared memory and
        registers per CTA where the table knows them, its bucket's range).

        ``shape`` picks the bucket as :meth:`config` does and gives the launch's
        dimensions; a dimension it lacks is taken from the row's shape (the bucket's
        representative, i.e. largest, shape at the tuned service's largest batch), so
        ``requirements(op)`` is the last bucket at its largest shape. Memoised per
        (regime, op, shape). Never raises: on the fallback (no table, or a broken one), for
        an operator the table lacks, a declared profile (no kernel family), a shape the
        family cannot take, or full rows that cannot be read (a malformed field the lookups
        do not read, a file written since the load: :attr:`Table.rows`) it returns None,
        with one warning per cause. Thread-safe as
        :meth:`config` is: it reads one state snapshot, which holds its own memo.
        """
        state = self._state
        memo = state.needs
        try:
            key = (op, tuple(shape.items())) if shape is not None else op
            found = memo.get(key, memo)
        except Exception:  # noqa: BLE001 - a shape that is not a mapping, an unhashable value
            key, found = None, memo
        if found is not memo:
            return found  # type: ignore[no-any-return]
        needs = self._requirements(state, op, shape)
        if key is not None:
            if len(memo) >= 4096:
                memo.clear()
            memo[key] = needs
        return needs

    def engine_args(self) -> dict[str, Any] | None:
        """The engine knob values the served regime was tuned with, to start the engine
        with (``{"max_num_batched_tokens": 2048}``; a null value is the engine's own
        default): a row field of a problem with ``service.knobs``, the same in every
        regime, since the engine reads them at start-up (``tuner table export --format
        vllm-args`` writes them as a command line). A fresh dict each call. Never raises:
        None when the table lists no knobs, and, with one warning, when no table is
        served, its rows cannot be read, or the field is not an object.
        """
        state = self._state
        if state.table is None or state.regime is None:
            self._no_table("engine_args", "read", state)
            return None
        grouped = self._rows(state.table, "engine_args")
        if grouped is None:
            return None
        found = next((rows[0].engine_args for (_, regime), rows in grouped.items() if regime == state.regime), None)
        if found is None:
            return None
        if not isinstance(found, dict) or not all(isinstance(name, str) for name in found):
            self._warn_once("engine_args:malformed", f"tuner.runtime: engine_args() of {state.table.source}, "
                            f"regime {state.regime!r}: expected an object of knob values, got "
                            f"{short_repr(found)}; returning None")
            return None
        return copy.deepcopy(found)

    def reservation(self, shapes: Mapping[str, Mapping[str, Any]] | None = None, *,
                    regimes: Sequence[str] | None = None, executors: int = 1) -> int | None:
        """The workspace (bytes) an engine must reserve before sizing its KV cache to
        serve the whole table: over every regime it may switch to, the most any one
        operator's config needs in any bucket the engine reaches (one operator runs at a
        time per executor), times ``executors``.

        ``shapes`` gives per operator its largest launch shape (``{"qkv": {"M": 8192}}``):
        a bucket above it is not reached, a reached one is judged at its upper edge or
        the largest shape, whichever is smaller (the last bucket also at a larger shape:
        it serves those). An operator it does not name is judged at the tuned service's
        largest batch, as the simulator reserves it (the rows' ``workspace_bytes``), so
        ``reservation()`` is exactly the simulator's reserved workspace for the table's
        assignments. ``regimes`` limits it to those regimes (default: every regime of the
        table, since the classifier may switch to any). Never raises: None with one
        warning when no table is served, its full rows cannot be read, or a row cannot be
        judged.
        """
        state = self._state
        if state.table is None:
            self._no_table("reservation", "judge", state)
            return None
        grouped = self._rows(state.table, "reservation")
        if grouped is None:
            return None
        try:
            peak = 0.0
            wanted = None if regimes is None else set(regimes)
            for (op, regime), rows in grouped.items():
                if wanted is not None and regime not in wanted:
                    continue
                largest = shapes.get(op) if shapes is not None else None
                last = {dim: max(r.bucket_bounds[dim][1] for r in rows) for dim in rows[0].bucket_bounds or ()}
                for row in rows:
                    peak = max(peak, _row_workspace(row, largest, last))
            return int(round(peak)) * int(executors)
        except Exception as exc:  # noqa: BLE001 - a broken row or shape must not take the service down
            self._warn_once("reservation", f"tuner.runtime: reservation() cannot judge the table "
                            f"{state.table.source}: {_brief_error(exc)}; returning None")
            return None

    def _requirements(self, state: _State, op: str, shape: Mapping[str, Any] | None) -> Requirements | None:
        """:meth:`requirements` without the memo."""
        table, regime = state.table, state.regime
        if table is None or regime is None:
            self._no_table("requirements", "judge", state)
            return None
        entry = table.configs[regime].get(op)
        if entry is None:
            self._warn_once(f"requirements:{op}", f"tuner.runtime: operator {op!r} is not in the table "
                            f"{table.source}; its requirements are unknown (None)")
            return None
        grouped = self._rows(table, "requirements")
        if grouped is None:
            return None
        row = grouped[(op, regime)][entry.index(shape)]
        if row.family is None or row.sms is None:
            self._warn_once(f"requirements:{op}:declared", f"tuner.runtime: operator {op!r} of {table.source} "
                            "has a declared profile, not a kernel family: its requirements are unknown (None); "
                            "reservation() still counts its workspace")
            return None
        try:
            return requirements(row.family, row.params, _full_shape(row, shape), sms=row.sms,
                                options=row.family_options, resources=row.resources,
                                shape_range=row.bucket_bounds)
        except RequirementsError as exc:
            self._warn_once(f"requirements:{op}:error", f"tuner.runtime: requirements of {op!r} in {table.source}: "
                            f"{exc}; returning None")
            return None

    def _rows(self, table: Table, asking: str) -> dict[tuple[str, str], tuple[TableRow, ...]] | None:
        """The table's full rows by (op, regime), read on first use; None, with one
        warning naming the row and field, when they cannot be (a malformed field the
        lookups do not read, a file written since the load)."""
        try:
            return _by_op(table)
        except Exception as exc:  # noqa: BLE001 - the serving path never raises for a table
            self._warn_once(f"rows:{asking}", f"tuner.runtime: {asking}() returns None: {_why(exc, table.source)}")
            return None

    @property
    def regime(self) -> str | None:
        """The regime whose configs are served; None when serving the fallback."""
        return self._state.regime

    @property
    def table(self) -> Table | None:
        return self._state.table

    def fallback(self, op: str) -> Params:
        """What ``fallback=`` gives ``op`` (its own entry, else the default): what is
        served without a table, and what a kernel launches when the table's config
        cannot be (``tuner.runtime.autotune``)."""
        return self._per_op.get(op, self._default)

    @property
    def fallback_reason(self) -> str | None:
        """Why the fallback is served, or None when the table is."""
        return self._state.reason

    # --- the load monitor ------------------------------------------------------------

    def observe_arrival(self, t: float | None = None) -> None:
        self.monitor.observe_arrival(t)

    def observe_queue(self, depth: int) -> None:
        self.monitor.observe_queue(depth)

    def observe_free_memory(self, free_bytes: int) -> None:
        self.monitor.observe_free_memory(free_bytes)

    def load(self, now: float | None = None) -> LoadSnapshot:
        return self.monitor.snapshot(now)

    # --- state changes (under the lock) ----------------------------------------------

    def tick(self, now: float | None = None) -> str | None:
        """The safe point: classify the load and, if confirmed, switch every operator to
        the new regime at once. Returns the regime served after the tick."""
        with self._lock:
            state, classifier = self._state, self._classifier
            if state.table is None or state.regime is None or classifier is None:
                return state.regime
            try:
                wanted = classifier(self.monitor.snapshot(now), state.regime)
            except Exception as exc:  # noqa: BLE001 — a broken custom classifier must not take the service down
                self._warn_once("classifier", f"tuner.runtime: the regime classifier raised {exc!r}; "
                                f"keeping regime {state.regime!r}")
                return state.regime
            if wanted == state.regime or wanted not in state.table.configs:
                self._pending = (None, 0)
                return state.regime
            name, count = self._pending
            count = count + 1 if name == wanted else 1
            if count < self._confirm:
                self._pending = (wanted, count)
                return state.regime
            self._pending = (None, 0)
            self._set(state.table, wanted)
            logger.info("tuner.runtime: regime %s -> %s", state.regime, wanted)
            return wanted

    def set_regime(self, regime: str) -> None:
        """Serve ``regime`` now (an operator's override, or a service that classifies
        load itself). Raises KeyError for a regime the table does not have."""
        with self._lock:
            table = self._state.table
            if table is None or regime not in table.configs:
                raise KeyError(f"regime {regime!r} is not in the table "
                               f"(it has {', '.join(table.regimes) if table else 'no table'})")
            self._pending = (None, 0)
            self._set(table, regime)

    def reload(self, source: str | Path | None = None) -> bool:
        """Read the table again (from ``source``, default the current one) and swap it in.

        Returns True when swapped. On failure logs one warning and keeps serving what it
        served. The regime stays when the new table has it.
        """
        current = self._state
        where = source if source is not None else self._source
        if where is None and current.table is not None:
            where = current.table.source
        if where is None or self._reader is None:
            logger.warning("tuner.runtime: reload has no table source; keeping the current configs")
            return False
        try:
            table = self._reader(where)
        except Exception as exc:  # noqa: BLE001 — a bad new table keeps the old one serving
            logger.warning("tuner.runtime: reload of %s failed, keeping the current configs: %s", where,
                           _why(exc, where))
            return False
        with self._lock:
            keep = self._state.regime
            self._install(table, keep if keep in table.configs else self._initial)
            self._source = where
        return True

    # --- internals -------------------------------------------------------------------

    def _load(self, source: str | Path) -> None:
        """:func:`load_table`'s read: the table, or one warning and the fallback (with why)."""
        try:
            table = self._reader(source)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 — the serving path never raises for a table
            reason = _why(exc, source)
            logger.warning("tuner.runtime: cannot serve the config table, serving the fallback: %s", reason)
            self._state = _State(None, None, reason)
            return
        self._install(table, self._initial)

    def _install(self, table: Table, regime: str | None) -> None:
        rates = self._regime_rates if self._regime_rates is not None else table.rates
        known = {k: v for k, v in (rates or {}).items() if k in table.configs}
        if self._custom is not None:
            self._classifier = self._custom
        else:
            self._classifier = RateClassifier(known, margin=self._margin) if known else None
            unplaced = [name for name in table.regimes if name not in known]
            if self._regime_rates is not None and unplaced:
                logger.warning("tuner.runtime: regime_rates gives no rate for %s of the table %s: the rate "
                               "classifier never switches to %s (set_regime() does)", ", ".join(unplaced),
                               table.source, "it" if len(unplaced) == 1 else "them")
            elif not known and len(table.regimes) > 1:
                logger.info("tuner.runtime: the rows of %s carry no regime_rate_rps; serving one regime "
                            "until set_regime() (pass regime_rates= to switch with the load)", table.source)
        if regime is None or regime not in table.configs:
            regime = table.regimes[0]
        self._pending = (None, 0)
        self._set(table, regime)

    def _set(self, table: Table, regime: str) -> None:
        self._state = _State(table, regime, None)
        self._lookup = {op: entry.fast for op, entry in table.configs[regime].items()}  # a plain dict of tuples

    def _missing(self, op: str) -> Params:
        params = self.fallback(op)
        if self._state.table is not None and op not in self._warned:
            self._warn_once(op, f"tuner.runtime: operator {op!r} is not in the table "
                            f"{self._state.table.source}; serving its fallback {dict(params)!r}")
        return params

    def _odd_shape(self, op: str, shape: Any, entry: OpConfigs) -> Params:
        """The params for a shape the fast path could not read. A float or a NumPy integer
        is a number: bisected, no warning. A number written as text (``{"M": "4"}``) is read
        as that number, and any other key value gets the last bucket, as documented; both
        warn once per operator, since the last bucket of a GEMM keyed on M is its prefill
        config, which a decode launch would then run silently."""
        try:
            values = {dim: shape[dim] for dim in entry.key if dim in shape}
        except Exception:  # noqa: BLE001 - a shape that is not a mapping: the last bucket
            values = None
        if values is not None and all(_is_number(v) for v in values.values()):
            return entry.pick(shape)
        read = None if values is None else {dim: _as_number(v) for dim, v in values.items()}
        if read is not None and None not in read.values():
            self._warn_once(f"shape:{op}", f"tuner.runtime: config({op!r}, ...): shape {short_repr(values)} has "
                            "numbers written as text; read as numbers (pass ints, as triton.autotune's key does)")
            return entry.pick(read)
        self._warn_once(f"shape:{op}", f"tuner.runtime: config({op!r}, ...): shape {short_repr(shape)} is not a "
                        f"mapping of {', '.join(entry.key)} to numbers; serving the last bucket")
        return entry.pick(shape)

    def _no_table(self, method: str, verb: str, state: _State) -> None:
        """One warning that ``method()`` answers None: the fallback is served."""
        self._warn_once(f"{method}:fallback", f"tuner.runtime: {method}() has no table to {verb} (serving "
                        f"the fallback: {state.reason}); returning None")

    def _warn_once(self, key: str, message: str) -> None:
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        logger.warning(message)


def _is_number(value: Any) -> bool:
    """A real number: an int (a bool is one), a float, a NumPy scalar."""
    return isinstance(value, numbers.Real)


def _as_number(value: Any) -> float | None:
    """``value`` as a number: itself when it is one, a number written as text parsed,
    else None."""
    if _is_number(value):
        return value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return int(number) if number.is_integer() else number
    return None


def load_table(
    source: str | Path,
    problem: str | None = None,
    device: str | None = None,
    fallback: Mapping[str, Any] | None = None,
    **options: Any,
) -> Dispatcher:
    """A dispatcher serving ``source``'s table; never raises for a bad table.

    Args:
        source: a SQLite file, a ``sqlite:///PATH`` URL or a project JSON export.
        problem: the problem to serve (needed when the database holds several).
        device: refuse a table tuned for another device.
        fallback: what to serve when the table cannot be (see :class:`Dispatcher`).
        **options: the remaining keyword arguments of :class:`Dispatcher`
            (``regime_rates``, ``classifier``, ``initial_regime``, ``confirm``, ``margin``,
            ``alpha``, ``clock``).

    A table that cannot be served (missing, corrupt or empty; another schema version,
    device or problem; a malformed row, a duplicate row) logs one warning naming the file
    and the cause (the row and field for a malformed row), and the dispatcher serves
    ``fallback`` (:attr:`Dispatcher.fallback_reason` says why). The table is data the
    service did not write; its arguments are its own code, so:

    Raises:
        TypeError: an argument of the wrong type (``source`` not a path, ``fallback`` not
            a mapping, a ``confirm`` that is not an integer, …) or an unknown option.
        ValueError: an argument of the right type but a wrong value (``confirm=0``,
            ``margin=1.5``, an empty or non-positive ``regime_rates``, a ``fallback``
            mixing per-operator mappings with parameters).
    """
    check_load(source, problem, device, options)

    def reader(where: str | Path) -> Table:
        return read_table(where, problem=problem, device=device)

    dispatcher = Dispatcher(None, fallback=fallback, reason="not loaded yet", reader=reader, source=source,
                            **options)  # checks the options before the table is read
    dispatcher._load(source)
    return dispatcher


def _by_op(table: Table) -> dict[tuple[str, str], tuple[TableRow, ...]]:
    """``(op, regime) -> rows by bucket`` of a table, built once per table (a table is
    frozen; rows are in bucket order, as :func:`~tuner.runtime.served.read_table` checked)."""
    found = table.__dict__.get("_by_op")
    if found is None:
        grouped: dict[tuple[str, str], list[TableRow]] = {}
        for row in table.rows:
            grouped.setdefault((row.op, row.regime), []).append(row)
        found = {key: tuple(rows) for key, rows in grouped.items()}
        table.__dict__["_by_op"] = found  # (a frozen dataclass: set as its own cached value)
    return found


def _full_shape(row: TableRow, shape: Mapping[str, Any] | None) -> dict[str, Any]:
    """The row's shape with the numeric values ``shape`` gives put over it."""
    full = dict(row.shape or {})
    if shape is not None:
        try:
            full.update({k: v for k, v in shape.items()
                         if k in full and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0})
        except Exception:  # noqa: BLE001 - not a mapping: the row's shape
            pass
    return full


def _row_workspace(row: TableRow, largest: Mapping[str, Any] | None, last: Mapping[str, Any]) -> float:
    """The workspace one row's config needs in its bucket: the stored figure (the
    simulator's, at the tuned largest batch) when ``largest`` is None, else at
    ``largest`` clipped to the bucket's upper edges (0 when the bucket is above it);
    ``last``: each key dimension's last edge, whose buckets also serve larger values."""
    if largest is None or row.family is None or row.sms is None:
        if row.workspace_bytes is None:
            raise ValueError(f"row {row.regime}/{row.op} bucket {row.bucket} has no workspace_bytes")
        return float(row.workspace_bytes)
    shape = _full_shape(row, largest)
    for dim, (low, high) in (row.bucket_bounds or {}).items():
        value = shape.get(dim)
        if value is None:
            continue
        if low is not None and value <= low:
            return 0.0  # the engine never reaches this bucket
        if high != last[dim]:  # (the last edge's buckets also serve larger values)
            shape[dim] = min(value, high)
    return float(requirements(row.family, row.params, shape, sms=row.sms, options=row.family_options,
                              resources=row.resources).workspace_bytes)


def _brief_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {short_repr(str(exc))}"


def _why(exc: Exception, where: str | Path) -> str:
    """An error reading a table in one line naming the file: tuner's own errors name it;
    anything else (a bug here, found by a table nobody foresaw) is named for what it is."""
    if isinstance(exc, TunerError) and str(exc):
        return str(exc)
    return f"{where}: unexpected {type(exc).__name__} reading the table: {short_repr(str(exc))}"
