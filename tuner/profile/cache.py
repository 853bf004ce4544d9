"""A persistent cache of compiled resources: compile each launch once per architecture.

Compiling a config takes 0.3 s to several seconds; a study profiles hundreds. The cache
stores what a compile for an *architecture* tells (:class:`~tuner.profile.compiled.ArchUsage`)
in the table ``tuner_compiled`` of any SQLAlchemy database (the project's tables all
start with ``tuner_`` so they can live beside Optuna's), and recomputes the *device's*
occupancy from the stored numbers on every lookup: H100 and H200 share one sm_90 row.

The key is everything the binary depends on (:class:`CompileKey`):

* the kernel's source hash: Triton's own ``JITFunction.cache_key``, a SHA-256 over the
  kernel's source, the sources of the ``@triton.jit`` functions it calls (transitively),
  the ``constexpr`` globals it reads, and its first line number. The line number makes
  the key stricter than needed (moving a kernel within its file recompiles it), never
  looser, and reusing Triton's walk of the call graph beats keeping a copy of it here;
* the launch name;
* the compile configuration as canonical JSON: signature (argument types), constexprs,
  ``num_warps``, ``num_stages``, the argument hints (``tt.divisibility``) and the
  compile options the JIT would use (FP fusion);
* the architecture and the Triton version (which pins the bundled ptxas).

A failed compile is cached too, with its reason: an illegal config stays illegal.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import json
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (DateTime, Float, Integer, String, Text, UniqueConstraint, create_engine, func, insert, inspect,
                        select, tuple_)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Mapped, Session, mapped_column

from tuner.errors import StorageError
from tuner.processes import spawn_pool, stop_pool
from tuner.readonly_sqlite import read_only_connect
from tuner.store.models import Base
from tuner.store.store import serialise_sqlite_writes, writer_engine_kwargs
from tuner.kernels.family import KernelLaunch
from tuner.profile import compiled as _compiled
from tuner.profile.devices import DevicePreset
from tuner.profile.resources import CompiledResources

CompileProgress = Callable[[int, int], None]


class CompiledRecord(Base):
    """One compile of one launch for one architecture (a row of ``tuner_compiled``)."""

    __tablename__ = "tuner_compiled"
    __table_args__ = (
        UniqueConstraint("source_hash", "launch_name", "config_hash", "arch", "triton_version",
                         name="uq_tuner_compiled_key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source_hash: Mapped[str] = mapped_column(String(64), index=True)
    launch_name: Mapped[str] = mapped_column(String(200))
    config_hash: Mapped[str] = mapped_column(String(64))
    config_json: Mapped[str] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(String(16))
    triton_version: Mapped[str] = mapped_column(String(32))
    smem_bytes: Mapped[int] = mapped_column(Integer)
    regs_per_thread: Mapped[int] = mapped_column(Integer)
    spill_bytes: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    compile_seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclasses.dataclass(frozen=True)
class CompileKey:
    """What a compiled binary depends on; ``config_json`` is canonical (sorted, compact)."""

    source_hash: str
    launch_name: str
    config_json: str
    arch: str
    triton_version: str

    @property
    def config_hash(self) -> str:
        return hashlib.sha256(self.config_json.encode()).hexdigest()

    @property
    def columns(self) -> tuple[str, str, str, str, str]:
        """The values of the table's unique key (:data:`_KEY_COLUMNS`), in its order."""
        return (self.source_hash, self.launch_name, self.config_hash, self.arch, self.triton_version)


# The unique constraint's columns: a lookup by all of them is one probe of its index.
_KEY_COLUMNS = (CompiledRecord.source_hash, CompiledRecord.launch_name, CompiledRecord.config_hash,
                CompiledRecord.arch, CompiledRecord.triton_version)
_USAGE_COLUMNS = (CompiledRecord.arch, CompiledRecord.smem_bytes, CompiledRecord.regs_per_thread,
                  CompiledRecord.spill_bytes, CompiledRecord.error, CompiledRecord.compile_seconds)
# Keys per query: 5 bound parameters each, under SQLite's oldest limit of 999.
_KEYS_PER_QUERY = 150


def _jit_function(fn: Any) -> Any:
    """The ``JITFunction`` under ``fn`` (autotuner and heuristics wrappers keep it in ``.fn``)."""
    while not hasattr(fn, "cache_key") and hasattr(fn, "fn"):
        fn = fn.fn
    if not hasattr(fn, "cache_key"):
        raise TypeError(f"{fn!r} is not a @triton.jit function")
    return fn


def kernel_source_hash(fn: Any) -> str:
    """SHA-256 of a kernel's source and of the jit functions and constexpr globals it uses."""
    return _jit_function(fn).cache_key


def config_json(launch: KernelLaunch) -> str:
    """The compile configuration of ``launch`` as canonical JSON."""
    attrs = _compiled.ast_source(launch).attrs
    document = {
        "signature": [list(pair) for pair in launch.signature],
        "constexprs": {name: value for name, value in launch.constexprs},
        "num_warps": launch.num_warps,
        "num_stages": launch.num_stages,
        "attrs": sorted([list(index), value] for index, value in attrs.items()),
        "options": {k: v for k, v in _compiled.compile_options(launch).items()
                    if k not in ("num_warps", "num_stages")},
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)


def compile_key(launch: KernelLaunch, arch: str) -> CompileKey:
    """The cache key of compiling ``launch`` for ``arch`` (``"sm_90"``)."""
    import triton

    return CompileKey(kernel_source_hash(launch.fn), launch.name, config_json(launch), arch, triton.__version__)


def _usage(row: Sequence[Any]) -> _compiled.ArchUsage:
    """The usage in a row selected as ``(*_KEY_COLUMNS, *_USAGE_COLUMNS)``."""
    arch, smem_bytes, regs_per_thread, spill_bytes, error, compile_seconds = row[len(_KEY_COLUMNS):]
    return _compiled.ArchUsage(arch=arch, smem_bytes=smem_bytes, regs_per_thread=regs_per_thread,
                               spill_bytes=spill_bytes, error=error, compile_seconds=compile_seconds)


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 — an unparsable URL is shown as given
        return repr(url)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


#: Copies from the fallback written per transaction (see CompileCache._copied).
COPY_BATCH = 256


def _flush_at_exit(cache: CompileCache) -> None:
    """Write ``cache``'s pending copies when the process exits (once per cache); a
    database gone by then only loses copies, so its error is not shown."""
    if getattr(cache, "_flush_registered", False):
        return
    cache._flush_registered = True

    def flush() -> None:
        with contextlib.suppress(StorageError):
            cache.flush()

    atexit.register(flush)


class CompileCache:
    """Compiled resources of launches, compiled once per (key, architecture) and stored.

    Lifecycle: the constructor connects and creates ``tuner_compiled`` if missing;
    :meth:`close` (or leaving a ``with`` block) releases the connections. Each call opens
    its own session, so one cache may serve several threads, and several processes or
    machines may share one database: when two compile the same key at once, the first
    row stored wins and the other's result is discarded.

    Raises:
        StorageError: from the constructor, when ``url`` is not a database URL, its
            driver is not installed or the database cannot be reached; from any method,
            when the database fails.
    """

    def __init__(self, url: str = "sqlite:///results.db", fallback: CompileCache | None = None) -> None:
        self.url = url
        self.fallback = fallback
        self._writable = True
        self._memo: dict[CompileKey, _compiled.ArchUsage] = {}
        self._copies: dict[CompileKey, _compiled.ArchUsage] = {}  # from the fallback, not yet written
        self._keys: set[tuple[str, ...]] | None = None  # the keys stored here, once read
        self._copy_lock = threading.RLock()  # one cache may serve several threads
        self._rows: dict[tuple[str, ...], _compiled.ArchUsage] | None = None  # the whole table, if prefetched
        try:
            self._engine = create_engine(url, **writer_engine_kwargs(make_url(url)))
            serialise_sqlite_writes(self._engine)  # several workers (tuner tune --jobs) may write it
            try:
                Base.metadata.create_all(self._engine, tables=[CompiledRecord.__table__])
            except SQLAlchemyError:  # another process created the table between check and create
                Base.metadata.create_all(self._engine, tables=[CompiledRecord.__table__])
        except (SQLAlchemyError, ImportError, ValueError) as e:
            raise StorageError(
                f"cannot open the compile cache at {_shown(url)}: {_first_line(e)}; give a reachable "
                f"SQLAlchemy database URL, e.g. sqlite:///results.db or postgresql+psycopg://user@host/db"
            ) from e

    @classmethod
    def read_only(cls, path: Path, fallback: CompileCache | None = None, *, prefetch: bool = False) -> CompileCache:
        """A cache that is only read (the committed ``results.db.example``, a database a
        dashboard shows): nothing is created or stored in it, a file without a compile
        cache answers nothing, and what is compiled on a miss is kept in memory only.

        With ``prefetch`` the whole table is read into memory now, in one query, and the
        file is not read again: for a file nobody writes (the committed example, a few
        hundred rows), where one query per process beats one per launch.
        """
        cache = cls.__new__(cls)
        cache.url, cache.fallback, cache._memo, cache._writable = f"sqlite:///{path}", fallback, {}, False
        cache._engine, cache._rows, cache._copies, cache._keys = None, None, {}, None
        cache._copy_lock = threading.RLock()
        if path.is_file():
            engine = create_engine("sqlite://", creator=read_only_connect(path))
            try:
                if inspect(engine).has_table(CompiledRecord.__tablename__):
                    cache._engine = engine
            except SQLAlchemyError:
                pass
        if prefetch:
            cache._rows = {}
            if cache._engine is not None:
                with cache._session() as session:
                    cache._rows = {tuple(row[:len(_KEY_COLUMNS)]): _usage(row)
                                   for row in session.execute(select(*_KEY_COLUMNS, *_USAGE_COLUMNS))}
                cache._engine.dispose()
                cache._engine = None
        return cache

    def close(self) -> None:
        """Write what is pending and release the database connections."""
        try:
            self.flush()
        finally:
            if self._engine is not None:
                self._engine.dispose()

    def flush(self) -> None:
        """Write the copies taken from the fallback since the last flush, in one transaction."""
        with self._copy_lock:
            copies, self._copies = self._copies, {}
            self._store_many(copies)
            if self._keys is not None:
                self._keys.update(key.columns for key in copies)

    def _copied(self, key: CompileKey, usage: _compiled.ArchUsage) -> _compiled.ArchUsage:
        """A record found in the fallback, written here with the next batch (every
        :data:`COPY_BATCH` keys, at :meth:`close` or when the process exits): a fresh
        database takes one commit per batch, not one per key (a tune copies about 600 keys:
        one commit each cost it 3 s). A copy lost to a crash is copied again by the next run."""
        if self._writable and key.columns not in self._stored_keys():
            with self._copy_lock:
                if not self._copies:
                    _flush_at_exit(self)
                self._copies[key] = usage
                full = len(self._copies) >= COPY_BATCH
            if full:
                self.flush()
        return usage

    def _stored_keys(self) -> Collection[tuple[str, ...]]:
        """The keys this database holds, read once (key columns only), so that a copy it
        already has is not written again; a key another process stores meanwhile makes
        that batch's insert conflict, and then its rows go one by one."""
        if self._rows is not None:  # prefetched: the rows are the keys
            return self._rows.keys()
        if self._keys is None:
            if self._engine is None:  # a read-only file without a compile cache
                return set()
            with self._session() as session:
                self._keys = {tuple(row) for row in session.execute(select(*_KEY_COLUMNS))}
        return self._keys

    def __enter__(self) -> CompileCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _session(self) -> Iterator[Session]:
        try:
            with Session(self._engine) as session, session.begin():
                yield session
        except SQLAlchemyError as e:
            raise StorageError(f"compile cache at {_shown(self.url)} failed: {_first_line(e)}") from e

    def get_or_compile(self, launch: KernelLaunch, device: DevicePreset) -> CompiledResources:
        """The compiled resources of ``launch`` on ``device``, compiling only on a miss.

        Never raises for a bad config: one that does not compile comes back with
        ``ctas_per_sm`` 0 and the compiler's reason.
        """
        key = compile_key(launch, device.arch)
        usage = self._memo.get(key)
        # This database first, as always; but a key it does not hold (every key, on a fresh
        # one) is looked up in the fallback's memory without a query.
        if usage is None and (self.fallback is None or key.columns in self._stored_keys()):
            usage = self._lookup([key]).get(key)
        if usage is None and self.fallback is not None:
            known = self.fallback._lookup([key]).get(key)
            usage = self._copied(key, known) if known is not None else None
            if usage is None:  # perhaps stored by another process since the keys were read
                usage = self._lookup([key]).get(key)
        if usage is None:
            usage = self._store(key, _compiled.compile_usage(launch, device.compute_capability))
        self._memo[key] = usage
        return _compiled.on_device(usage, device, launch.num_warps)

    def warm(
        self,
        launches: Iterable[KernelLaunch],
        device: DevicePreset,
        progress: CompileProgress | None = None,
        workers: int = 1,
    ) -> list[CompiledResources]:
        """Make sure every launch is compiled for ``device``'s architecture.

        Launches with the same key compile once. With ``workers`` > 1 the misses compile
        in a pool of that many processes (compiling is CPU-bound); a kernel the workers
        cannot import by module and name (one defined inside a function) compiles here.

        Args:
            launches: the launches, in any order, duplicates allowed.
            device: the device whose architecture to compile for and whose limits apply.
            progress: called as ``progress(done, total)`` over distinct keys: once after
                the cached ones are found, then after each compile.
            workers: processes compiling at once, at least 1.

        Returns:
            The resources of each launch, in the order given.
        """
        if workers < 1:
            raise ValueError(f"workers must be at least 1 but got {workers}.")
        launches = list(launches)
        keys = [compile_key(launch, device.arch) for launch in launches]
        first: dict[CompileKey, KernelLaunch] = {}
        for key, launch in zip(keys, launches):
            first.setdefault(key, launch)
        usages = {key: usage for key, usage in self._memo.items() if key in first}
        usages.update(self._lookup([key for key in first if key not in usages]))
        if self.fallback is not None:
            usages.update(self._store_many(self.fallback._lookup([key for key in first if key not in usages])))
        missing = [key for key in first if key not in usages]
        total, finished = len(first), len(first) - len(missing)
        if progress is not None:
            progress(finished, total)

        def done(key: CompileKey, usage: _compiled.ArchUsage) -> None:
            nonlocal finished
            usages[key] = self._store(key, usage)
            finished += 1
            if progress is not None:
                progress(finished, total)

        cc = device.compute_capability
        references = {key: _reference(first[key].fn) for key in missing} if workers > 1 else {}
        pooled = {key for key in missing if references.get(key) is not None}
        if len(pooled) < 2:
            pooled = set()
        with contextlib.ExitStack() as stack:
            futures: dict[Future[_compiled.ArchUsage], CompileKey] = {}
            if pooled:
                pool = spawn_pool(min(workers, len(pooled)))
                stack.callback(stop_pool, pool)
                for key in missing:
                    if key in pooled:
                        portable = dataclasses.replace(first[key], fn=None)
                        futures[pool.submit(_compile_by_reference, references[key], portable, cc)] = key
            for key in missing:
                if key not in pooled:
                    done(key, _compiled.compile_usage(first[key], cc))
            for future in as_completed(futures):
                done(futures[future], future.result())
        self._memo.update(usages)
        return [_compiled.on_device(usages[key], device, launch.num_warps) for key, launch in zip(keys, launches)]

    def typical_compile_seconds(self) -> float | None:
        """The mean time one compile that succeeded took, over what this cache stores (else
        its fallback): what a first-use compile is estimated at before any has run here.
        None when neither stores one."""
        if self._rows is not None:
            times = [usage.compile_seconds for usage in self._rows.values() if usage.error is None]
            mean = sum(times) / len(times) if times else None
        elif self._engine is not None:
            with self._session() as session:
                mean = session.execute(select(func.avg(CompiledRecord.compile_seconds))
                                       .where(CompiledRecord.error.is_(None))).scalar()
        else:
            mean = None
        if mean is None and self.fallback is not None:
            return self.fallback.typical_compile_seconds()
        return None if mean is None else float(mean)

    def _lookup(self, keys: list[CompileKey]) -> dict[CompileKey, _compiled.ArchUsage]:
        """The stored usage of those ``keys`` that are stored, matched on the whole key, so
        each key reads its own row (one probe of the unique index), not its kernel's."""
        if self._rows is not None:
            return {key: self._rows[key.columns] for key in keys if key.columns in self._rows}
        if not keys or self._engine is None:
            return {}
        by_columns = {key.columns: key for key in keys}
        wanted = list(by_columns)
        found: dict[CompileKey, _compiled.ArchUsage] = {}
        with self._session() as session:
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                rows = session.execute(select(*_KEY_COLUMNS, *_USAGE_COLUMNS).where(
                    tuple_(*_KEY_COLUMNS).in_(wanted[start:start + _KEYS_PER_QUERY])))
                for row in rows:
                    found[by_columns[tuple(row[:len(_KEY_COLUMNS)])]] = _usage(row)
        return found

    def _store(self, key: CompileKey, usage: _compiled.ArchUsage) -> _compiled.ArchUsage:
        """Store ``usage`` under ``key``; if another writer got there first, theirs."""
        return self._store_many({key: usage})[key]

    def _store_many(self, usages: dict[CompileKey, _compiled.ArchUsage]) -> dict[CompileKey, _compiled.ArchUsage]:
        """Store all of ``usages`` in one transaction (one commit, not one per row); where
        another writer got there first, theirs. Returns what is stored under each key."""
        if not self._writable or not usages:
            return dict(usages)
        now = datetime.now(timezone.utc)
        records = [
            {"source_hash": key.source_hash, "launch_name": key.launch_name, "config_hash": key.config_hash,
             "config_json": key.config_json, "arch": key.arch, "triton_version": key.triton_version,
             "smem_bytes": usage.smem_bytes, "regs_per_thread": usage.regs_per_thread,
             "spill_bytes": usage.spill_bytes, "error": usage.error, "compile_seconds": usage.compile_seconds,
             "created_at": now}
            for key, usage in usages.items()
        ]
        try:
            with Session(self._engine) as session, session.begin():
                session.execute(insert(CompiledRecord), records)
        except IntegrityError:
            if len(usages) > 1:  # some were stored meanwhile: store the others one by one
                return {key: self._store(key, usage) for key, usage in usages.items()}
            ((key, usage),) = usages.items()
            return {key: self._lookup([key]).get(key, usage)}
        except SQLAlchemyError as e:
            raise StorageError(f"compile cache at {_shown(self.url)} failed: {_first_line(e)}") from e
        return dict(usages)


def _reference(fn: Any) -> tuple[str, str] | None:
    """``(module, name)`` that imports back to ``fn`` in a fresh process, or None."""
    import importlib

    python_fn = getattr(_jit_function(fn), "fn", None)
    module, name = getattr(python_fn, "__module__", None), getattr(python_fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        return None
    try:
        target: Any = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return (module, name) if target is fn else None


def _compile_by_reference(reference: tuple[str, str], launch: KernelLaunch, cc: int) -> _compiled.ArchUsage:
    """Worker side of :meth:`CompileCache.warm`: import the kernel, then compile."""
    import importlib

    module, name = reference
    fn: Any = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    return _compiled.compile_usage(dataclasses.replace(launch, fn=fn), cc)


@functools.cache
def example_fallback() -> CompileCache:
    """The committed ``results.db.example``'s compile cache, read into memory once per
    process and shared by every cache that falls back on it."""
    from tuner.bundled import EXAMPLE_DATABASE

    return CompileCache.read_only(EXAMPLE_DATABASE, prefetch=True)


@functools.lru_cache(maxsize=16)
def viewing_resources(url: str) -> CompileCache:
    """Where simulations of a database's problems that only view it (the dashboard's) get
    compiled kernel resources, writing nowhere: the database's own compile cache (a SQLite
    file; other databases are not read for it), then the committed ``results.db.example``'s;
    a launch in neither compiles and is kept in memory. One per URL and process, shared by
    every problem.

    (Loading a problem as ``tuner tune`` does would copy cache entries into
    ``results.db``, creating it, and the next dashboard would then open that file.)
    """
    from tuner.bundled import EXAMPLE_DATABASE
    from tuner.store.store import parse_url, resolve_url, sqlite_file

    example = CompileCache.read_only(EXAMPLE_DATABASE)
    path = sqlite_file(parse_url(resolve_url(url)))
    if path is None or path.resolve() == EXAMPLE_DATABASE:
        return example
    return CompileCache.read_only(path.resolve(), fallback=example)
