"""The helper processes of ``tuner tune --jobs J``: J − 1 workers on this machine that run
trials of the same regimes and write nothing else; the calling process is the first
worker and writes the rows. They sit above :mod:`tuner.search.run`, whose
:func:`~tuner.search.run.run_regimes` each of them runs, and reach it as its ``Team``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from .. import interrupts
from ..errors import TunerError
from ..processes import orphan_check, quiet_logs, start_processes
from . import parallel
from .leases import Worker, worker_id
from .run import TuneJob, run_regimes
from .settings import TuneSettings


@dataclass(frozen=True)
class Helpers:
    """Started helper processes (:meth:`start`); a :class:`tuner.search.run.Team`."""

    processes: Sequence[BaseProcess]

    @property
    def worker_ids(self) -> list[str]:
        return [worker_id(process.pid) for process in self.processes if process.pid is not None]

    @classmethod
    def start(cls, count: int, job: TuneJob, sim_jobs: int = 1) -> Helpers:
        """Start ``count`` helpers on ``job``'s problem file, storage, settings and regimes,
        each simulating seeds in ``sim_jobs`` processes. They take Ctrl-C back only after
        their imports (:func:`tuner.processes.start_processes`); :meth:`stop` passes one on."""
        arguments = [(index, os.getpid(), job.problem.path, job.url, job.settings, list(job.regimes),
                      job.worker.heartbeat_s, sim_jobs) for index in range(1, count + 1)]
        return cls(start_processes(_helper, arguments, "tuner worker"))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the helpers as Ctrl-C would (each marks its running trial FAIL), then wait.

        Ctrl-C on a terminal has reached them already (they share the process group):
        they get a moment to stop on their own before a second SIGINT is sent, so none is
        interrupted while it records its first one."""
        self.join(2.0)
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGINT)
        self.join(timeout_s)
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join()

    def join(self, timeout_s: float | None = None) -> list[str]:
        """Wait for the helpers; one line per helper that failed."""
        failures = []
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for index, process in enumerate(self.processes, start=1):
            process.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if process.exitcode not in (0, None, 130, -signal.SIGINT):
                failures.append(f"worker {index} (pid {process.pid}) stopped early with status {process.exitcode}; "
                                "the other workers finished its trials")
        return failures


def _helper(index: int, parent: int, path: str, url: str, settings: TuneSettings, regimes: list[str],
            heartbeat_s: int, sim_jobs: int = 1) -> None:
    """Entry point of a ``--jobs`` helper process: load the problem, run trials, exit
    quietly on Ctrl-C (130) and with one line on an error (2)."""
    signal.signal(signal.SIGINT, interrupts.interrupt_once)
    quiet_logs()
    try:
        problem = parallel.load_for_tuning(path, url)
        worker = Worker.here(f":{index}", writes_rows=False, heartbeat_s=heartbeat_s)
        with parallel.seed_pool(problem, url, sim_jobs) as seeds_run:
            run_regimes(TuneJob(problem, url, settings, tuple(regimes), worker, orphaned=orphan_check(parent),
                                seed_runner=seeds_run))
    except KeyboardInterrupt:
        with interrupts.ignored():  # a second Ctrl-C must not interrupt the exit
            interrupts.exit_interrupted()
    except TunerError as exc:
        print(f"tuner: error: worker {index}: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # one line, as every tuner error; the parent goes on without it
        text = str(exc).strip().splitlines()
        print(f"tuner: error: worker {index}: {type(exc).__name__}: {text[0] if text else ''}", file=sys.stderr)
        sys.exit(1)
