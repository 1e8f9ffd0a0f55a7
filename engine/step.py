"""One synchronous step of the batched loop (DESIGN.md §1, steps 1–5).

P parents are selected, each gets its own minibatch, P×K reflective proposals run
concurrently and share one worker pool; the improving children chosen by the ``accept`` rule
are validated, most promising first, and enter the pool.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from storage import repo
from storage.models import Step, utcnow

from engine.context import RunContext
from engine.evaluation import Scored
from engine.frontier import can_still_matter
from engine.proposal import Outcome, run_proposal
from engine.runtime_model import predict_speedup
from engine.sampling import EpochSampler
from engine.selection import make_selector, select_parents


def step_rng(seed: int, index: int) -> random.Random:
    """Each step has its own generator, derived from (seed, step): a resumed or replayed step
    makes the same choices whatever happened before it in this process."""
    return random.Random(f"{seed}:step:{index}")


def choose_children(outcomes: list[Outcome], accept: str, top_k: int) -> tuple[list[Outcome], list[Outcome]]:
    """Which improving children pay a validation pass: all, the best one, or the top k by
    minibatch gain. Returns (chosen, passed over), chosen ordered most promising first."""
    improved = sorted([o for o in outcomes if o.improved], key=lambda o: (-o.gain, o.child_id))
    n = {"all": len(improved), "best": 1, "top_k": top_k}[accept]
    return improved[:n], improved[n:]


def validate_child(ctx: RunContext, child_id: str) -> None:
    """Full validation pass of an accepted child; stops early (and says why) once the child
    can no longer enter the frontier or beat the best, when the score maximum is known."""
    child = ctx.state.candidates.get(child_id) or repo.get_candidate(ctx.db, child_id)
    keep_going = None
    stopped_early = []
    max_score = ctx.cfg.search.max_score
    if ctx.cfg.search.early_stop_validation and max_score is not None:
        front = ctx.state.frontier()
        _, best_mean = ctx.state.best()

        def keep_going(partial: dict[str, Scored]) -> bool:
            scores = {k: r.score for k, r in partial.items()}
            remaining = [k for k in ctx.val_keys if k not in scores]
            go = not remaining or can_still_matter(scores, remaining, front, best_mean, len(ctx.val_keys), max_score)
            if not go:
                stopped_early.append(True)
            return go

    results = ctx.evals.evaluate(child, ctx.val_keys, kind="validation", keep_going=keep_going)
    scores = {k: r.score for k, r in results.items()}
    child.status = "accepted"
    child.val_count = len(scores)
    child.val_mean = sum(scores.values()) / len(scores) if scores else None
    if len(scores) < len(ctx.val_keys):
        child.val_cut_short = ("stopped early: it could no longer enter the frontier or beat the best"
                               if stopped_early else "budget: no metric calls left to finish the validation pass")
    ctx.save(child)
    if scores:
        ctx.state.add_scored(child, scores)


def run_step(ctx: RunContext, step: Step, applied_command_ids: list[int]) -> Step:
    cfg = ctx.cfg.search
    i = ctx.step_index
    rng = step_rng(cfg.seed, i)
    ctx.timeline.reset()
    t0, busy0 = time.monotonic(), ctx.evals.executor.busy_seconds()
    run_before = repo.get_run(ctx.db, ctx.run_id)
    selector = make_selector(cfg.selection, cfg.epsilon)
    picks = select_parents(selector, ctx.state.view(i), cfg.parents_per_step, rng, cfg.pin_every)
    step.parent_ids = [p for p, _ in picks]
    step.parent_reasons = {p: r for p, r in picks}
    step.applied_command_ids = list(applied_command_ids)
    step.started_at = utcnow()
    repo.save_step(ctx.db, step)
    with ctx.state.lock:
        for p, _ in picks:
            ctx.state.last_chosen[p] = i
    sampler = EpochSampler(ctx.train_keys, cfg.minibatch_size, cfg.seed)
    minibatches = [sampler.batch(i * cfg.parents_per_step + p) for p in range(len(picks))]
    parent_eval = _ParentMinibatches(ctx, [p for p, _ in picks], minibatches)
    slots = [(p, k) for p in range(len(picks)) for k in range(cfg.proposals_per_parent)]
    with ThreadPoolExecutor(max_workers=max(1, len(slots)), thread_name_prefix="proposal") as pool:
        futures = [pool.submit(_slot, ctx, parent_eval, p, k, minibatches[p]) for p, k in slots]
        outcomes = [f.result() for f in futures]
    chosen, passed_over = choose_children(outcomes, cfg.accept, cfg.top_k)
    for o in passed_over:
        repo.update_candidate(ctx.db, o.child_id, status="rejected",
                              reason=f"improved on its minibatch but not selected (accept = {cfg.accept!r})")
    with ThreadPoolExecutor(max_workers=max(1, len(chosen)), thread_name_prefix="validation") as pool:
        list(pool.map(lambda o: validate_child(ctx, o.child_id), chosen))
    _finish_step(ctx, step, outcomes, chosen, run_before, t0, busy0)
    return step


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


def _finish_step(ctx: RunContext, step: Step, outcomes: list[Outcome], chosen: list[Outcome], run_before, t0: float,
                 busy0: float) -> None:
    cfg = ctx.cfg.search
    wall = time.monotonic() - t0
    run_after = repo.get_run(ctx.db, ctx.run_id)
    events = ctx.timeline.events
    # the step's work done one piece at a time, over its wall-clock: the parallelism achieved
    sequential = sum(e["end"] - e["start"] for e in events)
    workers = ctx.evals.executor.workers
    step.proposal_ids = [o.child_id for o in outcomes]
    step.accepted_ids = [o.child_id for o in chosen]
    step.metric_calls = run_after.metric_calls - run_before.metric_calls
    step.cost_usd = run_after.cost_usd - run_before.cost_usd
    step.ended_at = utcnow()
    step.seconds = wall
    step.events = events
    step.worker_utilisation = min(1.0, (ctx.evals.executor.busy_seconds() - busy0) / (workers * wall)) if wall > 0 else None
    step.measured_speedup = sequential / wall if wall > 0 else None
    step.predicted_speedup = _predicted(ctx, events, run_after)
    repo.save_step(ctx.db, step)


def _predicted(ctx: RunContext, events: list[dict], run) -> float | None:
    """The runtime model's speed-up of this batch shape, from latencies measured in this step."""
    cfg = ctx.cfg.search
    lm = [e["end"] - e["start"] for e in events if e["kind"] == "lm"]
    ev = [e["end"] - e["start"] for e in events if e["kind"] != "lm"]
    if not lm or not ev:
        return None
    a = run.proposals_accepted / run.proposals_total if run.proposals_total else 0.5
    return predict_speedup(cfg.batch_size, a, sum(lm) / len(lm), sum(ev) / len(ev), cfg.minibatch_size,
                           len(ctx.val_keys), ctx.evals.executor.workers)
