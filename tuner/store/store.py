"""Open a database through SQLAlchemy, check its tuner schema, read and replace table rows.

A :class:`Store` is one engine on one URL (any SQLAlchemy URL; SQLite by default).
Opening checks, before anything is written: the URL parses and its driver loads, the
database answers, and its ``tuner_schema`` version is :data:`SCHEMA_VERSION`. With
``create=True`` a database without tuner tables gets them; otherwise it is refused.
Every failure is a :class:`StorageError` whose one line names the URL (password hidden).

Writes are whole regimes in one transaction (:meth:`Store.replace_regime`), so a
reader sees a regime's old rows or its new ones, never a mix. The class keeps no
per-call state; sessions are opened per call.

Several workers may write one database (``tuner tune --jobs``, a fleet of ``tuner
worker``). They coordinate through two tables: leases (:meth:`Store.try_lease`), a
mutual exclusion that expires when its holder dies, and the mark that a regime's rows
were written (:meth:`Store.written_key`), committed with the rows. On SQLite a writer
begins every transaction with ``BEGIN IMMEDIATE`` (:func:`serialise_sqlite_writes`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, delete, event, inspect, or_, select, update
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, ProgrammingError, SQLAlchemyError
from sqlalchemy.orm import Session

from ..errors import SchemaMismatchError, StorageError, shortened
from ..readonly_sqlite import SQLITE_HEADER
from .models import SCHEMA_VERSION, CONFIG_TABLES, Base, ConfigEntry, Lease, RegimeWritten, SchemaVersion
from .row import ROW_FIELDS, TableRow
from .version import check_version

DEFAULT_URL = "sqlite:///results.db"

#: Seconds a SQLite writer waits for another process's transaction before it fails.
SQLITE_BUSY_TIMEOUT_S = 300.0
#: Seconds a writer waits for a PostgreSQL server to answer (a dropped route otherwise
#: hangs for the operating system's TCP timeout, minutes).
CONNECT_TIMEOUT_S = 10


def parse_url(url: str) -> URL:
    """The URL, or a :class:`StorageError` saying why it is not a database URL."""
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StorageError(f"{url}: not a database URL ({exc}); expected e.g. {DEFAULT_URL} "
                         "or postgresql://user@host/db") from None


def resolve_url(url: str) -> str:
    """``url`` with a driver that is installed: a bare ``postgresql://`` means psycopg2 to
    SQLAlchemy; when only psycopg 3 is installed, use it instead."""
    parsed = parse_url(url)
    if parsed.drivername == "postgresql" and not _importable("psycopg2") and _importable("psycopg"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def shown(url: URL) -> str:
    """The URL as messages show it: the password hidden, a very long one cut."""
    return shortened(url.render_as_string(hide_password=True))


def writer_engine_kwargs(url: URL) -> dict[str, Any]:
    """Engine options for a process that writes while others may: on SQLite, wait up to
    :data:`SQLITE_BUSY_TIMEOUT_S` for a lock and let :func:`serialise_sqlite_writes`
    issue the BEGIN (pysqlite's own begins late, at the first write); on PostgreSQL, give
    up on a server that does not answer within :data:`CONNECT_TIMEOUT_S`."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None}}
    if backend == "postgresql":
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    return {}


def serialise_sqlite_writes(engine: Engine) -> None:
    """Begin every transaction of a SQLite ``engine`` (made with :func:`writer_engine_kwargs`)
    with ``BEGIN IMMEDIATE``: it takes the write lock before its first read, so two
    processes never both read, then both try to write — the deadlock SQLite answers with
    "database is locked" — and a read-then-write (Optuna claiming a WAITING trial) is
    atomic. Writers queue on the lock instead; other backends are left as they are."""
    if engine.dialect.name == "sqlite":
        event.listen(engine, "begin", lambda connection: connection.exec_driver_sql("BEGIN IMMEDIATE"))


class Store:
    """The tuner tables of one database.

    Args:
        url: a SQLAlchemy URL.
        create: create the database file (SQLite) and the tuner tables when missing;
            when False, a database without them is an error.
        engine_kwargs: passed to :func:`sqlalchemy.create_engine` (the dashboard opens
            connections read-only this way).

    Raises:
        StorageError: bad URL, missing driver, unreachable server, a file that is not a
            database, no tuner tables (``create=False``).
        SchemaMismatchError: the database's tuner schema version differs from the code's.
    """

    def __init__(self, url: str, *, create: bool = False, engine_kwargs: Mapping[str, Any] | None = None) -> None:
        parsed = parse_url(resolve_url(url))
        self.url = shown(parsed)
        if parsed.get_backend_name() == "sqlite":
            _check_sqlite_path(parsed, self.url, create)
            if create:
                check_writable(parsed)
        kwargs = {**writer_engine_kwargs(parsed), **(engine_kwargs or {})} if create else dict(engine_kwargs or {})
        try:
            self.engine: Engine = create_engine(parsed, **kwargs)
        except (NoSuchModuleError, ImportError, ArgumentError) as exc:
            raise StorageError(f"{self.url}: cannot load a database driver for this URL ({_first_line(exc)})") from None
        if create:
            serialise_sqlite_writes(self.engine)
            if parsed.get_backend_name() == "sqlite":
                self._check_intact()
        self._check_schema(create)

    def _check_intact(self) -> None:
        """Refuse to write a damaged SQLite file (zeroed pages, a torn copy): SQLite opened
        one, tuner wrote into it and made it worse. ``PRAGMA quick_check`` reads every page
        once (~30 ms for the 7.7 MB example database)."""
        try:
            with self.engine.connect() as connection:
                found = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check").fetchmany(2)]
            damage = None if found == ["ok"] else f"PRAGMA quick_check: {found[0]}"
        except SQLAlchemyError as exc:
            damage = _first_line(exc)
        if damage is not None:
            raise StorageError(f"{self.url}: the SQLite file is damaged ({damage}); tuner writes nothing to it: "
                               "restore it from a copy, or give --storage another file")

    @contextmanager
    def transaction(self, what: str) -> Iterator[Session]:
        """A session in one transaction (committed at the end of the block, rolled back on
        any error); database errors become one-line StorageErrors saying ``what`` failed."""
        try:
            with Session(self.engine) as session, session.begin():
                yield session
        except StorageError:
            raise
        except SQLAlchemyError as exc:
            raise self._failure(what, exc) from exc

    def _failure(self, what: str, exc: SQLAlchemyError) -> StorageError:
        if is_read_only(exc):
            return read_only_error(self.url, "SQLite: attempt to write a readonly database")
        return StorageError(f"{self.url}: cannot {what}: {_first_line(exc)}")

    def _check_schema(self, create: bool) -> None:
        try:
            tables = set(inspect(self.engine).get_table_names())
        except SQLAlchemyError as exc:
            raise StorageError(f"{self.url}: cannot open the database: {_first_line(exc)}") from exc
        if SchemaVersion.__tablename__ not in tables:
            ours = sorted(t for t in tables if t in {table.name for table in CONFIG_TABLES})
            if ours:
                raise SchemaMismatchError(
                    f"{self.url}: tuner tables {', '.join(ours)} have no {SchemaVersion.__tablename__} version "
                    f"(expected version {SCHEMA_VERSION}); use another database or remove them"
                )
            if not create:
                raise StorageError(f"{self.url}: holds no tuner table (run `tuner tune --storage {self.url}` first)")
            self._create()
            return
        with self.transaction("read the schema version") as session:
            versions = session.scalars(select(SchemaVersion.version)).all()
        if not versions and create:  # another worker is creating the tables: write the version as it would
            self._create()
            return
        check_version(versions[0] if len(versions) == 1 else None, self.url)
        if create:  # tables added to the schema since (other tuner_* tables) — never altered
            self._create_tables()

    def _create_tables(self) -> None:
        for attempt in range(2):
            try:
                Base.metadata.create_all(self.engine, tables=list(CONFIG_TABLES))
                return
            except SQLAlchemyError as exc:
                # another worker created one meanwhile: look again, once
                if attempt == 0 and isinstance(exc, (IntegrityError, ProgrammingError)):
                    continue
                raise self._failure("create the tuner tables", exc) from exc

    def _create(self) -> None:
        self._create_tables()
        try:
            with Session(self.engine) as session, session.begin():
                if session.get(SchemaVersion, 1) is None:
                    session.add(SchemaVersion(id=1, version=SCHEMA_VERSION))
        except IntegrityError:  # another worker wrote it first
            pass
        except SQLAlchemyError as exc:
            raise self._failure("write the schema version", exc) from exc
        self._check_schema(create=False)

    def replace_regime(self, problem: str, regime: str, rows: Sequence[TableRow],
                       written: tuple[str, str, str] | None = None) -> None:
        """Replace every row of (problem, regime) with ``rows``, in one transaction.

        Args:
            written: ``(study_name, key, holder)`` to mark in the same transaction (see
                :meth:`written_key`).
        """
        with self.transaction(f"write the rows of {problem}/{regime}") as session:
            write_regime(session, problem, regime, rows, written)

    def written_key(self, study_name: str) -> str | None:
        """The settings key the rows of ``study_name``'s regime were last written with, if any."""
        with self.transaction("read which regimes are written") as session:
            return session.scalar(select(RegimeWritten.key).where(RegimeWritten.study_name == study_name))

    def written_marks(self, study_names: Iterable[str]) -> dict[str, tuple[str, str, str]]:
        """The written-marks of these studies: ``(study_name, key, holder)`` by study name."""
        names = list(study_names)
        with self.transaction("read which regimes are written") as session:
            return {mark.study_name: (mark.study_name, mark.key, mark.holder)
                    for mark in session.scalars(select(RegimeWritten).where(RegimeWritten.study_name.in_(names)))}

    def try_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Take (or renew) the lease ``name`` for ``seconds`` unless another holder's is
        still running; atomic on every backend (a conditional update, else an insert
        that only one writer can make)."""
        now = time.time()
        with self.transaction(f"take the lease {name}") as session:
            taken = session.execute(
                update(Lease).where(Lease.name == name, or_(Lease.expires_at < now, Lease.holder == holder))
                .values(holder=holder, expires_at=now + seconds)
            ).rowcount
        if taken:
            return True
        try:
            with Session(self.engine) as session, session.begin():
                session.add(Lease(name=name, holder=holder, expires_at=now + seconds))
        except IntegrityError:
            return False
        except SQLAlchemyError as exc:
            raise self._failure(f"take the lease {name}", exc) from exc
        return True

    def release_lease(self, name: str, holder: str) -> None:
        with self.transaction(f"release the lease {name}") as session:
            session.execute(delete(Lease).where(Lease.name == name, Lease.holder == holder))

    def rows(self, problem: str | None = None) -> list[TableRow]:
        """Rows, ordered by problem, then the problem file's order of regimes and operators."""
        query = select(ConfigEntry).order_by(ConfigEntry.problem, ConfigEntry.regime_index, ConfigEntry.regime,
                                             ConfigEntry.op_index, ConfigEntry.op, ConfigEntry.bucket)
        if problem is not None:
            query = query.where(ConfigEntry.problem == problem)
        with self.transaction("read the config table") as session:
            return [TableRow.decode({name: getattr(entry, name) for name in ROW_FIELDS})
                    for entry in session.scalars(query)]

    def problems(self) -> list[str]:
        with self.transaction("read the config table") as session:
            return list(session.scalars(select(ConfigEntry.problem).distinct().order_by(ConfigEntry.problem)))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_regime(session: Session, problem: str, regime: str, rows: Sequence[TableRow],
                 written: tuple[str, str, str] | None = None) -> None:
    """:meth:`Store.replace_regime` inside a caller's transaction (which may write more)."""
    for row in rows:
        if (row.problem, row.regime) != (problem, regime):
            raise ValueError(f"row {row.problem}/{row.regime}/{row.op}/{row.bucket} is not of {problem}/{regime}")
    session.execute(delete(ConfigEntry).where(ConfigEntry.problem == problem, ConfigEntry.regime == regime))
    session.add_all(ConfigEntry(**{name: getattr(row, name) for name in ROW_FIELDS}) for row in rows)
    if written is not None:
        study, key, holder = written
        session.merge(RegimeWritten(study_name=study, key=key, holder=holder, written_at=datetime.now(timezone.utc)))


#: What a read-only database error says a writer of the database does there.
TUNE_WRITES = "tuner tune writes its studies and rows there"


def read_only_error(where: str, why: str, writes: str = TUNE_WRITES) -> StorageError:
    """The one line for a database this process cannot write."""
    return StorageError(f"{where}: read-only database ({why}): {writes}")


def is_read_only(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from: Optuna wraps the driver's) is
    SQLite's refusal to write a read-only database."""
    seen: BaseException | None = exc
    while seen is not None:
        if "readonly database" in str(getattr(seen, "orig", None) or seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def check_writable(url: URL, writes: str = TUNE_WRITES) -> None:
    """Refuse, before anything is written, a SQLite file this process cannot write: the
    file or its directory (where SQLite writes its journal) not writable, or a ``file:``
    URI opened with ``mode=ro``. (Root writes whatever the permissions say; SQLite's own
    refusal is caught where it is raised, :func:`is_read_only`.)"""
    if url.get_backend_name() != "sqlite":
        return
    database = url.database or ""
    if database.startswith("file:") and ("mode=ro" in database or url.query.get("mode") == "ro"):
        raise read_only_error(shown(url), "opened with mode=ro", writes)
    path = sqlite_file(url)
    if path is None:
        return
    if path.is_file() and not os.access(path, os.W_OK):
        raise read_only_error(str(path), "the file is not writable", writes)
    directory = path.parent if str(path.parent) else Path(".")
    if directory.is_dir() and not os.access(directory, os.W_OK):
        raise read_only_error(str(path), f"its directory {directory} is not writable", writes)


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names; None for other backends, in-memory databases and
    ``file:`` URIs (whose options the URI itself carries)."""
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def _check_sqlite_path(url: URL, shown_url: str, create: bool) -> None:
    path = sqlite_file(url)
    if path is None:
        return
    if path.is_dir():
        raise StorageError(f"{shown_url}: {path} is a directory, not a database file")
    if not path.exists():
        if not create:
            raise StorageError(f"{shown_url}: no such database file {path} "
                             f"(run `tuner tune --storage {shown_url}` first)")
        if not path.parent.is_dir():
            raise StorageError(f"{shown_url}: cannot create {path}: no directory {path.parent}")
        return
    with path.open("rb") as file:
        header = file.read(16)
    if header and header != SQLITE_HEADER:
        raise StorageError(f"{shown_url}: {path} is not a SQLite database")


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
