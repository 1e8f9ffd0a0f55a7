"""The validation pass: a child is scored on every validation example and enters the pool
(status ``accepted``). With ``early_stop_validation`` and a known ``max_score`` the pass stops as
soon as the child can no longer enter the frontier nor beat the best; the reason is recorded.

Also the random generator of a step, derived from (seed, step), which both schedules use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Optional

from storage import frontier as frontier_rows, repo
from storage.models import Candidate
from storage.states import CandidateStatus, Origin

from engine.config import SearchConfig
from engine.context import RunContext
from engine.evaluation import EvaluationService, Scored
from engine.search.frontier import can_still_matter, mean
from engine.search.frontier_types import objective_scores
from engine.state import PoolState


def step_rng(seed: int, index: int) -> random.Random:
    """Each step has its own generator, derived from (seed, step): a resumed or replayed step
    makes the same choices whatever happened before it in this process."""
    return random.Random(f"{seed}:step:{index}")


@dataclass(frozen=True)
class Validator:
    """What a validation pass needs: the pool, the evaluations, the validation keys, the
    search settings and how to move a candidate's status (``RunContext.set_status``, which
    also updates the pool)."""

    state: PoolState
    evals: EvaluationService
    val_keys: list[str]
    search: SearchConfig
    set_status: Callable[..., Candidate]

    def validate(self, child: Candidate) -> None:
        """Score ``child`` on the validation keys (stopping early when it cannot matter, or
        when the budget runs out: both recorded in ``val_cut_short``), mark it accepted and add
        its scores to the pool."""
        why_stopped: list[str] = []
        keep_going = self._early_stop(why_stopped) if self.search.early_stop_validation else None
        # the seed's pass is never cut: every run needs one whole validated candidate to go on from
        seed = child.origin == Origin.SEED
        results = self.evals.evaluate(child, self.val_keys, kind="validation", keep_going=keep_going,
                                      interruptible=not seed)
        scores = {k: r.score for k, r in results.items()}
        n = len(self.val_keys)
        cut = self.evals.interrupt.reason if self.evals.interrupt.is_set() and len(scores) < n and not seed else ""
        if cut and not scores:  # not validated at all: it stays out of the pool, and says why
            self.set_status(child, CandidateStatus.REJECTED,
                            f"improved on its minibatch; its validation pass was interrupted ({cut}) before it began. "
                            "Pin it to validate it", with_row=False)
            return
        if cut:
            why_stopped.insert(0, f"interrupted ({cut}) after {len(scores)} of {n} examples")
        fields = {"val_count": len(scores), "val_mean": mean(scores.values()) if scores else None,
                  "val_min": min(scores.values(), default=None), "val_max": max(scores.values(), default=None)}
        if len(scores) < n:
            fields["val_cut_short"] = (why_stopped[0] if why_stopped else
                                       f"budget: no metric calls left to finish the validation pass ({len(scores)} of "
                                       f"{n} examples)")
        child = self.set_status(child, CandidateStatus.ACCEPTED, None, with_row=False, **fields)
        if scores:
            self.state.add_scored(child, scores, {k: objective_scores(r.side_info) for k, r in results.items()})

    def _early_stop(self, why_stopped: list[str]) -> Optional[Callable[[dict[str, Scored]], bool]]:
        """A ``keep_going`` test against the frontier and best as they are now; None when the
        score maximum is unknown (then nothing can be ruled out)."""
        max_score, n = self.search.max_score, len(self.val_keys)
        if max_score is None:
            return None
        front = self.state.frontier()
        _, best_mean = self.state.best()

        def keep_going(partial: dict[str, Scored]) -> bool:
            scores = {k: r.score for k, r in partial.items()}
            remaining = [k for k in self.val_keys if k not in scores]
            go = not remaining or can_still_matter(scores, remaining, front, best_mean, n, max_score)
            if not go and not why_stopped:
                optimistic = (sum(scores.values()) + max_score * len(remaining)) / n
                why_stopped.append(
                    f"stopped early after {len(scores)} of {n} examples: it is below the frontier on "
                    f"every example evaluated, the frontier already holds the maximum {max_score:g} on the "
                    f"{len(remaining)} left, and even with {max_score:g} on those its mean ({optimistic:.4g}) could not "
                    f"beat the best ({best_mean:.4g})")
            return go

        return keep_going


def validate_child(ctx: RunContext, child_id: str) -> None:
    """The validation pass of ``child_id`` in a running optimization; the run's best is
    written as soon as it ends (it may be the new best)."""
    child = ctx.state.candidates.get(child_id) or repo.get_candidate(ctx.db, child_id)
    Validator(ctx.state, ctx.evals, ctx.val_keys, ctx.cfg.search, ctx.set_status).validate(child)
    ctx.record_best()
    write_frontier(ctx)


def write_frontier(ctx: RunContext) -> None:
    """Store what changed in the kept frontier (``PoolState.kept``) with the frontier version it
    describes: the studio reads the frontier again only when that version moves, not at every
    metric call, and then these few hundred rows instead of every score. Under the pool's write
    lock, so that the writes of passes ending in several threads land in the order of their
    changes."""
    with ctx.state.write_lock:
        changes, version = ctx.state.frontier_changes()
        frontier_rows.write_frontier(ctx.db, ctx.run_id, changes.entries, changes.counts, version, changes.full)


def reject(ctx: RunContext, child_id: str, reason: str) -> None:
    """Pass over an improving child: it is kept, rejected, with the reason (lineage too)."""
    child = ctx.state.candidates.get(child_id) or repo.get_candidate(ctx.db, child_id)
    ctx.set_status(child, CandidateStatus.REJECTED, reason, with_row=False)
