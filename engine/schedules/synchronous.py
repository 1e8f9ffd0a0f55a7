"""The synchronous schedule: one step of the batched loop at a time (docs/design.md §2, steps 1–5; §3 for
the schedules).

P parents are selected, each gets its own minibatch, P×K reflective proposals run
concurrently and share one worker pool. The step is trimmed to the metric calls left: a slot
(one proposal) is planned only when its minibatch tests and one validation pass still fit,
except that a step always gets one slot if its minibatch test fits. Of the improving children,
the ``accept`` rule chooses which pay a validation pass (all / the best / the top k by
minibatch gain); with ``merge_siblings`` the improving children are first combined into one
merged child, which is validated instead of them when it keeps all their gains; with the best
alone, the runner-up is validated too when the best did not beat its parent on the validation
set and a pass is cheap (``engine.search.runner_up``). Validation
passes run one after the other, most promising first, so that later ones can stop early
against the frontier the earlier ones updated (side by side when none can: ``validate_all``).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Optional

from storage import repo
from storage.models import Step, utcnow
from storage.states import RunStatus

from engine.context import RunContext
from engine.lm.providers import one_at_a_time
from engine.search.proposal import Outcome, run_proposal
from engine.search.runner_up import did_not_pay, pass_is_cheap
from engine.runtime.model import predict_step_speedup, shape_of
from engine.search import minibatch
from engine.search.minibatch import Minibatch
from engine.search.sampling import EpochSampler
from engine.schedules.base import AfterStep, Decision, Gate, StepRecord, close_step
from engine.schedules.claim_order import ClaimOrder
from engine.search.selection import make_selector, select_parents
from engine.search.sibling_merge import combine, sibling_from_minibatch
from engine.state import deterministic_id
from engine.stopping import no_progress
from engine.search.validation import reject, step_rng, validate_child


class SyncSchedule:
    """Steps one after the other; ends with "no progress" after ``max_idle`` idle steps in a row."""

    def __init__(self, ctx: RunContext, max_idle: int) -> None:
        self.ctx, self.max_idle = ctx, max_idle

    def run(self, gate: Gate, after_step: AfterStep) -> Decision:
        idle = 0
        while True:
            decision, applied = gate()
            if decision:
                return decision
            started = time.monotonic()
            record = run_step(self.ctx, repo.get_or_create_step(self.ctx.db, self.ctx.run_id, self.ctx.step_index),
                              applied)
            idle = idle + 1 if record.idle else 0
            after_step(record)
            # what a step costs the time budget runs until the next gate: recording it and the
            # system-aware merge after it count too (the step's own seconds left them out, and a
            # step started with just enough time by that measure ran past the limit)
            if not self.ctx.interrupt.is_set():  # a step cut short says nothing about how long one takes
                self.ctx.budget.note_duration(time.monotonic() - started)
            if idle >= self.max_idle:
                return Decision(RunStatus.COMPLETED,
                                no_progress(self.ctx.db, self.ctx.run_id, idle, self.ctx.step_index))


def choose_children(outcomes: list[Outcome], accept: str, top_k: int,
                    order: dict[str, str]) -> tuple[list[Outcome], list[Outcome]]:
    """Which improving children pay a validation pass: all, the best one, or the top k by
    minibatch gain per example judged (``Outcome.gain``). Returns (chosen, passed over), both
    ordered most promising first. Equal gains are ordered by ``order`` (child id -> content
    hash), not by the ids, which hash the run id: two runs with one seed choose the same child."""
    improved = sorted((o for o in outcomes if o.improved), key=lambda o: (-o.gain, order.get(o.child_id, ""), o.child_id))
    n = {"all": len(improved), "best": 1, "top_k": top_k}[accept]
    return improved[:n], improved[n:]


def plan_slots(child_costs: list[int], parent_costs: list[int], per_parent: int, affordable_lm_calls: Optional[int],
               metric_calls_left: Optional[int], n_val: int) -> list[tuple[int, int]]:
    """The (parent, proposal) slots a step can pay for, in order. Parent p's child costs
    ``child_costs[p]`` metric calls and its first proposal also pays ``parent_costs[p]`` (its
    minibatch results not yet known). No more slots than ``affordable_lm_calls`` (a proposal the
    dollar cap cannot pay would waste its minibatch); a slot is kept while its minibatch tests
    plus one validation pass (``n_val``) fit in ``metric_calls_left``. When not even one slot and
    a validation pass fit (the budget's tail), the step takes as many slots as their minibatch
    tests fit, at once, rather than one lone proposal per step. None means no limit."""
    slots = [(p, k) for p in range(len(child_costs)) for k in range(per_parent)]
    if affordable_lm_calls is not None:
        slots = slots[:affordable_lm_calls]
    if metric_calls_left is None:
        return slots
    costs = [child_costs[p] + (parent_costs[p] if k == 0 else 0) for p, k in slots]
    for room in (metric_calls_left - n_val, metric_calls_left):
        n, total = 0, 0
        while n < len(slots) and total + costs[n] <= room:
            total += costs[n]
            n += 1
        if n:
            return slots[:n]
    return []


def _plan(ctx: RunContext, parent_ids: list[str], minibatches: list[list[str]]) -> list[tuple[int, int]]:
    parents = [ctx.state.candidates[pid] for pid in parent_ids]
    unknown = [len(mb) - len(ctx.evals.known(parent, mb)) for parent, mb in zip(parents, minibatches)]
    slots = plan_slots([len(mb) for mb in minibatches], unknown, ctx.cfg.search.proposals_per_parent,
                       ctx.budget.affordable_lm_calls(), ctx.budget.remaining_metric_calls(), len(ctx.val_keys))
    if not one_at_a_time(ctx.cfg.reflection_lm):
        return slots
    return slots[: time_slots(ctx.budget.time_share_left(), len(slots))]


def time_slots(share: Optional[float], n: int) -> int:
    """How many of a step's ``n`` slots the time left pays, at one n-th of a whole step each: on
    an LM that answers one request at a time the step's reflections queue behind one another, so
    a step of fewer slots takes about that share of the time (the gate lets such a step start
    only when one slot fits: ``Budget.time_too_short``)."""
    if share is None or share >= 1:
        return n
    return max(1, int(share * n))


def run_step(ctx: RunContext, step: Step, applied_command_ids: list[int]) -> StepRecord:
    """Select, propose, choose, validate: one whole step, recorded in ``step``."""
    cfg, i = ctx.cfg.search, ctx.step_index
    ctx.timeline.reset()
    t0, busy0 = time.monotonic(), ctx.evals.executor.busy_seconds()
    run_before = repo.get_run(ctx.db, ctx.run_id)
    picks = select_parents(make_selector(cfg.selection, cfg.epsilon, cfg.top_k_pareto_k), ctx.state.view(i), cfg.parents_per_step,
                           step_rng(cfg.seed, i), cfg.pin_every)
    sampler = EpochSampler(ctx.train_keys, cfg.minibatch_size, cfg.seed)
    minibatches = [sampler.batch(i * cfg.parents_per_step + p) for p in range(len(picks))]
    slots = _plan(ctx, [p for p, _ in picks], minibatches)
    picks = picks[: len({p for p, _ in slots})]
    step.parent_ids = [p for p, _ in picks]
    step.parent_reasons = {p: r for p, r in picks}
    step.applied_command_ids = list(applied_command_ids)
    step.started_at = utcnow()
    repo.save_step(ctx.db, step)
    with ctx.state.lock:
        for p, _ in picks:
            ctx.state.last_chosen[p] = i
    parent_eval = _ParentMinibatches(ctx, [p for p, _ in picks], sampler, i * cfg.parents_per_step)
    order = ClaimOrder([(step.parent_ids[p], (p, k)) for p, k in slots], ctx.interrupt)
    with ThreadPoolExecutor(max_workers=max(1, len(slots)), thread_name_prefix="proposal") as pool:
        futures = [pool.submit(_slot, ctx, parent_eval, p, k, order) for p, k in slots]
        outcomes = [f.result() for f in futures]
    chosen, passed_over, merged_id = _choose(ctx, outcomes)
    validated = ([merged_id] if merged_id else []) + [o.child_id for o in chosen]
    # the runner-up waits for the best's validation (engine/search/runner_up.py)
    spare = passed_over[0] if cfg.accept == "best" and chosen and passed_over and not merged_id else None
    # the children passed over are marked while the validation passes run: a write each, which
    # the first pass need not wait for
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reject") as pool:
        rejecting = pool.submit(lambda: [reject(ctx, o.child_id, why) for o, why in passed_over[bool(spare):]])
        validate_all(ctx, validated)
        if spare is not None:
            validated += _runner_up(ctx, chosen[0], *spare)
        rejecting.result()
    run_after = repo.get_run(ctx.db, ctx.run_id)
    step.proposal_ids = [o.child_id for o in outcomes] + ([merged_id] if merged_id else [])
    step.accepted_ids = validated
    step.metric_calls = run_after.metric_calls - run_before.metric_calls
    step.cost_usd = run_after.cost_usd - run_before.cost_usd
    wall = time.monotonic() - t0
    shape = shape_of(cfg)
    return close_step(ctx, step, events=ctx.timeline.events, proposals=len(outcomes), seconds=wall,
                      busy_seconds=ctx.evals.executor.busy_seconds() - busy0, since_previous=wall,
                      predict=lambda lat, _t1: predict_step_speedup(shape, lat))


def validate_all(ctx: RunContext, child_ids: list[str]) -> None:
    """The validation passes of a step's chosen children. One after the other, most promising
    first, when a pass may stop early against the frontier the earlier ones updated, or when the
    budget may not pay every pass (then the most promising is paid first, whatever the timing);
    else side by side, so that the pool never idles at the tail of one pass while the next waits
    (8 passes of 50 examples on 4 workers: 13 waves each one after another, 100 side by side).
    The pool then holds the same scores whatever order they arrived in."""
    left = ctx.budget.remaining_metric_calls()
    may_stop_early = ctx.cfg.search.early_stop_validation and ctx.cfg.search.max_score is not None
    if len(child_ids) < 2 or may_stop_early or (left is not None and left < len(child_ids) * len(ctx.val_keys)):
        for cid in child_ids:
            validate_child(ctx, cid)
        return
    with ThreadPoolExecutor(max_workers=len(child_ids), thread_name_prefix="validation") as pool:
        for f in [pool.submit(validate_child, ctx, cid) for cid in child_ids]:
            f.result()


def _runner_up(ctx: RunContext, best: Outcome, spare: Outcome, why_not: str) -> list[str]:
    """Validate ``spare``, the step's next improving child, when ``best`` did not beat its parent on
    the validation set and a pass is cheap (``runner_up``); else pass it over. Its id when validated."""
    flop, left = did_not_pay(ctx, best.child_id), ctx.budget.remaining_metric_calls()
    if flop is None or ctx.interrupt.is_set() or not pass_is_cheap(ctx) or (left is not None and left < len(ctx.val_keys)):
        reject(ctx, spare.child_id, why_not)
        return []
    child = ctx.state.candidates.get(spare.child_id) or repo.get_candidate(ctx.db, spare.child_id)
    ctx.set_status(child, child.status, f"improved on its minibatch; validated as the runner-up: {flop}", with_row=False)
    validate_child(ctx, spare.child_id)
    return [spare.child_id]


def _choose(ctx: RunContext, outcomes: list[Outcome]) -> tuple[list[Outcome], list[tuple[Outcome, str]], Optional[str]]:
    """(children to validate, most promising first; (child, why not) passed over; merged child id)."""
    cfg = ctx.cfg.search
    order = {o.child_id: ctx.state.candidates[o.child_id].content_hash for o in outcomes
             if o.child_id in ctx.state.candidates}
    chosen, rest = choose_children(outcomes, cfg.accept, cfg.top_k, order)
    improved = chosen + rest  # every improving child, most promising first
    if cfg.merge_siblings and len(improved) >= 2:
        merged_id = _merge(ctx, improved)
        if merged_id in {o.child_id for o in improved}:  # one child already held every change
            return ([o for o in improved if o.child_id == merged_id],
                    [(o, f"improved on its minibatch; {merged_id} already holds its changes and was validated instead")
                     for o in improved if o.child_id != merged_id], None)
        if merged_id:
            return [], [(o, f"improved on its minibatch; combined into the merge {merged_id}, which was validated "
                            "instead") for o in improved], merged_id
    return chosen, [(o, f"improved on its minibatch but not selected (accept = {cfg.accept!r})") for o in rest], None


def _merge(ctx: RunContext, improved: list[Outcome]) -> Optional[str]:
    """Combine the step's improving children into one, if the budget allows testing and
    validating it. Returns the merged child's id when it kept every child's gains."""
    siblings = [s for s in (sibling_from_minibatch(ctx, o.child_id) for o in improved[:4]) if s is not None]
    if len(siblings) < 2:
        return None
    need = len({k for s in siblings for k in s.scores}) + len(ctx.val_keys)
    left = ctx.budget.remaining_metric_calls()
    if left is not None and left < need:
        return None
    merge_id = deterministic_id(ctx.run_id, ctx.step_index, *sorted(s.cand.id for s in siblings), "merge")
    return combine(ctx, siblings, merge_id, ctx.step_index)


class _ParentMinibatches:
    """Each parent slot draws its minibatch (``engine.search.minibatch``) once, shared by its K
    proposals; the slots' known failures are planned in slot order at once."""

    def __init__(self, ctx: RunContext, parent_ids: list[str], sampler: EpochSampler, first: int) -> None:
        self.ctx, self.parent_ids = ctx, parent_ids
        self._locks = [threading.Lock() for _ in parent_ids]
        self._results: dict[int, Minibatch] = {}
        if sampler is not None:
            self._drawer = minibatch.Drawer(ctx, sampler)
            self._planned = [self._drawer.plan(ctx.state.candidates[pid], first + p) for p, pid in enumerate(parent_ids)]

    def get(self, p: int) -> Minibatch:
        with self._locks[p]:
            if p not in self._results:
                self._results[p] = self._drawer.draw(self._planned[p])
            return self._results[p]


def _slot(ctx: RunContext, parents: _ParentMinibatches, p: int, k: int, order: ClaimOrder) -> Outcome:
    parent_id = parents.parent_ids[p]
    try:
        mb = parents.get(p)
        pctx = replace(ctx, claim_turn=order.turns(parent_id, (p, k)))
        return run_proposal(pctx, ctx.state.candidates[parent_id], p, k, mb)
    finally:
        order.done(parent_id, (p, k))
