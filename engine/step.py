"""One synchronous step of the batched loop (docs/design.md §2, steps 1–5; §3 for the schedule).

P parents are selected, each gets its own minibatch, P×K reflective proposals run
concurrently and share one worker pool. The step is trimmed to the metric calls left: a slot
(one proposal) is planned only when its minibatch tests and one validation pass still fit,
except that a step always gets one slot if its minibatch test fits. Of the improving children,
the ``accept`` rule chooses which pay a validation pass (all / the best / the top k by
minibatch gain); with ``merge_siblings`` the improving children are first combined into one
merged child, which is validated instead of them when it keeps all their gains. Validation
passes run one after the other, most promising first, so that later ones can stop early
against the frontier the earlier ones updated.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from storage import repo
from storage.models import Step, utcnow

from engine.context import RunContext
from engine.evaluation import Scored
from engine.proposal import Outcome, run_proposal
from engine.runtime_model import latencies_from, predict_step_speedup, shape_of, sync_step
from engine.sampling import EpochSampler
from engine.selection import make_selector, select_parents
from engine.sibling_merge import combine, sibling_from_minibatch
from engine.state import deterministic_id
from engine.validation import step_rng, validate_child


def choose_children(outcomes: list[Outcome], accept: str, top_k: int) -> tuple[list[Outcome], list[Outcome]]:
    """Which improving children pay a validation pass: all, the best one, or the top k by
    minibatch gain. Returns (chosen, passed over), chosen ordered most promising first."""
    improved = sorted([o for o in outcomes if o.improved], key=lambda o: (-o.gain, o.child_id))
    n = {"all": len(improved), "best": 1, "top_k": top_k}[accept]
    return improved[:n], improved[n:]


def plan_slots(ctx: RunContext, parent_ids: list[str], minibatches: list[list[str]], per_parent: int) -> list[tuple[int, int]]:
    """The (parent, proposal) slots this step can pay for, in order: no more than the dollar
    budget's LM calls, and a slot is kept while its
    minibatch tests (the parent's, once per parent, and the child's) plus one validation pass
    fit in the metric calls left. When not even one slot and a validation pass fit (the
    budget's tail), the step takes as many slots as their minibatch tests fit, at once, rather
    than one lone proposal per step."""
    slots = [(p, k) for p in range(len(parent_ids)) for k in range(per_parent)]
    affordable = ctx.budget.affordable_lm_calls()  # a proposal the dollar cap cannot pay would waste its minibatch
    if affordable is not None:
        slots = slots[:affordable]
    left = ctx.budget.remaining_metric_calls()
    if left is None:
        return slots
    costs = []
    for p, k in slots:
        extra = len(minibatches[p])
        if k == 0:
            parent = ctx.state.candidates[parent_ids[p]]
            extra += len(minibatches[p]) - len(ctx.evals.known(parent, minibatches[p]))
        costs.append(extra)
    for room in (left - len(ctx.val_keys), left):
        n, total = 0, 0
        while n < len(slots) and total + costs[n] <= room:
            total += costs[n]
            n += 1
        if n:
            return slots[:n]
    return []


def run_step(ctx: RunContext, step: Step, applied_command_ids: list[int]) -> Step:
    cfg = ctx.cfg.search
    i = ctx.step_index
    rng = step_rng(cfg.seed, i)
    ctx.timeline.reset()
    t0, busy0 = time.monotonic(), ctx.evals.executor.busy_seconds()
    run_before = repo.get_run(ctx.db, ctx.run_id)
    selector = make_selector(cfg.selection, cfg.epsilon)
    picks = select_parents(selector, ctx.state.view(i), cfg.parents_per_step, rng, cfg.pin_every)
    sampler = EpochSampler(ctx.train_keys, cfg.minibatch_size, cfg.seed)
    minibatches = [sampler.batch(i * cfg.parents_per_step + p) for p in range(len(picks))]
    slots = plan_slots(ctx, [p for p, _ in picks], minibatches, cfg.proposals_per_parent)
    picks = picks[: len({p for p, _ in slots})]
    step.parent_ids = [p for p, _ in picks]
    step.parent_reasons = {p: r for p, r in picks}
    step.applied_command_ids = list(applied_command_ids)
    step.started_at = utcnow()
    repo.save_step(ctx.db, step)
    with ctx.state.lock:
        for p, _ in picks:
            ctx.state.last_chosen[p] = i
    parent_eval = _ParentMinibatches(ctx, [p for p, _ in picks], minibatches)
    with ThreadPoolExecutor(max_workers=max(1, len(slots)), thread_name_prefix="proposal") as pool:
        futures = [pool.submit(_slot, ctx, parent_eval, p, k, minibatches[p]) for p, k in slots]
        outcomes = [f.result() for f in futures]
    chosen, passed_over, merged_id = _choose(ctx, outcomes)
    for o, reason in passed_over:
        _reject(ctx, o.child_id, reason)
    for cid in ([merged_id] if merged_id else []) + [o.child_id for o in chosen]:
        validate_child(ctx, cid)
    _finish_step(ctx, step, outcomes, ([merged_id] if merged_id else []) + [o.child_id for o in chosen],
                 merged_id, run_before, t0, busy0)
    return step


def _choose(ctx: RunContext, outcomes: list[Outcome]) -> tuple[list[Outcome], list[tuple[Outcome, str]], Optional[str]]:
    """(children to validate, most promising first; (child, why not) passed over; merged child id)."""
    cfg = ctx.cfg.search
    improved = sorted([o for o in outcomes if o.improved], key=lambda o: (-o.gain, o.child_id))
    if cfg.merge_siblings and len(improved) >= 2:
        merged_id = _merge(ctx, improved)
        if merged_id in {o.child_id for o in improved}:  # one child already held every change
            return ([o for o in improved if o.child_id == merged_id],
                    [(o, f"improved on its minibatch; {merged_id} already holds its changes and was validated instead")
                     for o in improved if o.child_id != merged_id], None)
        if merged_id:
            return [], [(o, f"improved on its minibatch; combined into the merge {merged_id}, which was validated "
                            "instead") for o in improved], merged_id
    chosen, rest = choose_children(outcomes, cfg.accept, cfg.top_k)
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


def _reject(ctx: RunContext, child_id: str, reason: str) -> None:
    child = ctx.state.candidates.get(child_id) or repo.get_candidate(ctx.db, child_id)
    child.status, child.reason = "rejected", reason
    ctx.save(child)


class _ParentMinibatches:
    """Each parent slot is evaluated on its minibatch once, shared by its K proposals."""

    def __init__(self, ctx: RunContext, parent_ids: list[str], minibatches: list[list[str]]) -> None:
        self.ctx, self.parent_ids, self.minibatches = ctx, parent_ids, minibatches
        self._locks = [threading.Lock() for _ in parent_ids]
        self._results: dict[int, dict[str, Scored]] = {}

    def get(self, p: int) -> dict[str, Scored]:
        with self._locks[p]:
            if p not in self._results:
                parent = self.ctx.state.candidates[self.parent_ids[p]]
                self._results[p] = self.ctx.evals.evaluate(parent, self.minibatches[p], kind="minibatch")
            return self._results[p]


def _slot(ctx: RunContext, parents: _ParentMinibatches, p: int, k: int, minibatch: list[str]) -> Outcome:
    results = parents.get(p)
    parent = ctx.state.candidates[parents.parent_ids[p]]
    return run_proposal(ctx, parent, p, k, minibatch, results)


def _finish_step(ctx: RunContext, step: Step, outcomes: list[Outcome], validated: list[str], merged_id: Optional[str],
                 run_before, t0: float, busy0: float) -> None:
    wall = time.monotonic() - t0
    run_after = repo.get_run(ctx.db, ctx.run_id)
    events = ctx.timeline.events
    workers = ctx.evals.executor.workers
    step.proposal_ids = [o.child_id for o in outcomes] + ([merged_id] if merged_id else [])
    step.accepted_ids = list(validated)
    step.metric_calls = run_after.metric_calls - run_before.metric_calls
    step.cost_usd = run_after.cost_usd - run_before.cost_usd
    step.ended_at = utcnow()
    step.seconds = wall
    step.events = events
    step.worker_utilisation = min(1.0, (ctx.evals.executor.busy_seconds() - busy0) / (workers * wall)) if wall > 0 else None
    step.predicted_speedup, step.measured_speedup = _speedups(ctx, events, run_after, len(outcomes), wall)
    repo.save_step(ctx.db, step)


def _speedups(ctx: RunContext, events: list[dict], run, k: int, wall: float) -> tuple[Optional[float], Optional[float]]:
    """(predicted, measured) speed-up of this step over k sequential 1×1 steps. Both use the
    runtime model's 1×1 step time at the latencies measured in this step; the prediction
    divides by the model's time for this shape, the measurement by the step's real wall-clock."""
    cfg = ctx.cfg.search
    lat = latencies_from([e["end"] - e["start"] for e in events if e["kind"] == "lm"],
                         [e["end"] - e["start"] for e in events if e["kind"] != "lm"],
                         run.proposals_accepted / run.proposals_total if run.proposals_total else None,
                         cfg.minibatch_size, len(ctx.val_keys), ctx.evals.executor.workers)
    if lat is None or k == 0:
        return None, None
    shape = shape_of(cfg)
    t1, _ = sync_step(type(shape)(), lat)
    return predict_step_speedup(shape, lat), (k * t1 / wall if wall > 0 else None)
