"""A warm stock of sandbox processes, kept by a long-lived engine worker between runs.

Starting a sandboxed worker (bubblewrap, the interpreter, the worker's runtime) takes a few
hundred milliseconds per process on a loaded machine; a run's pool needs several before its
seed can be evaluated. ``WarmStock`` starts them ahead of the runs, so that a run's pool only
has to send each one its evaluator.

Isolation between runs is kept because the stock holds only processes that have loaded
nothing (``SpawnedProcess``: no evaluator, no user input, no limits yet). A pool takes them,
loads its own run's evaluator into them, and never gives one back: they are killed with the
pool when the run ends (``LocalPool.close``). So whatever a run's evaluator leaves behind —
imported modules, globals, files in its private /tmp, child processes — dies with that run,
and the next run's processes have never run anyone's code.

One thread spawns every process and refills the stock after a take, a moment later (the run
that took them starts its evaluations first). It must live as long as those processes:
bubblewrap's --die-with-parent follows the thread that forked it, so ``close()`` belongs after
the last pool that took from the stock has closed. The stock serves one ``spawn_key`` at a
time: a run with another spec (network on, another memory size) spawns its own processes and
the stock switches to that spec. Not guaranteed: a process is warm only if the stock had time
to refill since the last take; otherwise the pool starts its own, as without a stock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from engine.sandbox.worker_process import SandboxSpec, SpawnedProcess, spawn_key

log = logging.getLogger(__name__)
REFILL_DELAY = 1.0  # seconds after a take before refilling: the run that took them starts first
RETRY_SECONDS = 5.0  # after a failed spawn


class WarmStock:
    """Up to ``size`` spawned, unloaded sandbox processes for ``spec`` (thread-safe)."""

    def __init__(self, spec: SandboxSpec = SandboxSpec(), size: int = 4, refill: bool = True) -> None:
        """``refill``: False for the stock of one run (``python -m engine run``), spawned while
        the run starts and not replenished after its pool took it."""
        self._spec, self._size, self._refill = spec, size, refill
        self._spawned = 0
        self._ready: list[SpawnedProcess] = []
        self._cond = threading.Condition()
        self._closed = False
        self._refill_at = 0.0
        self.taken = 0  # processes handed to pools: process starts a run did not wait for
        self._thread = threading.Thread(target=self._fill, name="refract-warm-stock", daemon=True)
        self._thread.start()

    def ready(self) -> int:
        """Processes in stock now."""
        with self._cond:
            return len(self._ready)

    def take(self, spec: SandboxSpec) -> Optional[SpawnedProcess]:
        """A spawned process for ``spec``, now its caller's for good, or None (none in stock,
        or the stock was for another spec: it switches to this one)."""
        stale: list[SpawnedProcess] = []
        found = None
        with self._cond:
            if spawn_key(spec) != spawn_key(self._spec):
                self._spec, stale, self._ready = spec, self._ready, []
            while self._ready and found is None:
                proc = self._ready.pop(0)
                if proc.alive():
                    found = proc
                    self.taken += 1
                else:
                    stale.append(proc)
            self._refill_at = time.monotonic() + REFILL_DELAY
            self._cond.notify_all()
        for proc in stale:
            proc.discard()
        return found

    def close(self) -> None:
        """Stop refilling and kill the processes still in stock."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        with self._cond:
            left, self._ready = self._ready, []
        for proc in left:
            proc.discard()

    def _wanted(self) -> Optional[SandboxSpec]:
        """Block until a process is wanted; its spec, or None once closed."""
        with self._cond:
            while not self._closed:
                wait = self._refill_at - time.monotonic()
                if len(self._ready) < self._size and wait <= 0 and (self._refill or self._spawned < self._size):
                    self._spawned += 1
                    return self._spec
                self._cond.wait(timeout=wait if wait > 0 else None)
            return None

    def _fill(self) -> None:
        while True:
            spec = self._wanted()
            if spec is None:
                return
            try:
                proc = SpawnedProcess(spec)
            except OSError as exc:
                log.warning("the warm stock could not start a sandbox process: %s", exc)
                with self._cond:
                    self._refill_at = time.monotonic() + RETRY_SECONDS
                continue
            with self._cond:
                keep = not self._closed and proc.key == spawn_key(self._spec)
                if keep:
                    self._ready.append(proc)
            if not keep:
                proc.discard()
