"""Cutting the work in flight: a pause, a stop or the time limit applied within seconds.

A run's ``Interrupt`` is set, with a reason, when a person sends ``pause`` or ``stop`` or the
time budget is reached while a step is running (``watch`` polls for these). Everything that
waits checks it: an LM call in flight returns at once as *interrupted* (its attempt is recorded
with the cost estimated from its prompt, as a crash would leave it); evaluations not yet started
are cancelled and not charged; an evaluation already running finishes and is recorded (it is
paid for) unless its evaluator's own ``lm()`` call was cut, in which case it is discarded (its
LM call is recorded). The step then closes with what was done, the interrupted proposals
recorded as such, and the command is applied at the boundary; resuming starts the next step.

Not guaranteed: an LM request already sent keeps running at the provider; its answer is
dropped. The local model is told (``engine.lm.abandon``) and stops writing within a token, but
a prompt it has begun to read is read whole.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

from storage import repo
from storage.states import RunStatus

log = logging.getLogger("refract.engine")

WATCH_SECONDS = 0.5  # how often a running step looks for a pause, a stop or the time limit
INTERRUPTED = "interrupted"  # the error_kind of an LM attempt cut off by an Interrupt


class Interrupt:
    """A run's request to cut the work in flight, with why. Thread safe."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._held = 0
        self.reason = ""

    def set(self, reason: str) -> None:
        """Cut the work in flight, for ``reason``; ignored while ``held``."""
        with self._lock:
            if not self._held and not self._event.is_set():
                self.reason = reason
                self._event.set()

    @contextmanager
    def held(self) -> Iterator[None]:
        """While the commands of a boundary are applied: an edit's validation pass is not cut
        by the pause queued behind it (the boundary applies that pause itself)."""
        with self._lock:
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1

    def clear(self) -> None:
        with self._lock:
            self._event.clear()
            self.reason = ""

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._event.wait(timeout)


def why_interrupt(db, run_id: str, budget) -> Optional[str]:
    """Why the step running now must be cut (a pending pause or stop, the run stopped, the
    time budget reached), or None."""
    for cmd in repo.pending_commands(db, run_id):
        if cmd.kind in ("pause", "stop"):
            return f"{'stopped' if cmd.kind == 'stop' else 'paused'} by {cmd.author or 'someone'}"
    cap = budget.cfg.max_seconds
    if cap is not None and budget.seconds >= cap:
        return f"time budget spent ({budget.seconds:.0f} s of {cap:.0f} s)"
    return None


def watch(db, run_id: str, budget, interrupt: Interrupt, done: threading.Event) -> None:
    """Until ``done``: set ``interrupt`` as soon as ``why_interrupt`` gives a reason."""
    while not done.wait(WATCH_SECONDS):
        if interrupt.is_set():
            continue
        try:
            why = why_interrupt(db, run_id, budget)
        except Exception:  # a transient database error: look again at the next tick
            log.exception("run %s: cannot look for pending commands", run_id)
            continue
        if why:
            log.info("run %s: interrupting the work in flight (%s)", run_id, why)
            interrupt.set(why)


def stopping_status(status: str) -> bool:
    """A decision that leaves the run paused or stopped: the work in flight is cut."""
    return status in (RunStatus.PAUSED, RunStatus.STOPPED)
