"""Measured profiles: isolated latencies timed on a real GPU, which win over the model.

``tuner profile PROBLEM --device cuda`` times every legal config of every operator at the
problem's probe shapes with ``triton.testing.do_bench`` (CUDA events, warm-up, median)
and records the workspace the allocator saw. The rows live in ``tuner_measured`` beside
the compile cache. A modeled profile that has measurements for its config on the same
GPU uses them: the measured time at a measured shape, and elsewhere the model scaled by
the measured/modeled ratio at the nearest measured shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import DateTime, Float, Integer, String, Text, UniqueConstraint, create_engine, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Mapped, Session, mapped_column

from ..errors import StorageError
from ..store.models import Base


class MeasuredRecord(Base):
    """One (family, options, config, shape, GPU, Triton version) timing."""

    __tablename__ = "tuner_measured"
    __table_args__ = (UniqueConstraint("family", "options_json", "config_json", "shape_json", "gpu",
                                       "triton_version", name="uq_tuner_measured"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family: Mapped[str] = mapped_column(String(64))
    options_json: Mapped[str] = mapped_column(Text)
    config_json: Mapped[str] = mapped_column(Text)
    shape_json: Mapped[str] = mapped_column(Text)
    gpu: Mapped[str] = mapped_column(String(128))
    device_preset: Mapped[str] = mapped_column(String(32))
    triton_version: Mapped[str] = mapped_column(String(32))
    source_hash: Mapped[str] = mapped_column(String(128))
    latency_s: Mapped[float] = mapped_column(Float)
    workspace_bytes: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def family_options(family: Any) -> dict[str, Any]:
    """The options a family instance was built with (its instance attributes)."""
    return {k: v for k, v in vars(family).items() if not k.startswith("_")}


def canonical(mapping: Mapping[str, Any]) -> str:
    """A mapping as JSON with sorted keys: the key a measurement is stored and found by."""
    return json.dumps(dict(mapping), sort_keys=True)


class MeasuredStore:
    """Reads and writes ``tuner_measured``.

    Raises:
        StorageError: the database cannot be opened or fails.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Any = None

    def _connect(self, create: bool) -> Any:
        """The engine, opened on first use; None when reading a database that has no
        measurements (reading never creates a file or a table)."""
        if self._engine is None:
            try:
                parsed = make_url(self.url)
                if not create and parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
                        and not Path(parsed.database).exists():
                    return None
                engine = create_engine(self.url)
                if create:
                    Base.metadata.create_all(engine, tables=[MeasuredRecord.__table__])
                elif not inspect(engine).has_table(MeasuredRecord.__tablename__):
                    return None
                self._engine = engine
            except (SQLAlchemyError, ImportError, ValueError) as exc:
                raise StorageError(f"cannot open measured profiles at {self.url}: {str(exc).splitlines()[0]}") from exc
        return self._engine

    def record(self, *, family: str, options: Mapping[str, Any], config: Mapping[str, Any],
               shape: Mapping[str, int], gpu: str, device_preset: str, triton_version: str,
               source_hash: str, latency_s: float, workspace_bytes: float) -> None:
        """Store one timing, replacing an older one with the same key."""
        key = dict(family=family, options_json=canonical(options), config_json=canonical(config),
                   shape_json=canonical(shape), gpu=gpu, triton_version=triton_version)
        engine = self._connect(create=True)
        try:
            with Session(engine) as session, session.begin():
                row = session.scalars(select(MeasuredRecord).filter_by(**key)).first()
                if row is None:
                    row = MeasuredRecord(**key)
                    session.add(row)
                row.device_preset, row.source_hash = device_preset, source_hash
                row.latency_s, row.workspace_bytes = latency_s, workspace_bytes
                row.created_at = datetime.now(timezone.utc)
        except SQLAlchemyError as exc:
            raise StorageError(f"measured profiles at {self.url}: {str(exc).splitlines()[0]}") from exc

    def latencies(self, family: str, options: Mapping[str, Any], config: Mapping[str, Any],
                  device_preset: str, triton_version: str) -> dict[tuple[tuple[str, int], ...], float]:
        """Measured latency by shape for one config on GPUs of ``device_preset``'s kind."""
        engine = self._connect(create=False)
        if engine is None:
            return {}
        try:
            with Session(engine) as session:
                rows = session.scalars(select(MeasuredRecord).filter_by(
                    family=family, options_json=canonical(options), config_json=canonical(config),
                    device_preset=device_preset, triton_version=triton_version)).all()
        except SQLAlchemyError as exc:
            raise StorageError(f"measured profiles at {self.url}: {str(exc).splitlines()[0]}") from exc
        return {tuple(sorted(json.loads(r.shape_json).items())): r.latency_s for r in rows}


class MeasuredStores:
    """Measured latencies read from several databases, the first that has a config's
    winning: a tune's own database, then the user's cache directory, where ``tuner
    profile --device cuda`` measures when no ``--storage`` names a database."""

    def __init__(self, stores: Sequence[MeasuredStore]) -> None:
        self.stores = tuple(stores)

    def latencies(self, family: str, options: Mapping[str, Any], config: Mapping[str, Any],
                  device_preset: str, triton_version: str) -> dict[tuple[tuple[str, int], ...], float]:
        """:meth:`MeasuredStore.latencies` of the first store that has any."""
        for store in self.stores:
            found = store.latencies(family, options, config, device_preset, triton_version)
            if found:
                return found
        return {}
