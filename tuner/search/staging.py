"""``tuner tune --fresh``: tune into a scratch database, then swap it in with one transaction.

A fresh run must not lose the studies it replaces until it has succeeded: deleting them
first would leave FAIL and WAITING trials where complete ones had been after a failed
run, and a run of the original problem would then be refused. So a fresh run
tunes the chosen regimes in a scratch SQLite file (one per run, in the system's temporary
directory; its ``--jobs`` helpers share it) that starts with copies of the problem's
other studies (the warm starts read them). Only when every chosen regime's study and
rows are done does :meth:`Staging.publish` replace them in the real database — old
studies deleted, new ones copied, rows and written-marks replaced — in one transaction:
a reader sees the old regime or the new one, and a failure anywhere before or in that
transaction leaves the database byte-identical. The scratch file is deleted either way.

Optuna has no API that copies a study inside a caller's transaction (``copy_study``
commits per trial), so the copy is made on Optuna's tables with SQLAlchemy Core,
generically: every table that refers to ``studies`` or ``trials`` is copied with its
keys renumbered. Heartbeats are not copied (a finished study has none that matter).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import optuna
from sqlalchemy import ColumnElement, Connection, Table, delete, insert, select
from sqlalchemy.engine import Row

from ..problem.model import Problem
from ..store import Store
from ..store.store import write_regime
from .settings import study_name

#: Optuna's tables that are not copied with a study.
_SKIPPED = ("trial_heartbeats",)


@dataclass(frozen=True)
class Staging:
    """A scratch database for one fresh run of ``regimes`` of ``problem``."""

    url: str
    problem: Problem
    regimes: Sequence[str]

    @classmethod
    @contextmanager
    def of(cls, problem: Problem, regimes: Sequence[str], storage: optuna.storages.BaseStorage) -> Iterator[Staging]:
        """The scratch database, holding copies of ``problem``'s other studies in
        ``storage`` (read only); deleted when the block ends."""
        directory = Path(tempfile.mkdtemp(prefix="tuner-fresh-"))
        try:
            staging = cls(f"sqlite:///{directory / 'staging.db'}", problem, list(regimes))
            Store(staging.url, create=True).close()
            scratch = optuna.storages.RDBStorage(staging.url)
            chosen = set(staging.study_names)
            mine = {study_name(problem.name, regime) for regime in problem.regimes} - chosen
            for summary in storage.get_all_studies():
                if summary.study_name in mine:
                    optuna.copy_study(from_study_name=summary.study_name, from_storage=storage, to_storage=scratch)
            scratch.engine.dispose()
            yield staging
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    @property
    def study_names(self) -> list[str]:
        return [study_name(self.problem.name, regime) for regime in self.regimes]

    def publish(self, store: Store) -> None:
        """Replace the chosen regimes' studies, rows and written-marks in ``store`` (the
        database of Optuna's tables too) with the scratch database's, in one transaction."""
        scratch = Store(self.url)
        try:
            rows = scratch.rows(self.problem.name)
            marks = scratch.written_marks(self.study_names)
            with scratch.engine.connect() as source, store.transaction(
                    f"replace the studies of {self.problem.name} ({', '.join(self.regimes)})") as session:
                target = session.connection()
                for regime, name in zip(self.regimes, self.study_names):
                    _delete_study(target, name)
                    _copy_study(source, target, name)
                    write_regime(session, self.problem.name, regime, [r for r in rows if r.regime == regime],
                                 marks.get(name))
        finally:
            scratch.close()


def _tables() -> tuple[Table, Table, list[Table], list[Table]]:
    """Optuna's studies and trials tables, and the tables that refer to each."""
    from optuna.storages._rdb.models import BaseModel

    tables = BaseModel.metadata.tables
    studies, trials = tables["studies"], tables["trials"]
    children = [t for name, t in tables.items() if name not in ("studies", "trials")]
    return (studies, trials, [t for t in children if "study_id" in t.c],
            [t for t in children if "trial_id" in t.c])


def _delete_study(target: Connection, name: str) -> None:
    studies, trials, of_study, of_trial = _tables()
    found = target.scalar(select(studies.c.study_id).where(studies.c.study_name == name))
    if found is None:
        return
    its_trials = select(trials.c.trial_id).where(trials.c.study_id == found)
    for table in of_trial:
        target.execute(delete(table).where(table.c.trial_id.in_(its_trials)))
    target.execute(delete(trials).where(trials.c.study_id == found))
    for table in of_study:
        target.execute(delete(table).where(table.c.study_id == found))
    target.execute(delete(studies).where(studies.c.study_id == found))


def _copy_study(source: Connection, target: Connection, name: str) -> None:
    studies, trials, of_study, of_trial = _tables()
    old = source.execute(select(studies).where(studies.c.study_name == name)).one()
    new_id = target.execute(insert(studies).values(_fields(old, studies))).inserted_primary_key[0]
    for table in of_study:
        _copy_rows(source, target, table, table.c.study_id == old.study_id, {"study_id": new_id})
    for trial in source.execute(select(trials).where(trials.c.study_id == old.study_id).order_by(trials.c.number)):
        values = {**_fields(trial, trials), "study_id": new_id}
        trial_id = target.execute(insert(trials).values(values)).inserted_primary_key[0]
        for table in (t for t in of_trial if t.name not in _SKIPPED):
            _copy_rows(source, target, table, table.c.trial_id == trial.trial_id, {"trial_id": trial_id})


def _copy_rows(source: Connection, target: Connection, table: Table, where: ColumnElement[bool],
               renumbered: dict[str, int]) -> None:
    rows = [{**_fields(row, table), **renumbered} for row in source.execute(select(table).where(where))]
    if rows:
        target.execute(insert(table), rows)


def _fields(row: Row, table: Table) -> dict:
    """The row's columns but its own key (the target numbers it)."""
    keys = {column.name for column in table.primary_key.columns}
    return {name: value for name, value in row._mapping.items() if name not in keys}
