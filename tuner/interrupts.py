"""How Ctrl-C reaches tuner's processes: exit 130 with threads left behind, and, while
tuning, at once inside the simulations and deferred while the database is talked to.

Optuna marks a trial FAIL when Ctrl-C interrupts its objective. Landing in Optuna's own
bookkeeping around the objective (creating the trial, starting or stopping its heartbeat
thread, writing its result) it does worse: the trial stays RUNNING, and an interrupted
``tell`` even surfaces as an ``UnboundLocalError`` from Optuna's ``_run_trial`` (optuna
5.0). Landing inside any of Optuna's database calls — the objective's too: suggesting,
reporting, reading the study — it leaves the session's transaction open (Optuna rolls
back only on SQLAlchemy's errors), and on SQLite that transaction holds the write lock
that every other worker, and the same process's next write, then waits for.

So while :func:`deferred` is active (a study's trial loop) a SIGINT only sets a flag; it
interrupts at once inside :func:`interruptible` blocks (the simulations), except in their
:func:`shielded` parts (a trial reporting a seed's value), and otherwise at the next
:func:`checkpoint` (a wait for a lease or for other workers) or as the loop ends. Signals
reach the main thread only: in another thread these are no-ops and Ctrl-C is whatever
the main thread makes of it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn


@dataclass
class Deferral:
    """Where a SIGINT received under :func:`deferred` goes: handed at once to the handler
    that was installed before (``then``) inside :func:`interruptible` blocks (not in a
    :func:`shielded` one within them), remembered elsewhere until :func:`checkpoint`."""

    then: object = signal.default_int_handler
    pending: bool = False
    inside: bool = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.inside:
            self.inside = False  # one interruption per block
            self.deliver()
        else:
            self.pending = True

    def deliver(self) -> None:
        """Run the previous handler as if the signal had just come (default: raise
        KeyboardInterrupt; ignored stays ignored)."""
        self.pending = False
        if callable(self.then):
            self.then(signal.SIGINT, None)
        elif self.then != signal.SIG_IGN:
            raise KeyboardInterrupt


#: The deferral in force in this process (signals are the process's), None outside :func:`deferred`.
_current: Deferral | None = None


@contextmanager
def deferred() -> Iterator[None]:
    """Defer SIGINT for the block except inside its :func:`interruptible` blocks; one
    received and not yet delivered is delivered at a :func:`checkpoint` or as the block
    ends. Nested, the outer one rules."""
    global _current
    if _current is not None or threading.current_thread() is not threading.main_thread():
        yield  # already deferred; or not the main thread, which alone gets signals
        return
    deferral = _current = Deferral(then=signal.getsignal(signal.SIGINT))
    signal.signal(signal.SIGINT, deferral)
    try:
        yield
    finally:
        _current = None
        if signal.getsignal(signal.SIGINT) is deferral:  # (a delivered handler may have replaced it)
            signal.signal(signal.SIGINT, deferral.then)  # type: ignore[arg-type]
    if deferral.pending:
        deferral.deliver()


@contextmanager
def interruptible() -> Iterator[None]:
    """A block Ctrl-C interrupts at once — pure computation, the simulations — delivering
    now one that came before it; outside :func:`deferred`, nothing changes."""
    deferral = _current
    if deferral is None:
        checkpoint()
        yield
        return
    checkpoint()
    deferral.inside = True
    try:
        yield
    finally:
        deferral.inside = False


@contextmanager
def shielded() -> Iterator[None]:
    """Inside an :func:`interruptible` block, a part that talks to the database: Ctrl-C
    waits for its end."""
    deferral = _current
    if deferral is None:
        yield
        return
    was, deferral.inside = deferral.inside, False
    try:
        yield
    finally:
        deferral.inside = was
    if was:
        checkpoint()


def checkpoint() -> None:
    """A safe point (a wait, the start of a simulation): deliver a deferred Ctrl-C now, or
    raise again one that library code swallowed (see :func:`on_sigint`)."""
    if _current is not None and _current.pending:
        _current.deliver()
    elif _received and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        raise KeyboardInterrupt


#: A SIGINT reached this process through :func:`on_sigint`: from then on it is stopping.
_received = False


def on_sigint(signum: int, frame: object) -> None:
    """The ``tuner`` executable's SIGINT handler, installed at its start: Python's own
    (raise KeyboardInterrupt), remembering that it came. A KeyboardInterrupt raised inside
    a weakref callback or a ``__del__`` is printed as "Exception ignored" and dropped, and
    the run went on to exit 0 as if never interrupted; the next :func:`checkpoint` (every
    simulation starts with one) raises it again."""
    global _received
    _received = True
    raise KeyboardInterrupt


def install() -> None:
    """:func:`on_sigint` for this process (main thread only: signals go there), and the
    "Exception ignored" report of a swallowed KeyboardInterrupt silenced (a traceback on
    stderr; :func:`checkpoint` raises it again)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_sigint)
    report = sys.unraisablehook

    def unraisable(what: Any) -> None:
        if not (_received and isinstance(what.exc_value, KeyboardInterrupt)):
            report(what)

    sys.unraisablehook = unraisable


def received() -> bool:
    """Whether a SIGINT reached this process through :func:`on_sigint`."""
    return _received


def exit_now(code: object) -> NoReturn:
    """Exit with ``code`` (a SystemExit's) after the exit handlers, flushing the streams:
    CPython ends a process by SIGINT (exit -2, whatever ``sys.exit`` said) once a
    KeyboardInterrupt escaped an ``exec`` of a string (``dataclasses`` and lazy imports
    run them), even if the interrupt was then caught and reported."""
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


@contextmanager
def ignored() -> Iterator[None]:
    """SIGINT ignored for the block: clean-up that a second Ctrl-C must not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ignore_until_exit() -> None:
    """SIGINT ignored from now on, in a process about to exit with its work done."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt_once(signum: int, frame: object) -> None:
    """A SIGINT handler for a helper process: the first interrupts, later ones are ignored,
    so a second Ctrl-C (or the parent's own SIGINT to a helper that already got one) never
    cuts short the recording of the first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def exit_interrupted(code: int = 130) -> NoReturn:
    """Exit after Ctrl-C, even when it struck while Optuna started a trial's heartbeat
    thread: that thread is not a daemon and, its ``with`` never entered, would run (and
    keep the process alive) forever. Everything worth keeping is committed by then."""
    # Optuna does not name the thread; Python names it after its target
    strays = [t for t in threading.enumerate() if "_record_heartbeat" in t.name and t.is_alive()]
    if strays:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
