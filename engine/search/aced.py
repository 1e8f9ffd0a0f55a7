"""No retry for a minibatch a sibling has already aced.

A proposal whose first answer is unusable (unchanged, no fenced block, a repeat) asks the LM
once more, at once, beside the other proposals of its step (``engine.schedules.claim_order``).
But when another child of the same parent, tested on the same minibatch in this step, already
scores the top score on every example of it, the retry's child can at best tie that child there:
the step has what that minibatch can show, and the retry would only cost an LM call. The
top score is the one ``engine.search.minibatch`` counts as right.
"""

from __future__ import annotations

from typing import Optional

from storage.models import Candidate

from engine.search.minibatch import TOL, top_score


def aced_by_sibling(ctx, parent: Candidate, child: Candidate) -> Optional[str]:
    """The id of a child of ``parent`` in this step, other than ``child``, tested on ``child``'s
    minibatch and right on every example of it; None when there is none (``ctx``: a RunContext)."""
    keys = list(child.minibatch_keys or [])
    if not keys:
        return None
    with ctx.state.lock:
        seen = [x for x in (ctx.state.top_score, ctx.state.low_score) if x is not None]
        siblings = [c for c in ctx.state.candidates.values()
                    if c.id != child.id and c.step == ctx.step_index and parent.id in c.parent_ids
                    and c.finished_at is not None and c.content and set(keys) <= set(c.minibatch_keys or [])]
    top = top_score(ctx.cfg.search.max_score, seen)
    if top is None:
        return None
    for sibling in siblings:
        scores = ctx.evals.known(sibling, keys)
        if len(scores) == len(keys) and all(r.score >= top - TOL for r in scores.values()):
            return sibling.id
    return None
