"""GEPA's system-aware merge for multi-component candidates (docs/design.md §2 step 6).

Two frontier candidates that descend from a common ancestor and changed *different*
components since it are combined: the merged candidate takes each component from whichever
of the two changed it. It is tested on a minibatch of validation examples and accepted when it
is at least as good there as the better of its two parents.
"""

from __future__ import annotations

import random
from typing import Optional

from storage.models import Candidate, utcnow
from storage.states import CandidateStatus, Origin

from engine.context import RunContext
from engine.search.lineage import ancestors
from engine.state import content_hash, deterministic_id
from engine.schedules.validation import validate_child


def merged_content(a: dict, i: dict, j: dict) -> Optional[dict]:
    """Component-wise merge of i and j over their common ancestor a, or None when they
    changed the same component, or one of them changed nothing."""
    changed_i = {c for c in a if i.get(c) != a[c]}
    changed_j = {c for c in a if j.get(c) != a[c]}
    if not changed_i or not changed_j or changed_i & changed_j:
        return None
    return {c: (i[c] if c in changed_i else j[c] if c in changed_j else a[c]) for c in a}


def find_merge(ctx: RunContext, rng: random.Random) -> Optional[tuple[str, str, dict]]:
    """A pair of frontier members and their merged content, not tried before."""
    cands = ctx.state.candidates
    # ordered by content, not id (ids hash the run id): the same seed makes the same merges
    members = sorted((m for m in ctx.state.frontier().members() if not cands[m].vetoed),
                     key=lambda m: (cands[m].content_hash, m))
    pairs = [(x, y) for n, x in enumerate(members) for y in members[n + 1:]]
    rng.shuffle(pairs)
    tried = {c.content_hash for c in cands.values()}
    for x, y in pairs:
        common = ancestors(cands, x) & ancestors(cands, y)
        for a in sorted(common, key=lambda c: (c not in ctx.state.scores, cands[c].content_hash, c)):
            content = merged_content(cands[a].content, cands[x].content, cands[y].content)
            if content is not None and content_hash(content) not in tried:
                return x, y, content
    return None


def try_merge(ctx: RunContext, rng: random.Random) -> Optional[str]:
    """One merge attempt; returns the merged candidate id when it was accepted."""
    found = find_merge(ctx, rng)
    if found is None:
        return None
    x, y, content = found
    cid = deterministic_id(ctx.run_id, ctx.step_index, x, y, "merge")
    child = Candidate(id=cid, run_id=ctx.run_id, content=content, content_hash=content_hash(content), origin=Origin.MERGE,
                      parent_ids=[x, y], step=ctx.step_index, frontier_version=ctx.state.frontier_version,
                      started_at=utcnow())
    ctx.save(child)
    sx, sy = ctx.state.scores[x], ctx.state.scores[y]
    # the examples where the two parents disagree most tell whether the merge kept both gains
    keys = sorted(set(sx) & set(sy), key=lambda k: (-abs(sx[k] - sy[k]), k))[: ctx.cfg.search.minibatch_size]
    results = ctx.evals.evaluate(child, keys, kind="minibatch")
    got = {k: r.score for k, r in results.items()}
    if not got:
        child.status, child.reason = CandidateStatus.FAILED, "budget: no metric calls left to test the merge"
        ctx.save(child)
        return None
    total = sum(got.values())
    bar = max(sum(sx[k] for k in got), sum(sy[k] for k in got))
    child.minibatch_keys, child.minibatch_score, child.parent_minibatch_score = list(got), total, bar
    child.finished_at = utcnow()
    if total + 1e-12 < bar:
        child.status, child.reason = CandidateStatus.REJECTED, f"merge worse than its better parent on {len(got)} example(s)"
        ctx.save(child)
        return None
    child.reason, child.improved = "merge kept both parents' gains", True
    ctx.save(child)
    validate_child(ctx, cid)
    return cid
