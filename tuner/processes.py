"""Worker processes, one way: spawned, started with Ctrl-C ignored, never left orphaned.

Every process tuner starts (the seed pool's simulators, the ``--jobs`` helpers, the
dashboard's simulators, the compile cache's compilers) is spawned, not forked (a fork
would copy Optuna's database connections and CUDA state), and started while SIGINT is
ignored: a Ctrl-C in the second a child spends importing would otherwise print a
traceback from the middle of its imports. A pool worker then keeps ignoring Ctrl-C (its
parent shuts the pool down) and exits by itself when its parent dies without doing so
(SIGKILL, a crash), rather than live on re-parented to init.

Standard library only, beside :mod:`tuner.interrupts`: any layer may start processes.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from . import interrupts

#: How often a pool worker looks whether its parent is still alive (seconds).
PARENT_POLL_S = 1.0
#: How long an abandoned pool's manager thread is waited for (seconds).
MANAGER_JOIN_S = 5.0


def spawn_context() -> Any:
    """The multiprocessing context of every process tuner starts."""
    return multiprocessing.get_context("spawn")


def orphan_check(parent: int) -> Callable[[], bool]:
    """True once ``parent`` (the pid of the process that started this one, passed from
    it: read here it could already be init's) is no longer this process's parent."""
    return lambda: os.getppid() != parent


def start_worker(parent: int) -> None:
    """A pool worker's initializer: Ctrl-C stays with the parent, and a watcher thread
    ends this process once ``parent`` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    orphaned = orphan_check(parent)

    def watch() -> None:
        while not orphaned():
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent watch", daemon=True).start()


def _ready() -> None:
    """A no-op task: submitted once per worker, so that each starts at once."""


def spawn_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes, all started (under ignored SIGINT) before
    this returns, each running :func:`start_worker`. The caller shuts it down.

    Raises:
        BaseException: whatever stopped a worker from starting (the pool is shut down).
    """
    pool = ProcessPoolExecutor(workers, mp_context=spawn_context(), initializer=start_worker,
                               initargs=(os.getpid(),))
    with interrupts.ignored():
        started = [pool.submit(_ready) for _ in range(workers)]
    try:
        for future in started:
            future.result()
    except BaseException:  # Ctrl-C while they start, or one that cannot start
        stop_pool(pool, abandon=True)
        raise
    return pool


def stop_pool(pool: ProcessPoolExecutor, abandon: bool = False) -> None:
    """Shut ``pool`` down: after its current tasks, or (``abandon``: Ctrl-C, an error) at
    once, terminating its processes, so that an interrupted command exits without waiting."""
    processes = list(getattr(pool, "_processes", {}).values()) if abandon else []
    manager = getattr(pool, "_executor_manager_thread", None)  # (shutdown forgets it)
    pool.shutdown(wait=not abandon, cancel_futures=True)
    for process in processes:
        process.terminate()
        process.join()
    # The executor's manager thread drops the pool's queues once it sees the processes
    # gone, and each queue's semaphores are unlinked then unregistered from
    # multiprocessing's resource tracker as they are collected, in that thread. An exit
    # between the two (tuner exits with os._exit after Ctrl-C) left the tracker printing
    # "leaked semaphore" and "No such file or directory" warnings after tuner's last line
    # (1 run in about 20). Wait for it; it is quick once the processes are gone.
    if abandon and manager is not None:
        manager.join(timeout=MANAGER_JOIN_S)


def start_processes(target: Callable[..., None], arguments: Sequence[tuple[Any, ...]],
                    name: str) -> list[multiprocessing.process.BaseProcess]:
    """Start one spawned process per tuple of ``arguments`` running ``target``, SIGINT
    ignored while they start (inherited through exec: ``target`` takes it back once its
    imports are done). Named ``name`` and their 1-based index."""
    context = spawn_context()
    processes = [context.Process(target=target, args=args, name=f"{name} {index}", daemon=False)
                 for index, args in enumerate(arguments, start=1)]
    with interrupts.ignored():
        for process in processes:
            process.start()
    return processes


def quiet_logs() -> None:
    """What a tuning process logs: errors reach the user as one line each, so Optuna logs
    only errors (it logs an interrupted trial at WARNING with its traceback), and
    SQLAlchemy's pool nothing (a Ctrl-C that lands while it resets a connection is
    logged with a traceback by Python's last-resort handler)."""
    import logging

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.getLogger("sqlalchemy.pool").addHandler(logging.NullHandler())
    logging.getLogger("sqlalchemy.pool").propagate = False
