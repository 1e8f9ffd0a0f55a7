"""Evaluating candidates on examples: cache, budget gate, recording, timeline.

``EvaluationService.evaluate`` is the one path from the engine to the executor. For each
(candidate, example) it (1) reuses this candidate's own recorded evaluation (a resumed step),
(2) reuses an evaluation of the same content on the same example (marked cached, no metric
call), in a branch also one its base run recorded (``engine.reuse``: marked ``reused_from``), or
(3) reserves a metric call from the budget and dispatches it to the worker pool,
recording the result the moment it arrives. A pair refused by the budget is left out of the
result: the caller sees fewer scores than keys and trims its work.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Callable, Optional

from storage import repo
from storage.db import Database
from storage.models import Candidate, Evaluation, Example

from engine.budget import Budget
from engine.executor import EvalOutcome, EvalTask, Executor
from engine.interrupt import Interrupt
from engine.known_results import KnownResults
from engine.opt_state import BestEvals
from engine.reuse import BaseEvaluations
from engine.search.second_look import Pace
from engine.state import to_evaluator


_INTERRUPT_POLL = 0.2  # seconds between looks at the interrupt while evaluations run


@dataclass
class Scored:
    score: float
    side_info: dict
    error: Optional[str]


class Timeline:
    """Events of the current step: (kind, start, end, candidate id), seconds from step start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.events: list[dict] = []

    def reset(self) -> None:
        with self._lock:
            self.t0 = time.monotonic()
            self.events = []

    def add(self, kind: str, start: float, end: float, candidate_id: str | None, **extra) -> None:
        with self._lock:
            self.events.append({"kind": kind, "start": round(start - self.t0, 4), "end": round(end - self.t0, 4),
                                "candidate_id": candidate_id, **extra})


class EvaluationService:
    def __init__(self, db: Database, run_id: str, executor: Executor, budget: Budget,
                 examples: dict[str, Example], single_text: bool, timeline: Timeline, opt_state_k: int = 0,
                 interrupt: Optional[Interrupt] = None, base: Optional[BaseEvaluations] = None) -> None:
        self.db, self.run_id, self.executor, self.budget = db, run_id, executor, budget
        self.base = base  # a branch: its base runs' evaluations of the same content, reused
        self.interrupt = interrupt or Interrupt()  # set: dispatch nothing more, cancel what is queued
        # what an evaluator's opt_state sees (0: it declares none, nothing is kept or sent)
        self.best_evals = BestEvals(opt_state_k)
        self.examples, self.single_text, self.timeline = examples, single_text, timeline
        # (content hash, example key) -> (owner candidate id, result future, executor future) of
        # a dispatched evaluation: two proposals needing the same content on the same example at
        # once (a parent chosen twice, siblings with the same text) pay for it once
        self._inflight: dict[tuple[str, str], tuple[str, Future, Future]] = {}
        self._lock = threading.Lock()
        self.remembered = KnownResults()  # what the database holds, for the recent candidates
        self._keys_by_pk = {e.pk: k for k, e in examples.items()}
        self._recorder = _Recorder(db, budget, self._remember)
        # At most 2·W validation evaluations queued or running, over all passes: the minibatch
        # tests that stand between a proposal and its next LM call then wait behind a wave or
        # two, not behind whole validation passes (asynchronous runs overlap them).
        self._validation_slots = threading.Semaphore(2 * executor.workers)
        self.pace = Pace()  # seconds per metric call (and, from RunContext.call_lm, per reflection)

    def close(self) -> None:
        self._recorder.close()

    def evaluate(self, cand: Candidate, keys: list[str], kind: str = "eval", charge: bool = True,
                 keep_going: Callable[[dict[str, Scored]], bool] | None = None,
                 interruptible: bool = True) -> dict[str, Scored]:
        """Scores of ``cand`` on ``keys`` (in any order). ``keep_going(results_so_far)`` is asked
        after each result; when it says False, queued evaluations are cancelled (early stop).
        So they are when the run's interrupt is set (unless not ``interruptible``); evaluations
        already running are awaited.
        Validation passes are fed to the pool a few at a time (see ``_validation_slots``)."""
        results = self._known(cand, keys)
        todo = [k for k in keys if k not in results]
        pending: dict[Future, str] = {}
        slots = self._validation_slots if kind == "validation" else None
        cut = self.interrupt.is_set if interruptible else (lambda: False)
        stop = cut() or (keep_going is not None and not keep_going(results))
        while True:
            while todo and not stop and (slots is None or slots.acquire(blocking=not pending)):
                key = todo.pop(0)
                fut = self._dispatch(cand, key, kind, charge)
                if fut is None:  # refused by the budget
                    if slots is not None:
                        slots.release()
                    continue
                pending[fut] = key
            if stop:
                for fut in list(pending):
                    if self._cancel(cand, pending[fut]):
                        pending.pop(fut)
                        if slots is not None:
                            slots.release()
            if not pending:
                break
            finished, _ = wait(list(pending), timeout=_INTERRUPT_POLL, return_when=FIRST_COMPLETED)
            for fut in finished:
                key = pending.pop(fut)
                if slots is not None:
                    slots.release()
                if not fut.cancelled():
                    results[key] = fut.result()
            if keep_going is not None and not stop:
                stop = not keep_going(results)
            stop = stop or cut()
        return results

    def known(self, cand: Candidate, keys: list[str]) -> dict[str, Scored]:
        """The results of ``cand`` on ``keys`` that exist already (see ``_known``); dispatches
        nothing and costs no metric call."""
        return self._known(cand, keys)

    def _known(self, cand: Candidate, keys: list[str]) -> dict[str, Scored]:
        """This candidate's recorded evaluations on ``keys``, plus copies (marked cached, no
        metric call) of evaluations of the same content by other candidates, of this run or (a
        branch) of its base runs (marked ``reused_from``). Those of a recent candidate come from
        memory (``engine.known_results``)."""
        remembered = self.remembered.get(cand.id, keys)
        if len(remembered) == len(set(keys)):
            return remembered
        pks = {self.examples[k].pk: k for k in keys if k not in remembered}
        own, cached = repo.known_evaluations(self.db, self.run_id, cand.id, cand.content_hash, list(pks))
        missing = [pk for pk in pks if pk not in own and pk not in cached]
        if self.base is not None and missing:
            cached.update(self.base.find(cand.content_hash, missing))
        if cached:
            copies = [(self._row(cand, self.examples[pks[pk]], e.score, e.side_info, e.error, 0.0, 0.0, cached=True,
                                 reused_from=e.run_id if e.run_id != self.run_id else None), False)
                      for pk, e in cached.items()]
            for row, _ in repo.record_evaluations(self.db, copies):
                own[row.example_pk] = row
        found = {pks[pk]: Scored(e.score, e.side_info, e.error) for pk, e in own.items()}
        self.remembered.add(cand.id, found)
        return {**remembered, **found}

    def _remember(self, row: Evaluation) -> None:
        key = self._keys_by_pk.get(row.example_pk)
        if key is not None:
            self.remembered.add(row.candidate_id, {key: Scored(row.score, row.side_info, row.error)})

    def _dispatch(self, cand: Candidate, key: str, kind: str, charge: bool) -> Optional[Future]:
        """Send one evaluation to the pool (or join the one in flight). None if the budget
        refuses it. The result is recorded by the recorder thread, exactly once."""
        slot = (cand.content_hash, key)
        with self._lock:
            if slot in self._inflight:
                owner, shared, _ = self._inflight[slot]
                return shared if owner == cand.id else self._copy_when_done(cand, key, shared)
            if charge and not self.budget.reserve_metric_call():
                return None
            task = EvalTask(candidate=to_evaluator(cand.content, self.single_text), example=self.examples[key].payload,
                            example_key=key, candidate_id=cand.id, kind=kind, opt_state=self.best_evals.get(key))
            result: Future = Future()
            raw = self.executor.submit(task)
            self._inflight[slot] = (cand.id, result, raw)
        t_submit = time.monotonic()

        def finish(raw: Future) -> None:
            if raw.cancelled() or task.lm_interrupted:  # never run, or its lm() call was cut: not a result
                if charge:
                    self.budget.settle_metric_call(charged=False)
                result.cancel()
            else:
                try:
                    out: EvalOutcome = raw.result()
                except Exception as exc:  # the executor itself failed: still an outcome, never a crash
                    out = EvalOutcome(score=0.0, side_info={}, error=f"executor error: {exc}")
                end = time.monotonic()
                self.timeline.add(kind, max(t_submit, end - out.seconds), end, cand.id, example=key)
                self.pace.note_eval(out.seconds)
                self.best_evals.add(key, out.score, out.side_info)
                row = self._row(cand, self.examples[key], out.score, out.side_info, out.error, out.seconds,
                                out.lm_cost_usd, cached=False)
                self._recorder.put(row, charge, result, Scored(out.score, out.side_info, out.error))
            with self._lock:
                self._inflight.pop(slot, None)

        raw.add_done_callback(finish)
        return result

    def _copy_when_done(self, cand: Candidate, key: str, shared: Future) -> Future:
        """This candidate's own (cached, free) row once the shared evaluation has a result."""
        mine: Future = Future()

        def copy(done: Future) -> None:
            if done.cancelled() or done.exception() is not None:
                mine.cancel()
                return
            r: Scored = done.result()
            row = self._row(cand, self.examples[key], r.score, r.side_info, r.error, 0.0, 0.0, cached=True)
            self._recorder.put(row, False, mine, r)

        shared.add_done_callback(copy)
        return mine

    def _cancel(self, cand: Candidate, key: str) -> bool:
        """Cancel a queued evaluation this candidate owns. False when it already runs or ran
        (its result is then awaited and kept: a paid-for score is never dropped)."""
        with self._lock:
            entry = self._inflight.get((cand.content_hash, key))
        return entry is not None and entry[0] == cand.id and entry[2].cancel()

    def _row(self, cand: Candidate, ex: Example, score: float, side_info: dict, error: Optional[str],
             seconds: float, cost: float, cached: bool, reused_from: Optional[str] = None) -> Evaluation:
        return Evaluation(run_id=self.run_id, candidate_id=cand.id, example_pk=ex.pk, content_hash=cand.content_hash,
                          score=score, side_info=side_info or {}, error=error, seconds=seconds, cost_usd=cost,
                          cached=cached, reused_from=reused_from)


class _Recorder:
    """Writes evaluation results from a thread of its own, all that arrived together in one
    transaction, then resolves their futures. So a pool worker gets its next task without
    waiting for a database commit, and a busy step costs few commits."""

    def __init__(self, db: Database, budget: Budget, on_saved: Callable[[Evaluation], None]) -> None:
        self.db, self.budget, self.on_saved = db, budget, on_saved  # on_saved: the row as stored
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="recorder")
        self._thread.start()

    def put(self, row: Evaluation, charge: bool, result: Future, scored: Scored) -> None:
        self._queue.put((row, charge, result, scored))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get())
            closing = None in batch
            items = [b for b in batch if b is not None]
            if items:
                self._write(items)
            if closing:
                return

    def _write(self, items: list) -> None:
        try:
            saved = repo.record_evaluations(self.db, [(row, charge) for row, charge, _, _ in items])
        except Exception as exc:  # the waiters see the database failure
            for _, charge, result, _ in items:
                if charge:
                    self.budget.settle_metric_call(charged=False)
                result.set_exception(exc)
            return
        for (_, charge, result, scored), (row, inserted) in zip(items, saved):
            if charge:
                self.budget.settle_metric_call(charged=inserted)
            self.on_saved(row)
            result.set_result(scored)
