"""The SQL schema of tuner's tables (SQLAlchemy 2 declarative models).

Every tuner table is named ``tuner_*`` and registered on :class:`Base`, so they can
share a database with Optuna's tables (which we never touch; Optuna owns
``alembic_version``) and with each other. ``tuner_schema`` holds one row, the integer
version of this schema; a database at another version is refused, never migrated in
place. A new tuner table (a compile cache, say) registers on :class:`Base` and bumps
:data:`SCHEMA_VERSION` when it changes an existing table; :class:`Lease` and
:class:`RegimeWritten` were added that way (a writer creates them where missing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .version import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Base", "ConfigEntry", "Lease", "RegimeWritten", "SchemaVersion", "CONFIG_TABLES"]


class Base(DeclarativeBase):
    """Declarative base of every ``tuner_*`` table: the config table's (here), the compile
    cache's (:mod:`tuner.profile.cache`) and the measurements' (:mod:`tuner.profile.measured`).
    Each owner creates its own tables (``create_all(tables=...)``): a database may hold a
    compile cache and no config table."""


class SchemaVersion(Base):
    """One row (``id`` = 1): the schema version of the tuner tables in this database."""

    __tablename__ = "tuner_schema"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)


class ConfigEntry(Base):
    """One row of the config table: (problem, regime, operator, bucket) → config, with
    provenance (the fields of :class:`~tuner.store.row.TableRow`).

    ``goodput_rps`` and ``goodput_ci_rps`` describe the whole joint assignment of the
    regime (every row of a regime carries the same figures), as do the baselines'.
    ``regime_index`` and ``op_index`` keep the problem file's order.
    """

    __tablename__ = "tuner_configs"

    problem: Mapped[str] = mapped_column(String(200), primary_key=True)
    regime: Mapped[str] = mapped_column(String(200), primary_key=True)
    op: Mapped[str] = mapped_column(String(200), primary_key=True)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket_bounds: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    regime_index: Mapped[int] = mapped_column(Integer, nullable=False)
    op_index: Mapped[int] = mapped_column(Integer, nullable=False)
    config: Mapped[str] = mapped_column(String(500), nullable=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    shape: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    device: Mapped[str] = mapped_column(String(200), nullable=False)
    source: Mapped[str] = mapped_column(String(20), nullable=False)
    triton_version: Mapped[str | None] = mapped_column(String(50), nullable=True)
    kernel_source_hash: Mapped[str | None] = mapped_column(String(128), nullable=True)
    problem_hash: Mapped[str] = mapped_column(String(128), nullable=False)
    study_name: Mapped[str] = mapped_column(String(500), nullable=False)
    trial_number: Mapped[int] = mapped_column(Integer, nullable=False)
    seeds: Mapped[int] = mapped_column(Integer, nullable=False)
    horizon_s: Mapped[float] = mapped_column(Float, nullable=False)
    goodput_rps: Mapped[float] = mapped_column(Float, nullable=False)
    goodput_ci_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_config: Mapped[str] = mapped_column(String(500), nullable=False)
    baseline_goodput_rps: Mapped[float] = mapped_column(Float, nullable=False)
    delta_ci_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    one_config_goodput_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    oracle_goodput_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    regime_rate_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    realized_rates_rps: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
    warmup_s: Mapped[float] = mapped_column(Float, nullable=False)
    overloaded_seeds: Mapped[int] = mapped_column(Integer, nullable=False)
    baseline_overloaded_seeds: Mapped[int] = mapped_column(Integer, nullable=False)
    objective: Mapped[str] = mapped_column(String(20), nullable=False)
    attainment_target: Mapped[float] = mapped_column(Float, nullable=False)
    capacity_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    capacity_ci_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    baseline_capacity_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    capacity_delta_ci_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    one_config_capacity_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    family: Mapped[str | None] = mapped_column(String(200), nullable=True)
    family_options: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    sms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    workspace_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    resources: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    guard: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    engine_args: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class Lease(Base):
    """A named mutual exclusion between workers that share the database, held until
    ``expires_at`` (seconds since the epoch on the holder's clock) unless renewed, so a
    worker that dies holding it blocks the others for at most one lease."""

    __tablename__ = "tuner_leases"

    name: Mapped[str] = mapped_column(String(500), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), nullable=False)
    expires_at: Mapped[float] = mapped_column(Float, nullable=False)


class RegimeWritten(Base):
    """That a regime's rows were written from its study: which study, how many finished
    trials, with which settings (``key``). Written in the same transaction as the rows,
    so a worker that finds it knows the rows are whole and skips the regime."""

    __tablename__ = "tuner_regimes_written"

    study_name: Mapped[str] = mapped_column(String(500), primary_key=True)
    key: Mapped[str] = mapped_column(String(500), nullable=False)
    holder: Mapped[str] = mapped_column(String(200), nullable=False)
    written_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


#: The config table's own tables: what a store checks the version of and creates (the
#: compile cache's and the measurements' share :class:`Base` and are their owners' business).
CONFIG_TABLES = tuple(model.__table__ for model in (SchemaVersion, ConfigEntry, Lease, RegimeWritten))
