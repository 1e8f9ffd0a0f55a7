"""Sharing the machine's evaluation capacity fairly between the runs of one worker process.

Each run keeps its own sandbox pool (its evaluator is its own), but when a worker runs several
runs at once their pools compete for the same cores. ``FairShare`` is the process's one
dispatcher: every run's evaluations go through a ``FairExecutor`` that queues them per run, and
the dispatcher hands them to the runs' pools in round-robin order, with at most ``capacity``
evaluations running over all runs. So two runs with work waiting get the same number of
evaluations started, whatever their batch sizes; a run alone uses its whole pool, and its
evaluations go to its pool directly.

Contract: ``FairExecutor`` is an ``engine.executor.Executor``. A task cancelled while it waits
here never reaches the pool; a task's result (or failure) is the pool's, unchanged.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Optional

from engine.executor import EvalOutcome, EvalTask, Executor


def machine_capacity() -> int:
    """Evaluations that may run at once over all the runs of this process: the cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


class FairShare:
    """Round-robin dispatch of queued evaluations over runs, ``capacity`` at a time (at least
    the largest pool registered, so that a run alone is never slowed)."""

    def __init__(self, capacity: Optional[int] = None) -> None:
        self.capacity = capacity or machine_capacity()
        self._cond = threading.Condition()
        self._queues: dict[str, deque] = {}  # run id -> (task, outer future, executor)
        self._order: deque[str] = deque()  # runs with work waiting, next first
        self._running = 0
        self._pools: dict[str, int] = {}
        self._thread: Optional[threading.Thread] = None  # started with the first evaluation

    def register(self, run_id: str, workers: int) -> None:
        with self._cond:
            self._pools[run_id] = workers

    def unregister(self, run_id: str) -> None:
        with self._cond:
            self._pools.pop(run_id, None)
            for _, outer, _ in self._queues.pop(run_id, deque()):
                outer.cancel()
            if run_id in self._order:
                self._order.remove(run_id)

    def submit(self, run_id: str, executor: Executor, task: EvalTask) -> "Future[EvalOutcome]":
        with self._cond:
            # A run alone hands its evaluations straight to its pool, so that a worker's next
            # task already waits in the pool when the worker's result arrives and is sent at once
            # (engine.sandbox.pool), not after a turn of the dispatcher thread: on a busy 2-core
            # machine each evaluation's worker idled 1.7 ms between two tasks.
            alone = set(self._pools) <= {run_id} and not self._order and self._running < self._limit()
            if alone:
                self._running += 1
        if alone:
            try:
                inner = executor.submit(task)
            except BaseException:
                self._done()
                raise
            inner.add_done_callback(lambda _f: self._done())
            return inner
        outer: Future = Future()
        with self._cond:
            queue = self._queues.setdefault(run_id, deque())
            queue.append((task, outer, executor))
            if run_id not in self._order:
                self._order.append(run_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._dispatch_forever, daemon=True, name="fair-share")
                self._thread.start()
            self._cond.notify_all()
        return outer

    def _limit(self) -> int:
        """Evaluations handed to the pools at once: one per core (at least the largest pool);
        a run alone, twice its pool (each worker's next task waits beside it). A run that
        registers later waits for the first one's extra evaluations to end (a wave at most)."""
        limit = max([self.capacity, *self._pools.values()])
        return 2 * limit if len(self._pools) <= 1 else limit

    def _dispatch_forever(self) -> None:
        while True:
            with self._cond:
                while not self._order or self._running >= self._limit():
                    self._cond.wait()
                run_id = self._order.popleft()
                queue = self._queues[run_id]
                task, outer, executor = queue.popleft()
                if queue:
                    self._order.append(run_id)  # its next task waits for the others' turn
                if not outer.set_running_or_notify_cancel():
                    continue
                self._running += 1
            try:
                inner = executor.submit(task)
            except Exception as exc:  # noqa: BLE001 -- the pool refused: the caller sees why
                self._done()
                outer.set_exception(exc)
                continue
            inner.add_done_callback(lambda f, outer=outer: self._settle(f, outer))

    def _settle(self, inner: Future, outer: Future) -> None:
        self._done()
        if inner.cancelled():
            outer.set_exception(RuntimeError("the evaluation was cancelled by its pool (the run is closing)"))
        elif inner.exception() is not None:
            outer.set_exception(inner.exception())
        else:
            outer.set_result(inner.result())

    def _done(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()


class FairExecutor:
    """One run's executor as seen through the process's ``FairShare``."""

    def __init__(self, share: FairShare, run_id: str, inner: Executor, workers: int) -> None:
        self.share, self.run_id, self.inner = share, run_id, inner
        share.register(run_id, workers)

    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        return self.share.submit(self.run_id, self.inner, task)

    def validate(self, candidate: Any) -> Optional[str]:
        return self.inner.validate(candidate)

    @property
    def workers(self) -> int:
        return self.inner.workers

    def busy_seconds(self) -> float:
        return self.inner.busy_seconds()

    def close(self) -> None:
        self.share.unregister(self.run_id)
        self.inner.close()
