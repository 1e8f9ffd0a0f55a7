"""Stoppers beside the budgets (GEPA's ``MaxCandidateProposalsStopper`` and
``NoImprovementStopper``), derived from the pool and the run's counters so a resumed run
decides exactly as the original would have."""

from __future__ import annotations

from typing import Optional

from engine.search.frontier import mean_scores


def steps_without_improvement(ctx) -> int:
    """Steps finished since the step that first reached the current best mean (the seed counts
    as reached before step 0)."""
    with ctx.state.lock:
        full = {c: ctx.state.scores[c] for c in ctx.state.eligible_ids() if c in ctx.state.full}
        means = mean_scores(full)
        if not means:
            return 0
        best = max(means.values())
        firsts = [ctx.state.candidates[c] for c, m in means.items() if m >= best - 1e-12]
    reached = min(-1 if c.origin == "seed" else c.step for c in firsts)
    return ctx.step_index - (reached + 1)


def stop_reason(ctx, proposals_total: int) -> Optional[str]:
    """Why the run must stop now by one of these stoppers, or None."""
    b = ctx.cfg.budget
    if b.max_candidate_proposals is not None and proposals_total >= b.max_candidate_proposals:
        return f"proposal limit reached ({proposals_total} of max_candidate_proposals = {b.max_candidate_proposals})"
    if b.max_steps_without_improvement is not None:
        idle = steps_without_improvement(ctx)
        if idle >= b.max_steps_without_improvement:
            return (f"no improvement of the best mean for {idle} steps "
                    f"(max_steps_without_improvement = {b.max_steps_without_improvement})")
    return None
