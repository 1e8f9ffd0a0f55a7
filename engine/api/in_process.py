"""InProcessExecutor: the ``Executor`` contract over a Python function in the caller's process.

This is the executor of runs started from Python (``engine.api.optimize.optimize_anything``). The
evaluator is the caller's own code, trusted as in GEPA: it is **not sandboxed** — no time,
memory, file or network limits apply, and ``[executor] timeout_seconds`` / ``memory_mb`` /
``network`` have no effect. ``[executor] workers`` threads (or, with ``pool="process"``, spawned
processes) evaluate in parallel.

Inside the function, ``import refract_evaluator as oa`` works as in the sandbox: ``oa.log(...)``,
``print(...)`` and writes to ``sys.stderr`` from the evaluating thread land in that evaluation's
side_info (``log``, ``stdout``, ``stderr``), per evaluation and thread-safely; ``oa.lm(...)`` calls
the run's task LM through the engine (costed and charged to the run; thread pool only). Text
written by threads the evaluator starts itself is not captured.
"""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing
import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable, Optional

from engine.executor import BusyMeter, EvalOutcome, EvalTask, LMHandler
from engine.sandbox.frames import LMAccount
from engine.sandbox.runtime import outcome

CAPTURE_CHARS = 20_000


oa = sys.modules["refract_evaluator"]  # registered by engine/__init__.py
_current = threading.local()  # .account: the LMAccount of the evaluation running in this thread


def _lm_in_process(messages: list, model: Optional[str], params: dict) -> str:
    account = getattr(_current, "account", None)
    if account is None:
        raise oa.LMError("lm() was called outside an evaluation (or from a thread the evaluator started)")
    reply = account({"messages": messages, "model": model, "params": params})
    if reply["type"] != "lm_result":
        raise oa.LMError(reply["error"])
    return reply["text"]


class _RoutedStream:
    """Stands in for sys.stdout / sys.stderr while in-process evaluations run: text written by
    a thread that is evaluating goes to that evaluation's sink, any other text where it went."""

    def __init__(self, target, name: str) -> None:
        self._target, self._name = target, name

    def write(self, text: str) -> int:
        sink = getattr(_current, self._name, None)
        return (sink if sink is not None else self._target).write(text)

    def flush(self) -> None:
        if getattr(_current, self._name, None) is None:
            self._target.flush()

    def __getattr__(self, attr: str):
        return getattr(self._target, attr)


_streams_lock = threading.Lock()
_streams_users = 0


def route_streams(on: bool) -> None:
    """Install the routed streams for the first open executor; remove them with the last
    (unless someone replaced sys.stdout since: then theirs stays)."""
    global _streams_users
    with _streams_lock:
        _streams_users += 1 if on else -1
        if on and _streams_users == 1:
            sys.stdout, sys.stderr = _RoutedStream(sys.stdout, "stdout"), _RoutedStream(sys.stderr, "stderr")
        elif not on and _streams_users == 0:
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name)
                if isinstance(stream, _RoutedStream):
                    setattr(sys, name, stream._target)


class Signature:
    """How to call the user's evaluate, as GEPA calls it: the example positionally to a second
    positional parameter, else as ``example=`` to a parameter of that name or ``**kwargs``;
    ``opt_state=`` when it declares ``opt_state`` (or ``**kwargs``)."""

    def __init__(self, fn: Callable) -> None:
        params = inspect.signature(fn).parameters
        kinds = {p.kind for p in params.values()}
        positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                      and p.name != "opt_state"]
        self.example_positional = len(positional) >= 2 or inspect.Parameter.VAR_POSITIONAL in kinds
        self.var_keyword = inspect.Parameter.VAR_KEYWORD in kinds
        by_name = "example" in params and params["example"].kind != inspect.Parameter.POSITIONAL_ONLY
        self.takes_example = self.example_positional or by_name or self.var_keyword
        self.wants_opt_state = "opt_state" in params or self.var_keyword

    def call(self, fn: Callable, candidate: Any, example: Any, has_example: bool, best_evals: Optional[list] = None):
        if has_example and not self.takes_example:
            raise TypeError("this run has a dataset but the evaluator takes only the candidate: "
                            "define evaluator(candidate, example)")
        args, kwargs = (candidate,), {}
        if has_example:
            if self.example_positional:
                args = (candidate, example)
            else:
                kwargs["example"] = example
        if self.wants_opt_state:
            kwargs["opt_state"] = oa.OptimizationState(best_evals or [])
        return fn(*args, **kwargs)


def describe(exc: BaseException) -> tuple[str, str]:
    """(``Name: message (file.py, line N)`` at the innermost frame, the traceback without ours)."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    frames = traceback.extract_tb(tb)
    where = f" ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno})" if frames else ""
    text = str(exc)
    return f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}", \
        "".join(traceback.format_exception(type(exc), exc, tb))


def evaluate_captured(fn: Callable, sig: Signature, task: EvalTask, capture_chars: int,
                      account: Optional[LMAccount] = None, raised: Optional[list] = None) -> EvalOutcome:
    """Run one evaluation in this thread with its own log/stdout/stderr sinks; never raises
    for the evaluator's errors (an exception is appended to ``raised``, when given)."""
    t0 = time.monotonic()
    sinks = {name: oa.BoundedText(capture_chars) for name in ("log", "stdout", "stderr")}
    oa.set_log_context(sinks["log"])
    _current.stdout, _current.stderr, _current.account = sinks["stdout"], sinks["stderr"], account
    score, side, error = 0.0, {}, None
    try:
        score, side = outcome.normalise(sig.call(fn, task.candidate, task.example, task.example is not None,
                                                  task.opt_state))
    except outcome.NotJSON as exc:
        error = str(exc)
    except Exception as exc:  # the user's code failing is an outcome, never an engine error
        error, trace = describe(exc)
        side = {"traceback": trace}
        if raised is not None:
            raised.append(exc)
    finally:
        oa.set_log_context(None)
        _current.stdout = _current.stderr = _current.account = None
    oa.add_captured(side, {key: sink.getvalue() for key, sink in sinks.items()})
    out = EvalOutcome(score=score, side_info=side, error=error, seconds=time.monotonic() - t0)
    if account is not None:
        out.lm_cost_usd, out.lm_tokens_in, out.lm_tokens_out = account.cost, account.tokens_in, account.tokens_out
    return out


def _evaluate_in_child(fn: Callable, task: EvalTask, capture_chars: int) -> EvalOutcome:
    """The process pool's task (a module-level function, so that it pickles)."""
    if not isinstance(sys.stdout, _RoutedStream):  # first task in this child: capture print() here too
        route_streams(True)
    return evaluate_captured(fn, Signature(fn), task, capture_chars)


class CallerThreadPool:
    """Runs submitted calls one at a time on the thread that calls ``run_one`` (the thread that
    called ``optimize_anything``, the main thread of a script), where ``signal.signal`` works,
    as GEPA's in-process evaluations need (``gepa.utils.code_execution``'s SIGALRM time limits).
    A call cut by Ctrl-C (KeyboardInterrupt in that thread) goes back to the queue and runs again."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False

    def submit(self, fn: Callable, *args: Any) -> Future:
        fut: Future = Future()
        if self._closed:
            fut.cancel()
        else:
            self._queue.put((fut, fn, args))
        return fut

    def run_one(self, timeout: float) -> bool:
        """Run the next queued call, waiting up to ``timeout`` for one; False when none came."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return False
        if item is None:  # wake()
            return False
        fut, fn, args = item
        if not fut.set_running_or_notify_cancel():
            return True
        try:
            fut.set_result(fn(*args))
        except KeyboardInterrupt:
            retry: Future = Future()
            retry.add_done_callback(lambda done: _copy_outcome(done, fut))
            self._queue.put((retry, fn, args))
            raise
        except BaseException as exc:  # handed to whoever waits for the result
            fut.set_exception(exc)
        return True

    def wake(self) -> None:
        """Make a waiting ``run_one`` return now (the run has ended: nothing more will come)."""
        self._queue.put(None)

    def shutdown(self, wait: bool = True, cancel_futures: bool = True) -> None:
        self._closed = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[0].cancel()  # queued calls are pending (a re-queued one too: its waiter is told, _copy_outcome)


def _copy_outcome(source: Future, target: Future) -> None:
    if source.cancelled():
        target.set_exception(RuntimeError("the evaluation was cut by Ctrl-C"))
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


class InProcessExecutor:
    """Evaluates with ``fn`` on ``workers`` threads of this process, on the caller's thread
    (``pool="main"``: one at a time, where ``signal`` works), or on spawned processes
    (``pool="process"``, for a function that pickles). Thread-safe; futures never raise for
    evaluator errors, and ``raised`` keeps the exceptions the evaluator raised (for
    ``raise_on_exception``). ``originals`` maps example keys to the caller's own example
    objects, given to ``fn`` instead of the stored (JSON) payloads. ``validate(candidate)`` is
    the optional cheap check: None or True when valid, else a message (or False)."""

    def __init__(self, fn: Callable, workers: int, lm_handler: Optional[LMHandler] = None,
                 validate: Optional[Callable] = None, pool: str = "thread", originals: Optional[dict] = None,
                 capture_chars: int = CAPTURE_CHARS) -> None:
        self.fn, self.sig, self.lm_handler, self._validate = fn, Signature(fn), lm_handler, validate
        self.originals = originals or {}
        self.capture_chars, self._n, self.kind = capture_chars, (1 if pool == "main" else workers), pool
        self.raised: list[BaseException] = []
        self._meter = BusyMeter()
        if pool == "process":
            self._pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        else:
            self._pool = CallerThreadPool() if pool == "main" else \
                ThreadPoolExecutor(workers, thread_name_prefix="refract-eval")
            if oa._lm_transport is None:
                oa._lm_transport = _lm_in_process
        route_streams(True)
        self._closed = False

    @property
    def workers(self) -> int:
        return self._n

    def busy_seconds(self) -> float:
        return self._meter.busy_seconds()

    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        if task.example_key in self.originals:
            task = dataclasses.replace(task, example=self.originals[task.example_key])
        if self.kind == "process":
            fut = self._pool.submit(_evaluate_in_child, self.fn, task, self.capture_chars)
        else:
            fut = self._pool.submit(evaluate_captured, self.fn, self.sig, task, self.capture_chars,
                                    LMAccount(self.lm_handler, task), self.raised)
        fut.add_done_callback(self._count_busy)
        return fut

    def _count_busy(self, fut: Future) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._meter.add(fut.result().seconds)

    def validate(self, candidate: Any) -> Optional[str]:
        if self._validate is None:
            return None
        try:
            verdict = self._validate(candidate)
        except Exception as exc:
            return f"validate() failed: {describe(exc)[0]}"
        if verdict is None or verdict is True:
            return None
        return "validate() returned False" if verdict is False else str(verdict)

    def run_one(self, timeout: float) -> bool:
        """With ``pool="main"``, run one queued evaluation on this thread (see ``CallerThreadPool``)."""
        return self._pool.run_one(timeout)

    def wake(self) -> None:
        """With ``pool="main"``, end a ``run_one`` that waits."""
        if self.kind == "main":
            self._pool.wake()

    def close(self) -> None:
        """Cancel queued evaluations; wait for the running ones (threads cannot be killed)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        route_streams(False)
