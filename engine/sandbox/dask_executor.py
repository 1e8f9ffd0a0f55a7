"""DaskExecutor: the ``Executor`` contract on a Dask distributed cluster.

``[executor] backend = "dask"`` with ``address = "tcp://HOST:8786"`` (an existing scheduler) or
``"local"`` (a LocalCluster of ``workers`` processes, one thread each, on this machine).
Every Dask task runs the evaluation in the *same* sandboxed subprocess as ``LocalPool`` —
bubblewrap, rlimits, scrubbed environment, wall-clock timeout — kept warm per Dask worker
thread, so each Dask worker machine needs Refract's code importable and (for full isolation)
bubblewrap installed. Evaluator ``lm()`` calls are not supported here: the evaluator gets an
``LMError`` that says so. Dask executes pickled code: never expose a scheduler port
unauthenticated (docs/security.md).
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Optional

from engine.executor import BusyMeter, EvalOutcome, EvalTask, LMHandler
from engine.sandbox.frames import outcome_from_frame
from engine.sandbox.worker_process import LoadError, SandboxSpec, WorkerFailed, WorkerProcess

log = logging.getLogger(__name__)
LM_UNSUPPORTED = ('lm() is not supported with the Dask executor ([executor] backend = "dask"); '
                  'use backend = "local" for evaluators that call lm()')
_CACHED_PER_THREAD = 2  # warm workers kept per Dask thread (one per evaluator in use)

# --- runs on the Dask workers ---------------------------------------------------------------

_local = threading.local()
_all_procs: list[WorkerProcess] = []


def _close_all() -> None:
    for proc in list(_all_procs):
        proc.close()


atexit.register(_close_all)


def _no_lm(frame: dict) -> dict:
    return {"type": "lm_error", "error": LM_UNSUPPORTED}


def _warm_worker(spec: SandboxSpec, source: str, key: str) -> WorkerProcess:
    cache: OrderedDict = _local.__dict__.setdefault("procs", OrderedDict())
    proc = cache.pop(key, None)
    if proc is not None and not proc.alive():
        proc.close()
        _all_procs.remove(proc)
        proc = None
    if proc is None:
        # this machine's interpreter, not the engine's path
        proc = WorkerProcess(dataclasses.replace(spec, python=sys.executable), source)
        _all_procs.append(proc)
    cache[key] = proc
    while len(cache) > _CACHED_PER_THREAD:
        old = cache.popitem(last=False)[1]
        old.close()
        _all_procs.remove(old)
    return proc


def run_on_dask_worker(spec: SandboxSpec, source: str, key: str, msg: dict) -> dict:
    """One evaluation or validation on this Dask worker; returns a result frame (plain dict)."""
    t0 = time.monotonic()
    try:
        proc = _warm_worker(spec, source, key)
    except LoadError as exc:
        return {"score": 0.0, "side_info": {"traceback": exc.traceback}, "error": str(exc), "seconds": 0.0}
    except (WorkerFailed, OSError) as exc:
        return {"score": 0.0, "side_info": {}, "error": f"the evaluator worker failed to start: {exc}", "seconds": 0.0}
    t1 = time.monotonic()
    try:
        frame = proc.request(msg, _no_lm)
    except WorkerFailed as exc:
        frame = {"score": 0.0, "side_info": exc.side_info, "error": str(exc), "recycle": True}
    if frame.get("recycle"):
        _local.procs.pop(key, None)
        proc.close()
        _all_procs.remove(proc)
    frame["seconds"] = time.monotonic() - t1
    frame["total_seconds"] = time.monotonic() - t0
    return frame


# --- runs in the engine ---------------------------------------------------------------------

class DaskExecutor:
    """Evaluations as Dask tasks; Futures complete as results arrive. Thread-safe."""

    def __init__(self, spec: SandboxSpec, source: str, address: str = "local", workers: int = 2,
                 lm_handler: Optional[LMHandler] = None) -> None:
        from dask.distributed import Client, LocalCluster

        self.spec, self.address = spec, address
        self._cluster = None
        if address == "local":
            n = max(1, min(workers, os.cpu_count() or 1))
            self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                         dashboard_address=":0", silence_logs=logging.WARNING)
            self._client = Client(self._cluster)
        else:
            self._client = Client(address, timeout="20s")
        if lm_handler is not None:
            log.info("evaluator lm() calls are unsupported on the Dask executor; they will fail with a clear error")
        self._key = hashlib.sha256(repr((source, spec)).encode()).hexdigest()[:16]
        [self._source] = self._client.scatter([source], broadcast=True, hash=False)
        self._lock = threading.Lock()
        self._meter = BusyMeter()
        self._ids = iter(range(1, 1 << 62))
        self._closed = False

    @property
    def workers(self) -> int:
        return max(1, sum(self._client.nthreads().values()))

    def busy_seconds(self) -> float:
        return self._meter.busy_seconds()

    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        msg = {"type": "eval", "candidate": task.candidate, "example": task.example,
               "has_example": task.example is not None, "opt_state": task.opt_state}
        return self._dispatch(msg, lambda frame: outcome_from_frame(frame, frame.get("seconds", 0.0)),
                              lambda exc: EvalOutcome(0.0, {}, f"the Dask task failed: {type(exc).__name__}: {exc}"))

    def validate(self, candidate: Any) -> Optional[str]:
        fut = self._dispatch({"type": "validate", "candidate": candidate},
                             lambda frame: None if frame.get("error") is None else str(frame["error"]),
                             lambda exc: f"validate() failed on the Dask cluster: {type(exc).__name__}: {exc}")
        return fut.result()

    def _dispatch(self, msg: dict, on_frame, on_exc) -> Future:
        if self._closed:
            raise RuntimeError("the executor is closed")
        with self._lock:
            msg["id"] = next(self._ids)
        out: Future = Future()
        out.set_running_or_notify_cancel()
        dfut = self._client.submit(run_on_dask_worker, self.spec, self._source, self._key, msg, pure=False)

        def done(d) -> None:
            try:
                frame = d.result()
            except BaseException as exc:  # lost worker, cancelled, scheduler gone
                out.set_result(on_exc(exc))
                return
            self._meter.add(float(frame.get("seconds") or 0.0))
            out.set_result(on_frame(frame))

        dfut.add_done_callback(done)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()
