"""The asynchronous schedule (``[search] schedule = "async"``): no step barrier.

Up to C = P×K proposals are in flight. Whenever one finishes — accepted or not — the next one
starts at once and chooses its parent from the frontier as it is *then*, so an improvement is
built on by the very next proposal while the others keep the workers busy. A proposal is
select → parent minibatch → reflect → child minibatch → (if it improved) validation pass, all
in its own thread; every improving child is validated (there is no step to choose within).
Human commands are applied between proposals, in the loop thread.

With ``merge_siblings``, improving children are *re-based* (``engine.schedules.onto_best``): they
queue, and one turn at a time merges the waiting ones with the current best over their nearest
common ancestor (a line-level three-way merge, the reflection LM only for a real conflict) and
validates the merge instead of them; a lone child whose parent is the best is validated as it is.
The turn runs in the thread of the proposal that found the queue ready; the others finish at
once, so every validation pass builds on the newest best instead of forking an older version.

With ``merge`` (the system-aware merge), each fully validated child that did not become the best
in one lineage with it is merged into the best over their nearest common ancestor
(``engine.search.merge.find_rebase``; three-way only, no LM call, at most ``max_merges``).

Records. There is no barrier, but there are still *steps*: proposal n belongs to step n // C
(what an earlier version called a "wave"). A step has a Step row with its parents, proposals and
validated children, its metric calls and cost, the timeline events of its candidates, and its
workers' utilisation; the row is closed (``engine.schedules.base.close_step``) once the step and every
earlier step are done, so ``steps_done`` counts closed steps in both schedules. Each proposal's
candidate keeps the time it started (parent
chosen) and finished (validation done) and the frontier version it started from.

Budget. A proposal starts only when the metric calls for its minibatch tests can be reserved
as a block (``Budget.reserve_block``) while leaving room for one validation pass, as a
synchronous step plans its batch, and for one more per turn that the children queued for
re-basing will take.
Validation passes beyond a proposal's block draw from what is left, so near the end of the
budget a pass may be cut short (recorded as such). The budget is never exceeded.

Reproducibility with a fixed seed — what still holds:
- proposal n's random choices (its parent sample, its minibatch) come from generators derived
  from (seed, n), its id from (run, step, slot, parent, sibling index), its LM request from its
  prompt and sample index; so two proposals that start from the same frontier are identical,
  and the same request is answered from the LM cache;
- every choice is recorded (the frontier version each proposal saw, why its parent was chosen),
  so a run can always be explained after the fact;
- with C = 1 the run is the synchronous 1×1 run, exactly.
What does not hold: *which* frontier proposal n sees depends on which earlier proposals have
finished when it starts, i.e. on LM and evaluator timing, so two runs with the same seed can
choose different parents from proposal 2 on, and diverge. Resuming after a crash keeps every
closed step; the proposals of steps not yet closed are redone from the frontier as it is then
(evaluations of texts already evaluated are reused, not paid again).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Optional

from storage import repo
from storage.models import Step, utcnow
from storage.states import Origin, RunStatus

from engine.context import RunContext
from engine.search.merge import find_rebase, test_merge
from engine.search import minibatch
from engine.search.proposal import run_proposal
from engine.runtime.model import async_rate
from engine.search.sampling import EpochSampler
from engine.search.sibling_merge import MAX_SIBLINGS
from engine.search.selection import make_selector, select_parents
from engine.schedules.base import AfterStep, Decision, Gate, close_step
from engine.schedules.onto_best import QUORUM, OntoBest
from engine.state import deterministic_id
from engine.search.validation import step_rng, validate_child

log = logging.getLogger("refract.engine")


def room_to_keep(n_val: int, queued: int, inflight: bool) -> int:
    """Metric calls a new proposal must leave unreserved. Its block holds its minibatch tests;
    room for one validation pass is kept free (as a synchronous step keeps it for its whole
    batch), from which validations draw, and one more for each turn that the improving children
    ``queued`` for re-basing will take (up to MAX_SIBLINGS − 1 a turn): near the end of the
    budget, what was found is validated before anything new starts. With nothing in flight,
    nothing is kept: the budget's tail goes to one more proposal rather than to no one."""
    if not inflight:
        return 0
    return n_val * (1 + -(-queued // (MAX_SIBLINGS - 1)))


@dataclass
class _Job:
    """One proposal in flight, and what it made."""

    step: int
    slot: int
    parent_id: str = ""
    k: int = 0
    n: int = 0  # its epoch slice: ``EpochSampler.batch(n)``, the start of its minibatch
    block: object = None
    started: float = 0.0
    started_at: object = None
    frontier_version: int = 0
    # filled by the job
    child_id: Optional[str] = None
    improved: bool = False
    evaluable: bool = False
    merge_ids: list[str] = field(default_factory=list)  # merges it made (re-basing its child)
    validated: list[str] = field(default_factory=list)  # what it validated: its child, or merges


@dataclass
class _OpenStep:
    """A step of this schedule whose proposals are not all finished yet."""

    step: Step
    started: float
    busy0: float
    jobs: int = 0
    done: int = 0
    children: list[str] = field(default_factory=list)
    validated: list[str] = field(default_factory=list)
    metric_calls: int = 0
    cost_usd: float = 0.0


class AsyncSchedule:
    """Runs proposals with up to C in flight until the gate says stop, then drains (an
    ``engine.schedules.base.Schedule``). Ends with "no progress" after ``max_idle`` × C proposals in a
    row made no evaluable candidate."""

    def __init__(self, ctx: RunContext, max_idle: int) -> None:
        self.ctx = ctx
        self.after_step: AfterStep = lambda record: None
        cfg = ctx.cfg.search
        self.c = cfg.batch_size
        self.m = min(cfg.minibatch_size, len(ctx.train_keys))
        self.max_idle = max_idle * self.c
        self.sampler = EpochSampler(ctx.train_keys, cfg.minibatch_size, cfg.seed)
        self.selector = make_selector(cfg.selection, cfg.epsilon, cfg.top_k_pareto_k)
        self.next_n = ctx.step_index * self.c  # the first proposal of the first step not closed
        self.open_steps: dict[int, _OpenStep] = {}
        self.inflight: dict[Future, _Job] = {}
        self.idle = 0
        self.t0 = time.monotonic()
        self.merge_lock = threading.Lock()
        self.onto_best = OntoBest(min(QUORUM, self.c), lambda: (ctx.budget.expected_duration() or float("inf")) / 2)
        self.merges = sum(1 for c in ctx.state.candidates.values() if c.origin == Origin.MERGE)

    # -- the loop ------------------------------------------------------------------------

    def run(self, gate: Gate, after_step: AfterStep) -> Decision:
        self.after_step = after_step
        decision: Optional[Decision] = None
        with ThreadPoolExecutor(max_workers=self.c, thread_name_prefix="async-proposal") as pool:
            while True:
                while len(self.inflight) < self.c and decision is None:  # stopping: no new proposal
                    decision, _ = gate()
                    job = self._next_job() if decision is None else None
                    if job is None and decision is None and not self.inflight:
                        decision = Decision(RunStatus.COMPLETED, self._why_no_room())
                    if job is None:
                        break
                    self.inflight[pool.submit(self._run_job, job)] = job
                if not self.inflight:
                    break
                done, _ = wait(list(self.inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    job = self.inflight.pop(fut)
                    fut.result()  # an engine error in a job propagates (the run fails, recorded)
                    self._finished(job)
                if decision is None and self.idle >= self.max_idle:
                    why = (f"no progress: the last {self.idle} proposals made no evaluable candidate (the reflection "
                           "LM keeps repeating or failing)")
                    decision = Decision(RunStatus.COMPLETED, why)
        self._close_steps(force=True)
        if decision is not None and decision.room_spent:
            decision = Decision(RunStatus.COMPLETED, self._why_no_room())  # the counts once the work in flight finished
        return decision or Decision(RunStatus.COMPLETED, "")

    def _why_no_room(self) -> str:
        b = self.ctx.budget
        if b.affordable_lm_calls() == 0:
            return f"cost budget spent (${b.cost_usd:.4f} of ${b.cfg.max_cost_usd}; no room for another LM call)"
        return (f"metric-call budget spent ({b.metric_calls} of {b.cfg.max_metric_calls}; too few left for "
                f"another proposal's minibatch tests, {2 * self.m})")

    # -- starting ------------------------------------------------------------------------

    def _next_job(self) -> Optional[_Job]:
        ctx = self.ctx
        n_val = len(ctx.val_keys)
        if ctx.budget.affordable_lm_calls() == 0:  # its parent's minibatch would be paid for nothing
            return None
        queued = self.onto_best.waiting() if ctx.cfg.search.merge_siblings else 0
        block = ctx.budget.reserve_block(2 * self.m, keep_free=room_to_keep(n_val, queued, bool(self.inflight)))
        if block is None:
            return None
        n = self.next_n
        index, slot = divmod(n, self.c)
        cfg = ctx.cfg.search
        picks = select_parents(self.selector, ctx.state.view(index), 1, step_rng(cfg.seed, n), cfg.pin_every)
        if not picks:
            self._release(block)
            return None
        parent_id, reason = picks[0]
        k = sum(1 for j in self.inflight.values() if j.parent_id == parent_id)
        self.next_n += 1
        job = _Job(index, slot, parent_id=parent_id, k=k, n=n, block=block)
        self.onto_best.started()
        w = self._register(job)
        w.step.parent_ids = w.step.parent_ids + [parent_id]
        w.step.parent_reasons = {**w.step.parent_reasons, parent_id: reason}
        with ctx.state.lock:
            ctx.state.last_chosen[parent_id] = index
        return job

    def _release(self, block) -> None:
        with self.ctx.budget.drawing_from(block):
            pass

    def _register(self, job: _Job) -> _OpenStep:
        ctx = self.ctx
        job.started, job.started_at, job.frontier_version = time.monotonic(), utcnow(), ctx.state.frontier_version
        w = self.open_steps.get(job.step)
        if w is None:
            step = repo.get_or_create_step(ctx.db, ctx.run_id, job.step)
            step.parent_ids, step.parent_reasons, step.proposal_ids, step.accepted_ids = [], {}, [], []
            step.started_at = utcnow()
            w = self.open_steps[job.step] = _OpenStep(step, job.started, ctx.evals.executor.busy_seconds())
        w.jobs += 1
        return w

    # -- one job, in its own thread ------------------------------------------------------

    def _run_job(self, job: _Job) -> None:
        pctx = self.ctx.at_step(job.step)
        with pctx.budget.drawing_from(job.block):
            self._proposal_job(pctx, job)

    def _proposal_job(self, pctx: RunContext, job: _Job) -> None:
        parent = pctx.state.candidates[job.parent_id]
        outcome = run_proposal(pctx, parent, job.slot, job.k, minibatch.for_parent(pctx, parent, self.sampler, job.n))
        job.child_id, job.improved = outcome.child_id, outcome.improved
        child = pctx.state.candidates[outcome.child_id]
        job.evaluable = bool(child.minibatch_keys) and child.minibatch_score is not None
        child.started_at, child.frontier_version, child.finished_at = job.started_at, job.frontier_version, utcnow()
        pctx.save(child)  # before it is offered: from then on another proposal's thread may decide its fate
        if pctx.cfg.search.merge_siblings:
            offered = outcome.child_id if outcome.improved else None
            job.validated += self.onto_best.decided(pctx, offered, job.step, lambda m: self._made(job, m))
        elif outcome.improved:
            validate_child(pctx, outcome.child_id)
            job.validated.append(outcome.child_id)
            self._rebase(pctx, job)

    def _made(self, job: _Job, merged) -> None:
        """A merge written in ``job``'s thread (re-basing its own child or others' queued ones)."""
        job.merge_ids.append(merged.id)
        merged.started_at, merged.frontier_version = job.started_at, job.frontier_version
        self.ctx.save(merged)

    def _rebase(self, pctx: RunContext, job: _Job) -> None:
        """With ``merge``: the validated child merged into the current best (``find_rebase``),
        while fewer than ``max_merges`` merges were tried; a validated merge is recorded."""
        search = pctx.cfg.search
        if not search.merge:
            return
        with self.merge_lock:  # so that concurrent proposals never try more than max_merges
            found = find_rebase(pctx, job.child_id) if self.merges < search.max_merges else None
            self.merges += found is not None
        if found:
            merge_id = deterministic_id(pctx.run_id, job.step, *found[:2], "merge")
            job.merge_ids.append(merge_id)
            if test_merge(pctx, *found, job.step):
                job.validated.append(merge_id)

    # -- finishing -----------------------------------------------------------------------

    def _finished(self, job: _Job) -> None:
        ctx = self.ctx
        w = self.open_steps[job.step]
        w.done += 1
        w.metric_calls += job.block.drawn
        w.validated += job.validated
        for cid in ([job.child_id] if job.child_id else []) + job.merge_ids:
            w.children.append(cid)
            cand = ctx.state.candidates.get(cid)
            if cand is not None and cand.lm_call_id is not None:
                call = repo.get_lm_call(ctx.db, cand.lm_call_id)
                w.cost_usd += call.cost_usd if call else 0.0
        self.idle = 0 if job.evaluable else self.idle + 1
        if not ctx.interrupt.is_set():  # a cut proposal says nothing about how long one takes
            ctx.budget.note_duration(time.monotonic() - job.started, "proposal")
        self._close_steps()

    def _close_steps(self, force: bool = False) -> None:
        """Close finished steps in order (a step waits for every earlier one)."""
        ctx = self.ctx
        while ctx.step_index in self.open_steps:
            w = self.open_steps[ctx.step_index]
            if w.done < w.jobs or (not force and self.next_n < (ctx.step_index + 1) * self.c):
                return
            del self.open_steps[ctx.step_index]
            self.after_step(self._close(w))  # advances ctx.step_index

    def _close(self, w: _OpenStep):
        ctx, now = self.ctx, time.monotonic()
        step = w.step
        step.proposal_ids, step.accepted_ids = list(w.children), list(w.validated)
        step.metric_calls, step.cost_usd = w.metric_calls, w.cost_usd
        c = self.c
        record = close_step(ctx, step, events=self._step_events(w), proposals=w.jobs, seconds=now - w.started,
                            busy_seconds=ctx.evals.executor.busy_seconds() - w.busy0, since_previous=now - self.t0,
                            predict=lambda lat, t1: async_rate(c, lat)[0] * t1)
        self.t0 = now  # the next step's share of the run starts here
        return record

    def _step_events(self, w: _OpenStep) -> list[dict]:
        tl = self.ctx.timeline
        mine = set(w.children) | set(w.step.parent_ids)
        start = w.started - tl.t0
        with tl._lock:
            events = [e for e in tl.events if e.get("candidate_id") in mine and e["start"] >= start - 1e-3]
            tl.events = [e for e in tl.events if e["end"] >= start]  # older events belong to closed steps
        return [{**e, "start": round(e["start"] - start, 4), "end": round(e["end"] - start, 4)} for e in events]
