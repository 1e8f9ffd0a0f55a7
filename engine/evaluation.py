"""Evaluating candidates on examples: cache, budget gate, recording, timeline.

``EvaluationService.evaluate`` is the one path from the engine to the executor. For each
(candidate, example) it (1) reuses this candidate's own recorded evaluation (a resumed step),
(2) reuses an evaluation of the same content on the same example (marked cached, no metric
call), or (3) reserves a metric call from the budget and dispatches it to the worker pool,
recording the result the moment it arrives. A pair refused by the budget is left out of the
result: the caller sees fewer scores than keys and trims its work.
"""

from __future__ import annotations

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
from engine.state import to_evaluator


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
                 examples: dict[str, Example], single_text: bool, timeline: Timeline) -> None:
        self.db, self.run_id, self.executor, self.budget = db, run_id, executor, budget
        self.examples, self.single_text, self.timeline = examples, single_text, timeline
        # (candidate id, example key) -> (result future, executor future) of a dispatched
        # evaluation, so that two proposals needing the same pair at once pay for it once
        self._inflight: dict[tuple[str, str], tuple[Future, Future]] = {}
        self._lock = threading.Lock()

    def evaluate(self, cand: Candidate, keys: list[str], kind: str = "eval", charge: bool = True,
                 keep_going: Callable[[dict[str, Scored]], bool] | None = None) -> dict[str, Scored]:
        """Scores of ``cand`` on ``keys`` (in any order). ``keep_going(results_so_far)`` is asked
        after each result; when it says False, queued evaluations are cancelled (early stop)."""
        results: dict[str, Scored] = {}
        pending: dict[Future, str] = {}
        for key in keys:
            known = self._known(cand, key)
            if known is not None:
                results[key] = known
                continue
            fut = self._dispatch(cand, key, kind, charge)
            if fut is not None:
                pending[fut] = key
        stop = keep_going is not None and not keep_going(results)
        while pending:
            if stop:
                for fut in list(pending):
                    if self._cancel(cand.id, pending[fut]):
                        pending.pop(fut)
                if not pending:
                    break
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                key = pending.pop(fut)
                if not fut.cancelled():
                    results[key] = fut.result()
            if keep_going is not None and not stop:
                stop = not keep_going(results)
        return results

    def _known(self, cand: Candidate, key: str) -> Optional[Scored]:
        """This candidate's recorded evaluation, or a copy of one of the same content."""
        ex = self.examples[key]
        done = repo.get_evaluation(self.db, cand.id, ex.pk)
        if done is None:
            hit = repo.cached_evaluation(self.db, self.run_id, cand.content_hash, ex.pk)
            if hit is None:
                return None
            done, _ = repo.record_evaluation(self.db, self._row(cand, ex, hit.score, hit.side_info, hit.error, 0.0, 0.0,
                                                                cached=True), metric_call=False)
        return Scored(done.score, done.side_info, done.error)

    def _dispatch(self, cand: Candidate, key: str, kind: str, charge: bool) -> Optional[Future]:
        """Send one evaluation to the pool (or join the one in flight). None if the budget
        refuses it. The result is recorded by the pool's callback, exactly once."""
        with self._lock:
            if (cand.id, key) in self._inflight:
                return self._inflight[(cand.id, key)][0]
            if charge and not self.budget.reserve_metric_call():
                return None
            task = EvalTask(candidate=to_evaluator(cand.content, self.single_text), example=self.examples[key].payload,
                            example_key=key, candidate_id=cand.id)
            result: Future = Future()
            raw = self.executor.submit(task)
            self._inflight[(cand.id, key)] = (result, raw)
        t_submit = time.monotonic()

        def on_done(raw: Future) -> None:
            with self._lock:
                self._inflight.pop((cand.id, key), None)
            if raw.cancelled():
                if charge:
                    self.budget.settle_metric_call(charged=False)
                result.cancel()
                return
            try:
                result.set_result(self._record(cand, key, raw, t_submit, kind, charge))
            except Exception as exc:  # a database failure: the waiter sees it
                result.set_exception(exc)

        raw.add_done_callback(on_done)
        return result

    def _cancel(self, candidate_id: str, key: str) -> bool:
        with self._lock:
            pair = self._inflight.get((candidate_id, key))
        return pair is None or pair[1].cancel()

    def _record(self, cand: Candidate, key: str, fut: Future, t_submit: float, kind: str, charge: bool) -> Scored:
        try:
            out: EvalOutcome = fut.result()
        except Exception as exc:  # the executor itself failed: still an outcome, never a crash
            out = EvalOutcome(score=0.0, side_info={}, error=f"executor error: {exc}")
        end = time.monotonic()
        self.timeline.add(kind, max(t_submit, end - out.seconds), end, cand.id, example=key)
        row = self._row(cand, self.examples[key], out.score, out.side_info, out.error, out.seconds, out.lm_cost_usd,
                        cached=False)
        _, inserted = repo.record_evaluation(self.db, row, metric_call=charge)
        if charge:
            self.budget.settle_metric_call(charged=inserted)
        return Scored(out.score, out.side_info, out.error)

    def _row(self, cand: Candidate, ex: Example, score: float, side_info: dict, error: Optional[str],
             seconds: float, cost: float, cached: bool) -> Evaluation:
        return Evaluation(run_id=self.run_id, candidate_id=cand.id, example_pk=ex.pk, content_hash=cand.content_hash,
                          score=score, side_info=side_info or {}, error=error, seconds=seconds, cost_usd=cost,
                          cached=cached)
