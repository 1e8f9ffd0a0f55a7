"""Combining siblings: one LM-written child that keeps the fixes of several improving children.

GEPA's merge (``engine.search.merge``) combines *components*, so it never fires for single-text
candidates, and batched siblings that each fixed one failure never meet. Here the reflection LM
is shown the base (parent) version, each improving child, its changes and what it fixed, and is
asked (purpose ``merge``) for one version that keeps every fix. The merged candidate (origin
``sibling_merge``, parents = the children) is tested like any proposal, on the examples that showed
each child's gains: it passes only if it scores at least as well as each child on that child's
examples. A merge answer that drops a fix is therefore evaluated and rejected on its merits.

No LM call is needed when the children of one parent changed different lines (or different
components): the line-level three-way merge over the parent combines them
(``engine.search.textmerge``). The LM writes only a component with a real conflict. The path a
merge took is recorded in ``Candidate.merge_path`` (``three_way`` or ``lm``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Optional

from storage.models import Candidate, utcnow
from storage.states import CandidateStatus, Cause, MergePath, Origin

from engine.context import RunContext
from engine.evaluation import Scored
from engine.search.frontier import mean
from engine.search.lineage import ancestors
from engine.search.reflection import _clip, _fence, _render_value, parse_answer
from engine.search.textmerge import merge_contents
from engine.state import content_hash, to_evaluator

MAX_SIBLINGS = 4
EVIDENCE_CHARS = 600

SYSTEM = (
    "You combine improvements of {kind}. Several versions were each derived from a base version and each "
    "fixed different failures. Answer with ONE fenced code block (```) holding the complete combined "
    "version and nothing else: it must keep every fix of every version."
)


@dataclass
class Sibling:
    """An improving child and the evidence of what it fixed."""

    cand: Candidate
    parent: Candidate
    scores: dict[str, float]  # its scores on the examples it was tested on
    parent_results: dict[str, Scored]  # the parent's results there (score, side info)

    @property
    def gain(self) -> float:
        """Per example it was tested on, as ``Outcome.gain``: siblings judged on minibatches of
        different sizes (a second look) compare fairly."""
        if not self.scores:
            return 0.0
        return (sum(self.scores.values()) - sum(self.parent_results[k].score for k in self.scores)) / len(self.scores)

    def fixed(self) -> list[str]:
        return sorted((k for k in self.scores if self.scores[k] > self.parent_results[k].score + 1e-12),
                      key=lambda k: (self.parent_results[k].score - self.scores[k], k))


def sibling_from_minibatch(ctx: RunContext, child_id: str) -> Optional[Sibling]:
    """A child tested on its parent's minibatch, with both sides' results read back (no cost)."""
    child = ctx.state.candidates.get(child_id)
    if child is None or not child.parent_ids or not child.minibatch_keys:
        return None
    parent = ctx.state.candidates[child.parent_ids[0]]
    mine = ctx.evals.evaluate(child, child.minibatch_keys, kind="minibatch", charge=False)
    theirs = ctx.evals.evaluate(parent, child.minibatch_keys, kind="minibatch", charge=False)
    keys = [k for k in child.minibatch_keys if k in mine and k in theirs]
    if not keys:
        return None
    return Sibling(child, parent, {k: mine[k].score for k in keys}, {k: theirs[k] for k in keys})


def divergent_siblings(ctx: RunContext, newest_id: str, tried: list[frozenset]) -> list[Sibling]:
    """For the asynchronous schedule: the just-validated ``newest_id`` and up to three other
    fully validated frontier members that neither descend from it nor it from them — siblings
    that diverged while running side by side — as Siblings over their nearest common validated
    ancestor (each with the validation examples it gained on, at most a minibatch's worth).
    Empty when there is no such group that was not tried before."""
    state, m = ctx.state, ctx.cfg.search.minibatch_size
    with state.lock:
        members = sorted(c for c in state.frontier().members() if c in state.full and not state.candidates[c].vetoed)
        if newest_id not in members:
            return []
        lineage = {c: ancestors(state.candidates, c) for c in members}
        others = [c for c in members if c != newest_id and c not in lineage[newest_id] and newest_id not in lineage[c]]
        means = {c: mean(state.scores[c].values()) for c in members}
        group = [newest_id] + sorted(others, key=lambda c: (-means[c], c))[: MAX_SIBLINGS - 1]
        common = set.intersection(*(lineage[c] | {c} for c in group)) & state.full
        if len(group) < 2 or not common or any(set(group) <= t for t in tried):
            return []
        base_id = max(sorted(common), key=lambda c: sum(state.scores[c].values()))
        base, base_scores = state.candidates[base_id], state.scores[base_id]
        gains = {c: sorted((k for k in state.scores[c] if state.scores[c][k] > base_scores.get(k, 0.0) + 1e-12),
                           key=lambda k: (base_scores.get(k, 0.0) - state.scores[c][k], k))[:m] for c in group}
        scores = {c: {k: state.scores[c][k] for k in gains[c]} for c in group if gains[c]}
    if len(scores) < 2:
        return []
    base_results = ctx.evals.known(base, sorted({k for s in scores.values() for k in s}))
    return [Sibling(state.candidates[c], base, s, {k: base_results[k] for k in s}) for c, s in scores.items()
            if all(k in base_results for k in s)]


def sibling_from_validation(ctx: RunContext, cand_id: str, base_id: str) -> Optional[Sibling]:
    """A validated candidate as a Sibling over ``base_id`` (one of its ancestors): the
    validation examples it gained on (at most two minibatches' worth, largest gains first)."""
    state = ctx.state
    with state.lock:
        mine, theirs = dict(state.scores.get(cand_id, {})), dict(state.scores.get(base_id, {}))
    gained = sorted((k for k in mine if k in theirs and mine[k] > theirs[k] + 1e-12),
                    key=lambda k: (theirs[k] - mine[k], k))[: 2 * ctx.cfg.search.minibatch_size]
    base_results = ctx.evals.known(state.candidates[base_id], gained)
    keys = [k for k in gained if k in base_results]
    if not keys:
        return None
    return Sibling(state.candidates[cand_id], state.candidates[base_id], {k: mine[k] for k in keys},
                   {k: base_results[k] for k in keys})


def changed_components(sib: Sibling) -> list[str]:
    return [c for c in sib.cand.content if sib.cand.content[c] != sib.parent.content.get(c)]


def build_merge_prompt(ctx: RunContext, siblings: list[Sibling], component: str) -> list[dict]:
    cfg = ctx.cfg
    kind = cfg.artifact_kind.strip() or "a text artifact"
    parents = {s.parent.id for s in siblings}
    parts = []
    if cfg.objective.strip():
        parts.append("## Objective\n" + cfg.objective.strip())
    if cfg.background.strip():
        parts.append("## Background\n" + cfg.background.strip())
    what = f"the component `{component}` of a multi-part candidate" if len(ctx.components) > 1 else "the candidate"
    parts.append(f"## What you are combining\n{len(siblings)} improved versions of {what} ({kind}) were proposed in "
                 "parallel. Each one fixed different failures. Write ONE version that keeps every fix.")
    if len(parents) == 1:
        parts.append("## Base version (what they all started from)\n" + _fence(siblings[0].parent.content[component]))
    for n, s in enumerate(siblings, 1):
        before = sum(s.parent_results[k].score for k in s.scores)
        lines = [f"## Version {n} (candidate {s.cand.id}): score {before:.4g} → {sum(s.scores.values()):.4g} "
                 f"on {len(s.scores)} example(s)", "What it fixed:"]
        for k in s.fixed() or []:
            r = s.parent_results[k]
            lines.append(f"- example `{k}`: {r.score:.4g} → {s.scores[k]:.4g}. Before, the evaluation said:\n" +
                         _render_value({"example": ctx.examples[k].payload, **r.side_info}, EVIDENCE_CHARS))
        if not s.fixed():
            lines.append("- (no single example improved; the total did)")
        old, new = s.parent.content[component], s.cand.content[component]
        diff = "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), "parent", f"version {n}", lineterm=""))
        lines.append("Changes from its parent:\n" + _fence(_clip(diff, 4000), "diff"))
        lines.append("Full text:\n" + _fence(new))
        parts.append("\n".join(lines))
    parts.append("## Task\nWrite one complete version that contains the fixes of every version above (and loses "
                 "nothing that the base version did well). Answer with one fenced code block holding it.")
    return [{"role": "system", "content": SYSTEM.format(kind=kind)}, {"role": "user", "content": "\n\n".join(parts)}]


def combine(ctx: RunContext, siblings: list[Sibling], merge_id: str, step: int) -> Optional[str]:
    """Write, test and record the merge of ``siblings`` (≥ 2). Returns the merged candidate's id
    when it kept every sibling's gains on their examples (validation is the caller's), else
    None. Every attempt is recorded as a candidate, failed or rejected ones included."""
    # equal gains by content, not by the ids (random per run): which siblings are kept, and the merge's text
    siblings = sorted(siblings, key=lambda s: (-s.gain, s.cand.content_hash, s.cand.id))[:MAX_SIBLINGS]
    merged = ctx.state.candidates.get(merge_id)
    if merged is not None and merged.finished_at is not None:
        return merge_id if merged.improved and merged.status != CandidateStatus.REJECTED else None
    merged = merged or Candidate(id=merge_id, run_id=ctx.run_id, content={}, content_hash="", origin=Origin.SIBLING_MERGE,
                                 parent_ids=[s.cand.id for s in siblings], step=step,
                                 frontier_version=ctx.state.frontier_version, started_at=utcnow())
    if not merged.content:
        if not ctx.budget.affords_metric_calls(len(_test_keys(siblings, fixes_only=True))):
            # written, it could not be tested: a merge LM call would be paid for nothing
            return _finish(ctx, merged, CandidateStatus.FAILED, "budget: too few metric calls left to test a merge; "
                                                                "not written", Cause.BUDGET)
        content, why, cause = _merged_content(ctx, siblings, merged)
        if content is None:
            return _finish(ctx, merged, CandidateStatus.FAILED, why, cause)
        chash = content_hash(content)
        same = next((s for s in siblings if s.cand.content_hash == chash), None)
        if same is not None:  # one version already holds every change: it stands for the merge
            _finish(ctx, merged, CandidateStatus.FAILED, f"the merge is identical to {same.cand.id}, which already holds every "
                                           "version's changes; that version is tested in its place")
            return same.cand.id if _keeps_gains(ctx, same.cand, siblings)[0] else None
        if any(c.content_hash == chash for c in ctx.state.candidates.values()):
            return _finish(ctx, merged, CandidateStatus.FAILED, "the merge repeats an existing candidate")
        problem = ctx.evals.executor.validate(to_evaluator(content, ctx.single_text))
        merged.content, merged.content_hash = content, chash
        if problem:
            return _finish(ctx, merged, CandidateStatus.FAILED, f"invalid candidate (validate): {problem}", Cause.INVALID)
        ctx.save(merged)
    return _test(ctx, merged, siblings)


def _merged_content(ctx: RunContext, siblings: list[Sibling],
                    merged: Candidate) -> tuple[Optional[dict], str, Cause | str]:
    """The merge's content: the line-level three-way merge over the siblings' common parent when
    it has no real conflict (no LM call), else the reflection LM writes the one conflicting
    component (the others three-way merged); with the reason and cause it could not be written.
    Sets ``merged.component`` and ``merged.merge_path``."""
    changed = [changed_components(s) for s in siblings]
    if len({s.parent.id for s in siblings}) == 1:
        content, conflicts = merge_contents(siblings[0].parent.content, [s.cand.content for s in siblings])
    else:  # no common base to merge over: every changed component is left to the LM
        content, conflicts = dict(siblings[0].cand.content), sorted({c for cs in changed for c in cs})
    merged.component = ",".join(sorted({c for cs in changed for c in cs}))
    if not conflicts:
        merged.merge_path = MergePath.THREE_WAY
        return content, "", ""
    if len(conflicts) != 1:
        return None, (f"the versions changed the same lines of several components ({', '.join(conflicts)}) "
                      "in different ways; not merged"), ""
    component = conflicts[0]
    merged.merge_path = MergePath.LM
    if not ctx.budget.may_call_lm("merge"):
        return None, "budget: no room left for the merge LM call", Cause.BUDGET
    if not ctx.budget.affords_metric_calls(len(_test_keys(siblings, fixes_only=False))):
        return None, "budget: too few metric calls left to test an LM-written merge; no LM call made", Cause.BUDGET
    messages = build_merge_prompt(ctx, siblings, component)
    res, call_id = ctx.call_lm(ctx.cfg.reflection_lm, messages, "merge", merged.id)
    merged.lm_call_id = call_id
    if res.error:
        return None, f"merge LM failed: {res.error}", ""
    parsed = parse_answer(res.text, "", require_fence=ctx.cfg.search.require_fence)
    if parsed.text is None:
        return None, f"unusable merge answer: {parsed.reason}", ""
    content[component] = parsed.text
    return content, "", ""


def _keeps_gains(ctx: RunContext, cand: Candidate, siblings: list[Sibling],
                 fixes_only: bool = False) -> tuple[Optional[bool], dict, list]:
    """Test ``cand`` on every sibling's examples: (kept every sibling's gains — None when the
    budget cut the test short —, its scores, the siblings whose gains it lost). A sibling's
    gains are kept when ``cand`` scores at least as well on each example the sibling fixed and
    in total on the sibling's examples (siblings of one parent share their examples, so totals
    alone would not see a dropped fix). ``fixes_only``: only the examples the siblings fixed."""
    keys = _test_keys(siblings, fixes_only)
    results = ctx.evals.evaluate(cand, keys, kind="minibatch")
    got = {k: r.score for k, r in results.items()}
    if len(got) < len(keys):
        return None, got, []
    lost = [s for s in siblings if any(got[k] + 1e-12 < s.scores[k] for k in s.fixed())
            or (not fixes_only and sum(got[k] for k in s.scores) + 1e-12 < sum(s.scores.values()))]
    return not lost, got, lost


def _test_keys(siblings: list[Sibling], fixes_only: bool) -> list[str]:
    return sorted({k for s in siblings for k in (s.fixed() if fixes_only else s.scores)})


def _test(ctx: RunContext, merged: Candidate, siblings: list[Sibling]) -> Optional[str]:
    # a three-way merge keeps every sibling's changed lines as they were: it is tested only where
    # they fixed something (their other examples cost as many metric calls again, and the
    # validation pass that follows judges the whole)
    kept, got, lost = _keeps_gains(ctx, merged, siblings, fixes_only=merged.merge_path == MergePath.THREE_WAY)
    if kept is None:
        return _finish(ctx, merged, CandidateStatus.FAILED, "budget: no metric calls left to test the merge", Cause.BUDGET)
    keys = sorted(got)
    merged.minibatch_keys = keys
    merged.minibatch_score = sum(got.values())
    merged.parent_minibatch_score = sum(max(s.scores.get(k, float("-inf")) for s in siblings) for k in keys)
    if lost:
        names = ", ".join(f"{s.cand.id} (" + ", ".join(f"`{k}` {got[k]:.4g} vs {s.scores[k]:.4g}" for k in s.fixed()) + ")"
                          for s in lost)
        return _finish(ctx, merged, CandidateStatus.REJECTED, f"the merge lost the gains of {names}")
    merged.improved = True
    _finish(ctx, merged, CandidateStatus.PROPOSED, f"merge kept the gains of all {len(siblings)} versions")
    return merged.id


def _finish(ctx: RunContext, cand: Candidate, status: CandidateStatus, reason: str, cause: Cause | str = "") -> None:
    if not cand.content:
        cand.content_hash = ""
    ctx.set_status(cand, status, reason, finished_at=utcnow(), cause=cause)
    return None
