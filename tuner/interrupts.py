"""How Ctrl-C reaches tuner's processes: exit 130 with threads left behind, and, while
tuning, at once inside an objective and deferred elsewhere.

Optuna marks a trial FAIL when Ctrl-C interrupts its objective. Landing in Optuna's own
bookkeeping around the objective (creating the trial, starting or stopping its heartbeat
thread, writing its result) it does worse: the trial stays RUNNING, and an interrupted
``tell`` even surfaces as an ``UnboundLocalError`` from Optuna's ``_run_trial`` (optuna
5.0). So while :func:`deferred` is active a SIGINT only sets a flag there; it interrupts
at once inside :meth:`Deferral.immediate` (the objective), and otherwise as soon as
Optuna's call returns. Signals reach the main thread only: in another thread these are
no-ops and Ctrl-C is whatever the main thread makes of it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn


@dataclass
class Deferral:
    """Where a SIGINT received under :func:`deferred` goes: handed at once to the handler
    that was installed before (``then``) inside :meth:`immediate`, remembered elsewhere."""

    then: object = signal.default_int_handler
    pending: bool = False
    inside: bool = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.inside:
            self.inside = False  # one interruption per objective
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

    @contextmanager
    def immediate(self) -> Iterator[None]:
        """A block Ctrl-C interrupts at once (delivering now one that came before it)."""
        if self.pending:
            self.deliver()
        self.inside = True
        try:
            yield
        finally:
            self.inside = False


@contextmanager
def deferred() -> Iterator[Deferral]:
    """Defer SIGINT for the block except inside its :meth:`Deferral.immediate` blocks;
    one received and not yet delivered is delivered as the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield Deferral(then=signal.SIG_IGN)  # never called: signals reach the main thread only
        return
    deferral = Deferral(then=signal.getsignal(signal.SIGINT))
    signal.signal(signal.SIGINT, deferral)
    try:
        yield deferral
    finally:
        if signal.getsignal(signal.SIGINT) is deferral:  # (a delivered handler may have replaced it)
            signal.signal(signal.SIGINT, deferral.then)  # type: ignore[arg-type]
    if deferral.pending:
        deferral.deliver()


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
