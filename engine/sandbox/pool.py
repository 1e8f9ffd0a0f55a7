"""LocalPool: W warm sandboxed workers on this machine behind the ``Executor`` contract.

Each worker process compiles the evaluator once and serves many (candidate, example) pairs.
One engine-side thread per worker takes tasks from a shared queue, so the tasks of a whole
step spread over the pool and each Future completes as soon as its own result arrives. A
worker's next task is sent to it before the finished one is announced (``_serve``).
A worker that times out, crashes or leaves stray processes is killed (whole process group)
and replaced; only its in-flight task fails, as an ``EvalOutcome`` with ``error`` set —
futures never raise for evaluator problems.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from engine.executor import BusyMeter, EvalOutcome, EvalTask, LMHandler
from engine.sandbox.frames import LMAccount, outcome_from_frame
from engine.sandbox.worker_process import LoadError, SandboxSpec, TaskNotSendable, WorkerFailed, WorkerProcess

if TYPE_CHECKING:
    from engine.sandbox.warm import WarmStock

log = logging.getLogger(__name__)
_CLOSE = None


@dataclass
class _Sent:
    """A task handed to a worker process, and what its result needs."""

    kind: str
    task: EvalTask
    fut: Future
    t0: float
    lm: LMAccount
    proc: Optional[WorkerProcess] = None
    msg_id: int = 0
    deadline: float = 0.0
    result: Optional[tuple] = None  # (result, recycle) known without the worker
class LocalPool:
    """A warm pool of ``workers`` sandboxed processes running ``source`` (the evaluator file).

    Thread-safe: ``submit``/``validate`` may be called from any number of threads. Workers start
    eagerly in the background; ``wait_ready`` blocks until each has started (or failed to). A
    task starts as soon as one worker is up. With a ``stock``, workers are taken from it
    already spawned (only the evaluator is loaded here); they are never given back.
    """

    def __init__(self, spec: SandboxSpec, source: str, workers: int, lm_handler: Optional[LMHandler] = None,
                 stock: Optional["WarmStock"] = None) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.spec, self.source, self.lm_handler, self._stock = spec, source, lm_handler, stock
        self._n = workers
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._meter = BusyMeter()
        self._ids = itertools.count(1)
        self._procs: dict[int, WorkerProcess] = {}
        self._load_error: Optional[LoadError] = None
        self._closed = False
        self._started = threading.Semaphore(0)
        self.cold_starts: list[float] = []
        self.warm_starts = 0  # workers whose process came from the stock
        # Each worker is spawned by its own long-lived thread: bubblewrap's --die-with-parent
        # follows the *thread* that forked it, so a short-lived spawner would kill the worker.
        self._threads = [threading.Thread(target=self._serve, args=(i,), name=f"refract-pool-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    @property
    def workers(self) -> int:
        return self._n

    def busy_seconds(self) -> float:
        return self._meter.busy_seconds()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every worker has made its first start attempt."""
        deadline = time.monotonic() + timeout
        for _ in range(self._n):
            if not self._started.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError("the evaluator workers did not start in time")
        for _ in range(self._n):
            self._started.release()

    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        return self._put("eval", task)

    def validate(self, candidate: Any) -> Optional[str]:
        with self._lock:
            started = list(self._procs.values())
        if started and not any(p.has_validate for p in started):
            # every worker loads the same file: without a validate() every candidate is valid, and
            # the answer need not queue behind the evaluations already waiting (a whole wave of
            # minibatch tests or a validation pass stood between a reflection and its own test)
            return None
        return self._put("validate", EvalTask(candidate=candidate)).result()

    def _put(self, kind: str, task: EvalTask) -> Future:
        if self._closed:
            raise RuntimeError("the executor is closed")
        fut: Future = Future()
        self._queue.put((kind, task, fut))
        return fut

    def _start(self, slot: int) -> tuple[Optional[WorkerProcess], Optional[str]]:
        if self._load_error is not None:
            return None, str(self._load_error)
        spawned = self._stock.take(self.spec) if self._stock is not None else None
        try:
            proc = WorkerProcess(self.spec, self.source, spawned)
        except LoadError as exc:
            self._load_error = exc  # the evaluator file itself is broken: don't respawn for every task
            return None, str(exc)
        except (WorkerFailed, OSError) as exc:
            log.warning("evaluator worker %d failed to start: %s", slot, exc)
            stderr = getattr(exc, "side_info", {}).get("stderr")
            return None, f"the evaluator worker failed to start: {exc}" + (f"\n{stderr}" if stderr else "")
        with self._lock:
            self._procs[slot] = proc
            self.cold_starts.append(proc.cold_start_seconds)
            self.warm_starts += spawned is not None
        if self._closed:
            proc.close()
            return None, "the executor is closed"
        return proc, None

    def _retire(self, slot: int, proc: Optional[WorkerProcess]) -> None:
        if proc is not None:
            proc.close()
        with self._lock:
            self._procs.pop(slot, None)

    def _serve(self, slot: int) -> None:
        proc, start_error = self._start(slot)
        self._started.release()
        item, sent = None, None  # an item taken from the queue; the task its worker runs
        while True:
            if sent is None:
                item = item or self._queue.get()
                if item is _CLOSE:
                    break
                kind, task, fut = item
                item = None
                if not fut.set_running_or_notify_cancel():
                    continue
                if proc is None or not proc.alive():
                    self._retire(slot, proc)
                    proc, start_error = self._start(slot)
                sent = self._begin(proc, start_error, kind, task, fut)
            result, recycle = self._finish(sent)
            self._meter.add(time.monotonic() - sent.t0)
            done, sent = sent, None
            if recycle and proc is not None:
                self._retire(slot, proc)
                proc, start_error = None, None
                if not self._closed:
                    proc, start_error = self._start(slot)  # replace now, so the next task finds it warm
            elif proc is not None and proc.alive():
                # The next task goes to the worker before the finished one is announced: the
                # announcement runs the engine's callbacks (recording, the next dispatch), and on
                # a busy 2-core machine the worker idled for 1.7 ms per evaluation, a wide
                # step's largest overhead (docs/benchmarks-engine.md); now 0.2 ms.
                item, sent = self._next_now(proc, start_error)
            done.fut.set_result(result)
        self._retire(slot, proc)

    def _next_now(self, proc: WorkerProcess, start_error: Optional[str]):
        """(an item to handle as usual, the next task already sent): the first queued task still
        wanted, sent at once to the idle ``proc``; (None, None) when none is queued."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return None, None
            if item is _CLOSE:
                return item, None
            kind, task, fut = item
            if fut.set_running_or_notify_cancel():
                return None, self._begin(proc, start_error, kind, task, fut)

    def _begin(self, proc: Optional[WorkerProcess], start_error: Optional[str], kind: str, task: EvalTask,
               fut: Future) -> _Sent:
        """Send the task to ``proc`` (idle: it starts at once); a task that cannot run there has
        its result at once."""
        sent = _Sent(kind, task, fut, time.monotonic(), LMAccount(self.lm_handler, task))
        if proc is None:
            side = {"traceback": self._load_error.traceback} if self._load_error else {}
            message = start_error or "no evaluator worker is available"
            sent.result = (message if kind == "validate" else EvalOutcome(0.0, side, message)), False
            return sent
        if kind == "validate" and not proc.has_validate:
            sent.result = None, False  # no validate() in the evaluator file: every candidate is valid
            return sent
        try:
            sent.deadline = self._send(sent, proc)
        except WorkerFailed as exc:
            sent.result = self._failed(sent, exc)
        return sent

    def _send(self, sent: _Sent, proc: WorkerProcess) -> float:
        msg = {"type": sent.kind, "id": next(self._ids), "candidate": sent.task.candidate}
        if sent.kind == "eval":
            task = sent.task
            msg.update(example=task.example, has_example=task.example is not None, opt_state=task.opt_state)
        sent.proc, sent.msg_id = proc, msg["id"]
        return proc.send(msg)

    def _finish(self, sent: _Sent):
        """(result, recycle_worker). Result: EvalOutcome for eval, message-or-None for validate."""
        if sent.result is not None:
            return sent.result
        try:
            frame = sent.proc.result(sent.msg_id, sent.deadline, sent.lm)
        except WorkerFailed as exc:
            return self._failed(sent, exc)
        recycle = bool(frame.get("recycle"))
        if sent.kind == "validate":
            error = frame.get("error")
            return (None if error is None else str(error)), recycle
        return outcome_from_frame(frame, time.monotonic() - sent.t0, sent.lm), recycle

    def _failed(self, sent: _Sent, exc: WorkerFailed):
        if isinstance(exc, TaskNotSendable):  # the worker is unharmed
            return (str(exc) if sent.kind == "validate" else EvalOutcome(0.0, {}, str(exc))), False
        if self._closed:
            exc = WorkerFailed("the executor was closed while this evaluation ran", exc.side_info)
        if sent.kind == "validate":
            return f"validate() failed: {exc}", True
        lm = sent.lm
        return EvalOutcome(0.0, exc.side_info, str(exc), time.monotonic() - sent.t0,
                           lm.cost, lm.tokens_in, lm.tokens_out), True

    def close(self) -> None:
        """Cancel queued tasks, stop the workers (killing any evaluation still running)."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _CLOSE:
                item[2].cancel()
        for _ in self._threads:
            self._queue.put(_CLOSE)
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            proc.signal_kill()  # in-flight evaluations end now; each owner thread cleans up
        for t in self._threads:
            t.join(timeout=10)
