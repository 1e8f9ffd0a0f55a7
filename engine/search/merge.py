"""GEPA's system-aware merge (docs/design.md §2 step 6).

Two frontier candidates that descend from a common ancestor and changed *different*
components, or different lines of one component, since it are combined by a three-way merge
over that ancestor (``engine.search.textmerge``; no LM call, ``merge_path = "three_way"``). It
is tested on a minibatch of validation examples and accepted when it is at least as good there
as the better of its two parents.
"""

from __future__ import annotations

import random
from typing import Optional

from storage.models import Candidate, utcnow
from storage.states import CandidateStatus, Cause, MergePath, Origin

from engine.context import RunContext
from engine.search.frontier import mean_scores
from engine.search.lineage import ancestors
from engine.search.textmerge import merge_contents
from engine.state import content_hash, deterministic_id
from engine.search.validation import validate_child


def merged_content(a: dict, i: dict, j: dict) -> Optional[dict]:
    """The merge of i and j over their common ancestor a — component-wise, and line by line
    within a component both changed (``engine.search.textmerge``) — or None when one of them
    changed nothing or they changed the same lines differently (no LM is asked here)."""
    if all(i.get(c) == a[c] for c in a) or all(j.get(c) == a[c] for c in a):
        return None
    content, conflicts = merge_contents(a, [i, j])
    return None if conflicts else content


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
    return test_merge(ctx, x, y, content, ctx.step_index)


def find_rebase(ctx: RunContext, child_id: str) -> Optional[tuple[str, str, dict]]:
    """For the asynchronous schedule: the just-validated ``child_id``, the best other validated
    candidate (the current best, or the previous one when the child just took its place) and
    their merge over the nearest common ancestor — the child's changes re-based onto the best.
    None when there is nothing to merge: the child was not fully validated, the two are in one
    lineage (one already holds the other's changes), or they changed the same lines differently."""
    state, cands = ctx.state, ctx.state.candidates
    with state.lock:
        if child_id not in state.full:
            return None
        means = mean_scores({c: state.scores[c] for c in state.eligible_ids() if c in state.full and c != child_id})
        if not means:
            return None
        other = max(sorted(means, key=lambda c: (cands[c].content_hash, c)), key=lambda c: means[c])
        mine, theirs = ancestors(cands, child_id), ancestors(cands, other)
        common = mine & theirs
        if other in mine or child_id in theirs or not common:
            return None
        base = max(sorted(common), key=lambda c: len(ancestors(cands, c)))  # the nearest: deepest in the lineage
        content = merged_content(cands[base].content, cands[child_id].content, cands[other].content)
        if content is None or any(c.content_hash == content_hash(content) for c in cands.values()):
            return None
    return child_id, other, content


def test_merge(ctx: RunContext, x: str, y: str, content: dict, step: int) -> Optional[str]:
    """Record the merge of x and y, test it where they disagree most, validate it if it kept both
    parents' gains there; returns its id when validated."""
    cid = deterministic_id(ctx.run_id, step, x, y, "merge")
    child = Candidate(id=cid, run_id=ctx.run_id, content=content, content_hash=content_hash(content), origin=Origin.MERGE,
                      merge_path=MergePath.THREE_WAY, parent_ids=[x, y], step=step,
                      frontier_version=ctx.state.frontier_version, started_at=utcnow())
    ctx.save(child)
    sx, sy = ctx.state.scores[x], ctx.state.scores[y]
    # the examples where the two parents disagree most tell whether the merge kept both gains
    keys = sorted(set(sx) & set(sy), key=lambda k: (-abs(sx[k] - sy[k]), k))[: ctx.cfg.search.minibatch_size]
    results = ctx.evals.evaluate(child, keys, kind="minibatch")
    got = {k: r.score for k, r in results.items()}
    if not got:
        ctx.set_status(child, CandidateStatus.FAILED, "budget: no metric calls left to test the merge",
                       cause=Cause.BUDGET)
        return None
    total = sum(got.values())
    bar = max(sum(sx[k] for k in got), sum(sy[k] for k in got))
    child.minibatch_keys, child.minibatch_score, child.parent_minibatch_score = list(got), total, bar
    child.finished_at = utcnow()
    if total + 1e-12 < bar:
        ctx.set_status(child, CandidateStatus.REJECTED, f"merge worse than its better parent on {len(got)} example(s)")
        return None
    child.reason, child.improved = "merge kept both parents' gains", True
    ctx.save(child)
    validate_child(ctx, cid)
    return cid
