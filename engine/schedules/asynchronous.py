"""The asynchronous schedule (``[search] schedule = "async"``): no step barrier.

Up to C = P×K proposals are in flight. Whenever one finishes — accepted or not — the next one
starts at once and chooses its parent from the frontier as it is *then*, so an improvement is
built on by the very next proposal while the others keep the workers busy. A proposal is
select → parent minibatch → reflect → child minibatch → (if it improved) validation pass, all
in its own thread; every improving child is validated (there is no step to choose within).
Human commands are applied between proposals, in the loop thread.

With ``merge_siblings``, an improving child is not validated at once: it waits with the other
improving children that arrived meanwhile (siblings, often of one parent), and a *combiner*
job — one at a time, in one of the C slots — asks the reflection LM for one child keeping all
their fixes (``engine.search.sibling_merge``) and validates that merge instead of each of them; when
the merge loses a gain, the most promising of them is validated in its place. So a validation
pass, the expensive part of a proposal, carries several fixes at once, while the proposals go on
around it. A lone waiting child is combined with nothing: it is validated when no proposal that
could join it is still running.

Records. There is no barrier, but there are still *steps*: proposal n belongs to step n // C
(what an earlier version called a "wave"). A step has a Step row with its parents, proposals and
validated children, its metric calls and cost, the timeline events of its candidates, and its
workers' utilisation; the row is closed (``engine.schedules.base.close_step``) once the step and every
earlier step are done, so ``steps_done`` counts closed steps in both schedules. Each proposal's
candidate keeps the time it started (parent
chosen) and finished (validation done) and the frontier version it started from.

Budget. A proposal starts only when the metric calls for its minibatch tests can be reserved
as a block (``Budget.reserve_block``) while leaving room for one validation pass, as a
synchronous step plans its batch; a combiner reserves its merge test and one validation pass.
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
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Literal, Optional

from storage import repo
from storage.models import Step, utcnow
from storage.states import RunStatus

from engine.context import RunContext
from engine.search.lineage import ancestors
from engine.search.proposal import run_proposal
from engine.runtime.model import async_rate
from engine.search.sampling import EpochSampler
from engine.search.selection import make_selector, select_parents
from engine.schedules.base import LOST, AfterStep, Decision, Gate, close_step
from engine.search.sibling_merge import MAX_SIBLINGS, combine, sibling_from_minibatch, sibling_from_validation
from engine.state import deterministic_id
from engine.schedules.validation import reject, step_rng, validate_child

log = logging.getLogger("refract.engine")


@dataclass
class _Job:
    kind: Literal["proposal", "combine"]  # a combiner merges the waiting improved children
    step: int
    slot: int
    parent_id: str = ""
    k: int = 0
    minibatch: list[str] = field(default_factory=list)
    members: list = field(default_factory=list)  # combiner: the waiting children (id, gain)
    block: object = None
    started: float = 0.0
    started_at: object = None
    frontier_version: int = 0
    # filled by the job
    child_id: Optional[str] = None
    improved: bool = False
    gain: float = 0.0
    validated: bool = False
    evaluable: bool = False
    validated_id: Optional[str] = None  # combiner: the child or merge it validated


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
        self.waiting: list[tuple[str, float]] = []  # improving children not yet validated (id, gain)
        self.idle = 0
        self.t0 = time.monotonic()

    # -- the loop ------------------------------------------------------------------------

    def run(self, gate: Gate, after_step: AfterStep) -> Decision:
        self.after_step = after_step
        decision: Optional[Decision] = None
        with ThreadPoolExecutor(max_workers=self.c, thread_name_prefix="async-proposal") as pool:
            while True:
                while len(self.inflight) < self.c:
                    if decision is None:
                        decision, _ = gate()
                    if decision is None:
                        job = self._next_job()
                        if job is None and not self.inflight and not self.waiting:
                            decision = Decision(RunStatus.COMPLETED, self._why_no_room())
                    elif decision.status != LOST and not self.ctx.interrupt.is_set():
                        job = self._combiner(len(self.ctx.val_keys))  # stopping: improved children still validated
                    else:
                        job = None
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
        self._unvalidated()
        self._close_steps(force=True)
        if decision is not None and decision.room_spent:
            decision = Decision(RunStatus.COMPLETED, self._why_no_room())  # the counts once the work in flight finished
        return decision or Decision(RunStatus.COMPLETED, "")

    def _unvalidated(self) -> None:
        """Improved children still waiting for the combiner when the work was interrupted:
        rejected, saying why (a pin validates one)."""
        if not self.ctx.interrupt.is_set():
            return
        for cid, _ in self.waiting:
            reject(self.ctx, cid, f"improved on its minibatch; its validation was interrupted "
                                  f"({self.ctx.interrupt.reason}). Pin it to validate it")
        self.waiting = []

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
        job = self._combiner(n_val)
        if job is not None:
            return job
        if ctx.budget.affordable_lm_calls() == 0:  # its parent's minibatch would be paid for nothing
            return None
        # a proposal's block holds its minibatch tests; room for one validation pass is kept
        # free (as a synchronous step keeps it for its whole batch), from which validations draw
        block = ctx.budget.reserve_block(2 * self.m, keep_free=n_val if self.inflight else 0)
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
        k = sum(1 for j in self.inflight.values() if j.kind == "proposal" and j.parent_id == parent_id)
        self.next_n += 1
        job = _Job("proposal", index, slot, parent_id=parent_id, k=k, minibatch=self.sampler.batch(n), block=block)
        w = self._register(job)
        w.step.parent_ids = w.step.parent_ids + [parent_id]
        w.step.parent_reasons = {**w.step.parent_reasons, parent_id: reason}
        with ctx.state.lock:
            ctx.state.last_chosen[parent_id] = index
        return job

    @property
    def combining(self) -> bool:
        """With merge_siblings, children are validated by the combiner, not by their proposal."""
        return self.ctx.cfg.search.merge_siblings

    def _combiner(self, n_val: int) -> Optional[_Job]:
        """A combiner job for the waiting children: when two or more wait, or one waits and no
        proposal that could join it is running; never two combiners at once."""
        if not self.waiting or any(j.kind == "combine" for j in self.inflight.values()):
            return None
        if len(self.waiting) < 2 and any(j.kind == "proposal" for j in self.inflight.values()):
            return None
        members = sorted(self.waiting, key=lambda w: (-w[1], w[0]))[:MAX_SIBLINGS]
        block = self.ctx.budget.reserve_block(len(members) * self.m + n_val, at_least=0)
        if block is None:  # out of time or money: they stay improved but unvalidated, like a cut step
            self.waiting = []
            return None
        self.waiting = [w for w in self.waiting if w not in members]
        job = _Job("combine", self.next_n // self.c, -1, members=members, block=block)
        self._register(job)
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
            if job.kind == "combine":
                self._combine_job(pctx, job)
            else:
                self._proposal_job(pctx, job)

    def _proposal_job(self, pctx: RunContext, job: _Job) -> None:
        parent = pctx.state.candidates[job.parent_id]
        parent_results = pctx.evals.evaluate(parent, job.minibatch, kind="minibatch")
        outcome = run_proposal(pctx, parent, job.slot, job.k, job.minibatch, parent_results)
        job.child_id, job.improved, job.gain = outcome.child_id, outcome.improved, outcome.gain
        if outcome.improved and not self.combining:
            validate_child(pctx, outcome.child_id)
            job.validated = True
        child = pctx.state.candidates[outcome.child_id]
        job.evaluable = bool(child.minibatch_keys) and child.minibatch_score is not None
        child.started_at, child.frontier_version, child.finished_at = job.started_at, job.frontier_version, utcnow()
        pctx.save(child)

    def _combine_job(self, pctx: RunContext, job: _Job) -> None:
        """Merge the waiting children and validate the merge, or (merge lost a gain, or only
        one child waited) validate the most promising child; the others are passed over."""
        ids = [cid for cid, _ in job.members]
        siblings = [s for s in (sibling_from_minibatch(pctx, cid) for cid in ids) if s is not None]
        best = self._best_since(pctx, siblings)
        if best is not None:
            siblings = [best] + siblings[: MAX_SIBLINGS - 1]
        chosen = None
        if len(siblings) >= 2:
            merge_id = deterministic_id(pctx.run_id, job.step, *sorted(ids), "merge")
            chosen = combine(pctx, siblings, merge_id, job.step)
            merged = pctx.state.candidates.get(merge_id)
            if merged is not None:
                job.child_id = merge_id
                merged.started_at, merged.frontier_version = job.started_at, job.frontier_version
                pctx.save(merged)
        why = (f"improved on its minibatch; combined into the merge {chosen}, which was validated instead"
               if chosen and chosen not in ids else None)
        chosen = chosen or ids[0]  # members are ordered most promising first
        validate_child(pctx, chosen)
        job.validated_id = chosen
        for cid in ids:
            if cid != chosen:
                reject(pctx, cid, why or (f"improved on its minibatch; {chosen} was validated instead (it already held "
                                          "these changes, or their merge lost a gain)"))

    @staticmethod
    def _best_since(pctx: RunContext, siblings: list) -> Optional[object]:
        """The current best, as one more version to combine, when it descends from the waiting
        children's parent (they started from a frontier that has moved on since): so the merge
        builds on the best instead of forking an older version."""
        best_id, _ = pctx.state.best()
        parents = {s.parent.id for s in siblings}
        if best_id is None or len(parents) != 1 or best_id in parents | {s.cand.id for s in siblings}:
            return None
        base_id = parents.pop()
        if base_id not in ancestors(pctx.state.candidates, best_id):
            return None
        return sibling_from_validation(pctx, best_id, base_id)

    # -- finishing -----------------------------------------------------------------------

    def _finished(self, job: _Job) -> None:
        ctx = self.ctx
        w = self.open_steps[job.step]
        w.done += 1
        w.metric_calls += job.block.drawn
        if job.validated_id:
            w.validated.append(job.validated_id)
        if job.child_id:
            w.children.append(job.child_id)
            if job.validated:
                w.validated.append(job.child_id)
            cand = ctx.state.candidates.get(job.child_id)
            if cand is not None and cand.lm_call_id is not None:
                call = repo.get_lm_call(ctx.db, cand.lm_call_id)
                w.cost_usd += call.cost_usd if call else 0.0
        if job.kind == "proposal":
            self.idle = 0 if job.evaluable else self.idle + 1
            if not ctx.interrupt.is_set():  # a cut proposal says nothing about how long one takes
                ctx.budget.note_duration(time.monotonic() - job.started, "proposal")
        if job.kind == "proposal" and job.improved and self.combining:
            self.waiting.append((job.child_id, job.gain))
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
