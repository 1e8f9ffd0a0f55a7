"""The runner-up: a second improving child validated when the step's best did not pay.

With ``accept = "best"`` a step validates only its most promising improving child (the highest
gain per example judged on the minibatch) and passes over the others. Three examples rank
siblings poorly: on a development regex task the child validated at step 0 scored no better than
its parent on the validation set, while the sibling passed over (``\\d{4}-\\d{2}-\\d{2}``, the plain
step forward) was never validated, and when the LM proposed it again in later steps it was refused
as a repeat, four times. So when the best child's validation mean is no higher than its parent's,
the next improving child is validated too, if a validation pass is cheap: at most
``second_look.SHARE`` of a reflection's mean time (the pass run ``workers`` at a time, at this
run's mean seconds per metric call), as for a second look. A prompt task whose evaluations are
task-LM calls rarely pays for one; a regular expression or a unit test always does.
"""

from __future__ import annotations

from typing import Optional

from engine.context import RunContext
from engine.search.frontier import mean
from engine.search.second_look import affordable


def pass_is_cheap(ctx: RunContext) -> bool:
    """Whether one more validation pass costs at most what a second look may (``second_look.affordable``)."""
    allowed, eval_s = affordable(ctx.evals.pace, ctx.evals.executor.workers)
    return allowed is not None and len(ctx.val_keys) * eval_s <= allowed


def did_not_pay(ctx: RunContext, child_id: str) -> Optional[str]:
    """Why the validated ``child_id`` did not pay (its validation mean no higher than its first
    parent's, both validated on every example), or None when it did or cannot be told."""
    with ctx.state.lock:
        child = ctx.state.candidates.get(child_id)
        if child is None or not child.parent_ids:
            return None
        parent_id = child.parent_ids[0]
        if child_id not in ctx.state.full or parent_id not in ctx.state.full:
            return None
        c, p = mean(ctx.state.scores[child_id].values()), mean(ctx.state.scores[parent_id].values())
    if c > p:
        return None
    return f"{child_id}, the step's best on its minibatch, scored {c:.4g} on the validation set, no better than its parent ({p:.4g})"
