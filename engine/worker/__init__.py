"""The engine worker: claims runs with a lease, heartbeats, and runs them, several at once.

A worker runs up to ``max_runs`` runs at the same time, each in a thread of its own, their
evaluations shared fairly through one ``engine.fair_share.FairShare``; further runs wait in
the queue (the studio shows their place and why). The default is sized to the machine
(``default_max_runs``); ``REFRACT_WORKER_RUNS`` or ``python -m engine worker --runs N`` set it.

A run is leased for ``lease_seconds``; a heartbeat thread renews the lease every third of
that. A worker that dies (``kill -9``) stops renewing; once its lease expires any worker
claims the run and resumes it from the database. A worker that finds its lease taken cuts
the work in flight at once (another worker is doing it). A worker asked to stop (SIGTERM)
leaves its runs at the next step boundary, or, when the step in flight is not done within
``LEAVE_GRACE`` seconds (a local model's reflection takes longer than a supervisor waits before
SIGKILL), cuts it as a pause would: the LM calls in flight are recorded as interrupted rather
than left to the crash recovery. Either way the runs stay running and their leases are
released: the next worker resumes them at once.

A long-lived worker (``run_forever`` without ``once``) gets ready for runs before it claims
one: it imports the LM client (litellm takes seconds) and keeps a warm stock of sandbox
processes between runs (``engine.sandbox.warm``, which says why runs stay isolated), so that a
claimed run's first seed evaluation starts within a second.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Callable, Optional

from storage import leases
from storage.db import Database

from engine.config import ExecutorConfig
from engine.fair_share import FairShare, machine_capacity
from engine.worker.jobs import JobRunner
from engine.lm.starting import warm_lm_in_background
from engine.optimizer import Optimizer
from storage import settings

log = logging.getLogger("refract.worker")
RUNS_ENV = "REFRACT_WORKER_RUNS"
# Seconds a worker asked to stop waits for its runs' step boundaries before it cuts the work in
# flight: a short step still ends whole, and a long one is cut well before the studio's
# supervisor (10 s) or a container runtime (10 s by default) sends SIGKILL.
LEAVE_GRACE = 3.0


def default_max_runs() -> int:
    """Runs one worker process runs at once: ``REFRACT_WORKER_RUNS``, else half the cores (at
    least 2: LM calls wait on the network, so two runs rarely slow each other much)."""
    runs = settings.value(RUNS_ENV)
    return runs if runs is not None else max(2, machine_capacity() // 2)


class Worker:
    def __init__(self, db: Database, lease_seconds: float = 15.0, poll_seconds: float = 1.0, lm=None,
                 executor_factory: Optional[Callable] = None, worker_id: Optional[str] = None,
                 max_runs: Optional[int] = None, warm: bool = True) -> None:
        self.db = db
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.lm = lm
        self.executor_factory = executor_factory
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.max_runs = max_runs or default_max_runs()
        self.share = FairShare()
        self.warm = warm and executor_factory is None  # a custom factory starts its own executors
        self.stock = None  # the engine.sandbox.warm.WarmStock of a long-lived worker
        self._active: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    @property
    def current(self) -> list[str]:
        """The runs this worker is running now, oldest first."""
        with self._lock:
            return list(self._active)

    def beat(self) -> None:
        runs = self.current
        leases.worker_heartbeat(self.db, self.id, os.getpid(), socket.gethostname(), runs[0] if runs else None,
                                run_ids=runs, max_runs=self.max_runs)

    def run_forever(self, stop: threading.Event, once: bool = False) -> None:
        """Claim and run runs until ``stop`` is set (or, with ``once``, until nothing is left).
        The studio's jobs (``engine.worker.jobs``) run meanwhile in a thread of their own, so a long
        run never delays them."""
        jobs_done = threading.Event()
        runner = threading.Thread(target=JobRunner(self.db, self.id).loop, args=(jobs_done,), daemon=True, name="jobs")
        runner.start()
        if self.warm and not once:
            self._warm_up()
        try:
            self._claim_and_run(stop, once)
        finally:
            for thread in list(self._active.values()):
                thread.join()
            jobs_done.set()
            runner.join(timeout=5)
            if self.stock is not None:  # after every run's pool has closed (see engine.sandbox.warm)
                self.stock.close()
            try:
                leases.worker_stopped(self.db, self.id)
            except Exception:  # noqa: BLE001 -- the database is gone too: the studio will say "silent"
                log.warning("could not record that worker %s stopped", self.id, exc_info=True)

    def _warm_up(self) -> None:
        """Ready what every run needs before the first claim: the LM client's imports (in a
        thread: a run claimed meanwhile starts anyway) and the stock of sandbox processes."""
        from engine.sandbox.warm import WarmStock

        warm_lm_in_background()
        self.stock = WarmStock(size=ExecutorConfig().workers)

    def _claim_and_run(self, stop: threading.Event, once: bool) -> None:
        while not stop.is_set():
            self.beat()
            run_id = leases.claim_run(self.db, self.id, self.lease_seconds) if len(self.current) < self.max_runs else None
            if run_id is not None:
                self._start(run_id, stop)
                continue
            if once and not self.current:
                return
            stop.wait(self.poll_seconds)

    def _start(self, run_id: str, stop: threading.Event) -> None:
        def run() -> None:
            try:
                self.run_claimed(run_id, stop)
            except Exception:  # noqa: BLE001 -- recorded by the optimizer; the worker goes on
                log.exception("run %s: the worker's thread failed", run_id)
            finally:
                with self._lock:
                    self._active.pop(run_id, None)

        thread = threading.Thread(target=run, daemon=True, name=f"run-{run_id}")
        with self._lock:
            self._active[run_id] = thread
        thread.start()

    def run_claimed(self, run_id: str, stop: Optional[threading.Event] = None) -> str:
        """Run a run this worker has claimed, keeping the lease alive; release it at the end.
        When ``stop`` is set (SIGTERM) the run is left at the next step boundary, still
        running and with its lease released, so that the next worker resumes it at once."""
        opt = Optimizer(self.db, run_id, lm=self.lm, executor_factory=self.executor_factory, share=self.share,
                        stock=self.stock)
        done = threading.Event()
        beat = threading.Thread(target=self._keep_lease, args=(run_id, opt, done, stop), daemon=True, name="lease")
        beat.start()
        try:
            status = opt.run()
            log.info("run %s: %s", run_id, status)
            return status
        finally:
            done.set()
            beat.join()
            leases.release_run(self.db, run_id, self.id)

    def _keep_lease(self, run_id: str, opt: Optimizer, done: threading.Event,
                    stop: Optional[threading.Event] = None) -> None:
        period = self.lease_seconds / 3
        due = time.monotonic() + period
        cut_at: Optional[float] = None
        while not done.wait(min(period, 0.5)):
            if stop is not None and stop.is_set() and not opt.stop_event.is_set():
                log.warning("asked to stop: leaving run %s at the next step boundary", run_id)
                opt.stop_event.set()  # the lease is still renewed until the optimizer returns
                cut_at = time.monotonic() + LEAVE_GRACE
            if cut_at is not None and time.monotonic() >= cut_at:
                if not opt.interrupted():
                    log.warning("run %s: the work in flight is not done; cutting it", run_id)
                # again at every tick: a boundary clears the interrupt, and the asynchronous
                # schedule's proposals still in flight after it must be cut too
                opt.interrupt("the engine worker is stopping")
            if time.monotonic() < due:
                continue
            due = time.monotonic() + period
            try:
                if not leases.renew_lease(self.db, run_id, self.id, self.lease_seconds):
                    log.warning("lost the lease on run %s; stopping", run_id)
                    opt.stop_event.set()
                    opt.interrupt("another worker holds the run's lease")
                    return
                self.beat()
            except Exception:  # a transient database error: try again at the next beat
                log.exception("heartbeat failed")
