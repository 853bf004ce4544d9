"""Many workers on one problem's studies: who each worker is, heartbeats and leases.

A worker is any process that runs :func:`tuner.search.tune_problem` against a storage:
``tuner tune`` itself, each process of ``tuner tune --jobs J``, each ``tuner worker`` on
any machine. They share nothing but the database, and three rules keep the studies and
the table exact however many there are and whichever of them dies:

* **Heartbeats** (Optuna's): a running trial's worker records a heartbeat every
  :attr:`Worker.heartbeat_s`; a trial silent for :attr:`Worker.grace_s` is marked FAIL by
  the next worker to look, and Optuna's retry callback enqueues it again (the same point,
  up to :data:`MAX_RETRY` times).
* **A start lease per study** (:class:`LeaseGate`): a worker counts the study's finished
  and running trials and starts one only while they are below the budget, holding the
  study's lease (a row in ``tuner_leases``) from the count until the trial exists — so
  together the workers finish exactly the budget, never more. Warm starts are enqueued
  under it too, and Optuna hands each WAITING trial to one worker only.
* **A rows lease per regime** (:func:`held`): whichever worker finds a study complete
  takes its regime's lease, computes baselines, capacities and the oracle, and writes the
  rows and the mark that they are written (``tuner_regimes_written``) in one transaction.
  A worker that finds the mark skips the regime; one that finds the lease taken comes
  back to it after its other regimes, and writes it only if the holder died first.

A lease expires :data:`START_LEASE_S` (or, renewed while held, :data:`ROWS_LEASE_S`)
after its holder's last word, measured on the workers' clocks: keep a fleet's clocks
within seconds of each other (NTP).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import TunerError
from ..store import Store
from .. import interrupts
from .trial_record import TrialRecord

if TYPE_CHECKING:
    import optuna

#: Times a trial whose worker died is enqueued again.
MAX_RETRY = 3
#: Seconds a study's start lease lasts (it is held for milliseconds: count, then create a trial).
START_LEASE_S = 30.0
#: Seconds a regime's rows lease lasts without renewal (renewed every quarter of it).
ROWS_LEASE_S = 60.0
#: Seconds between tries of a taken lease (drawn uniformly, so waiting workers spread out).
LEASE_POLL_S = (0.01, 0.05)
#: Seconds between looks while other workers' running trials fill the budget.
BUDGET_POLL_S = (0.2, 0.5)


@dataclass(frozen=True)
class Worker:
    """Who runs trials.

    Attributes:
        id: recorded on each trial as the user attribute ``worker`` (``host:pid``).
        salt: mixed into the sampler's seed ("" for a run's first process: the same seed
            gives the same table; other workers propose other points).
        writes_rows: whether this worker writes regimes' rows (the helper processes of
            ``--jobs`` only run trials; their parent writes).
        heartbeat_s: seconds between a running trial's heartbeats.
    """

    id: str
    salt: str = ""
    writes_rows: bool = True
    heartbeat_s: int = 5

    @classmethod
    def here(cls, salt: str = "", *, writes_rows: bool = True, heartbeat_s: int = 5) -> Worker:
        if heartbeat_s < 1:
            raise TunerError(f"--heartbeat must be at least 1 second but got {heartbeat_s}")
        return cls(worker_id(os.getpid()), salt, writes_rows, heartbeat_s)

    @property
    def grace_s(self) -> int:
        """Seconds without a heartbeat after which a running trial counts as dead."""
        return 4 * self.heartbeat_s


def worker_id(pid: int) -> str:
    """The id of the worker process ``pid`` on this machine (``host:pid``)."""
    return f"{socket.gethostname()}:{pid}"


def fail_running(storage: optuna.storages.BaseStorage, study_names: Collection[str],
                 workers: Collection[str]) -> int:
    """Mark FAIL the trials still RUNNING in ``study_names`` whose worker is one of
    ``workers`` (processes known to have stopped); returns how many.

    Optuna marks a trial FAIL when its objective raises; an error in Optuna's own
    bookkeeping (a database failing while the result is told), or a helper stopped by
    force, leaves it RUNNING until its heartbeat went stale. Best effort: a database that
    fails here leaves that to the heartbeats. SIGINT is ignored meanwhile, so a second
    Ctrl-C cannot cut the clean-up short."""
    import optuna
    from optuna.trial import TrialState

    wanted = set(workers)
    with interrupts.ignored():
        try:
            ids = {s.study_name: s._study_id for s in storage.get_all_studies() if s.study_name in study_names}
            stopped = [trial._trial_id for study_id in ids.values()
                       for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
                       if TrialRecord.of(trial).worker in wanted]
            for trial_id in stopped:
                try:
                    storage.set_trial_state_values(trial_id, TrialState.FAIL)
                except optuna.exceptions.UpdateFinishedTrialError:  # it finished meanwhile
                    stopped.remove(trial_id)
            return len(stopped)
        except Exception:  # noqa: BLE001 - the heartbeats catch what this misses
            return 0


@contextmanager
def held(store: Store, name: str, holder: str, *, wait: bool = True, seconds: float = START_LEASE_S,
         renew: bool = False, orphaned: Callable[[], bool] = lambda: False) -> Iterator[bool]:
    """Hold the lease ``name`` for the block; yields whether it was taken (always, with
    ``wait``). With ``renew``, a thread renews it every quarter of ``seconds`` so long
    work keeps it; a worker that dies lets it expire."""
    while not store.try_lease(name, holder, seconds):
        if not wait:
            yield False
            return
        if orphaned():
            raise KeyboardInterrupt
        interrupts.checkpoint()
        time.sleep(random.uniform(*LEASE_POLL_S))
    stop = threading.Event()
    renewer = None
    if renew:
        def keep() -> None:
            while not stop.wait(seconds / 4):
                try:
                    store.try_lease(name, holder, seconds)
                except TunerError:  # the database hiccuped: the next renewal may get through
                    continue

        renewer = threading.Thread(target=keep, name=f"lease {name}", daemon=True)
        renewer.start()
    try:
        yield True
    finally:
        stop.set()
        if renewer is not None:
            renewer.join()
        store.release_lease(name, holder)


@dataclass
class LeaseGate:
    """:class:`tuner.search.study.TrialGate` for workers sharing a storage: the study's
    start lease, running trials counted against the budget."""

    store: Store
    study_name: str
    worker: str
    orphaned: Callable[[], bool] = lambda: False

    counts_running = True

    @contextmanager
    def exclusive(self) -> Iterator[Callable[[], None]]:
        if self.orphaned():
            raise KeyboardInterrupt
        name = f"start:{self.study_name}"
        with held(self.store, name, self.worker, orphaned=self.orphaned):
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    self.store.release_lease(name, self.worker)

            yield release

    def wait(self) -> None:
        if self.orphaned():
            raise KeyboardInterrupt
        interrupts.checkpoint()
        time.sleep(random.uniform(*BUDGET_POLL_S))
