"""One reflective proposal: parent feedback → reflection LM → validated child → minibatch test.

A proposal never raises: an LM error, an unusable answer, a repeat, an invalid candidate or a
budget refusal all end as a ``failed`` child row with the reason, which is lineage too.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Optional

from storage import lm_calls, repo
from storage.models import Candidate, utcnow
from storage.states import CandidateStatus, Cause, Origin

from engine.context import RunContext
from engine.evaluation import Scored
from engine.interrupt import INTERRUPTED
from engine.config import LMConfig
from engine.lm.images import supports_vision
from engine.lm.providers import is_local
from engine.schedules.claim_order import ATTEMPTS
from engine.search.aced import aced_by_sibling
from engine.search.minibatch import Minibatch
from engine.search.second_look import extra_keys, looks_again
from engine.search.reflection import NO_FENCE, UNCHANGED, ExampleFeedback, answer_token_cap, build_prompt, is_prose, parse_answer
from engine.search.retries import ASK_AGAIN, RETRIED, RULES_TOKENS, UNCHANGED_TOLD_RETRY, told_retry
from engine.state import content_hash, deterministic_id, to_evaluator


@dataclass
class Outcome:
    child_id: str
    improved: bool  # passed minibatch acceptance
    # (child minibatch total - parent minibatch total) per example judged: a child judged again on a
    # second look sums over more examples than its siblings, and totals over 3 and over 9 examples
    # would rank the one that only tied on the first 3 above one that won there
    gain: float


def proposal_temperature(base: float, k: int) -> float:
    """Per-proposal variation so the K proposals of one parent differ (and cache apart)."""
    return min(base + 0.15 * k, 1.5)


def sample_index(model: str, k: int, child_id: str, attempt: int = 0) -> int:
    """The sample index of a reflection (part of its cache key; the sampling seed of the LMs that
    take one). On the local model its own for every proposal and attempt of every run, and the same
    when a step is replayed on resume (a child's id comes from the run, the step and the slot): with
    the slot ``k`` as the seed, the first proposal of every step sampled alike, and the 1.5B model
    answered a prompt much like the last one word for word (a real-LM run on a prompt task proposed
    the same two texts for 9 steps, then stopped for want of progress, while GEPA's calls, without
    a seed, sampled anew). Other models keep ``k`` (a scripted test LM reads it)."""
    if not is_local(model):
        return k
    return zlib.crc32(f"{child_id}:{attempt}".encode()) & 0x7FFFFFFF


def feedback_for(ctx: RunContext, results: dict[str, Scored]) -> list[ExampleFeedback]:
    """Minibatch feedback, worst examples first. The same for every proposal of a parent: the
    siblings differ by sample index and temperature, and a prompt that is identical up to the
    end lets a local runtime reuse its processed prefix (seconds instead of tens of seconds)."""
    fbs = [ExampleFeedback(k, r.score, ctx.examples[k].payload, r.side_info, r.error) for k, r in results.items()]
    fbs.sort(key=lambda f: (f.score, f.key))
    return fbs


def human_feedback(ctx: RunContext, candidate_id: str) -> list[str]:
    return [c.text for c in repo.list_comments(ctx.db, ctx.run_id, candidate_id, kind="feedback")]


def run_proposal(ctx: RunContext, parent: Candidate, slot: int, k: int, mb: Minibatch) -> Outcome:
    """Proposal k of parent slot ``slot`` (a parent may fill several slots of one step), on the
    parent's minibatch ``mb`` (``engine.search.minibatch``)."""
    child_id = deterministic_id(ctx.run_id, ctx.step_index, slot, parent.id, k, "reflection")
    existing = repo.find_candidate(ctx.db, child_id)
    if existing is not None and existing.status != CandidateStatus.PROPOSED and existing.finished_at:
        return Outcome(child_id, existing.status == CandidateStatus.ACCEPTED or existing.improved,
                       (existing.minibatch_score or 0) - (existing.parent_minibatch_score or 0))
    if existing is not None and existing.minibatch_keys and existing.minibatch_keys != mb.keys:
        # a step redone after a restart: the child keeps the minibatch it was written for
        keys = list(existing.minibatch_keys)
        mb = Minibatch(keys, ctx.evals.evaluate(parent, keys, kind="minibatch"), existing.minibatch_reason)
    component = next_component(ctx.components, parent, len(ctx.state.tried_texts(parent.id, ctx.step_index)) + k)
    child = existing or Candidate(id=child_id, run_id=ctx.run_id, content={}, content_hash="", origin=Origin.REFLECTION,
                                  parent_ids=[parent.id], component=component, step=ctx.step_index,
                                  frontier_version=ctx.state.frontier_version, started_at=utcnow(),
                                  minibatch_keys=list(mb.keys), minibatch_reason=mb.reason)
    if not child.content:
        if mb.aced:
            return Outcome(_fail(ctx, child, f"skipped: {mb.reason}").id, False, 0.0)
        if _perfect(ctx, mb.results):
            return Outcome(_fail(ctx, child, f"skipped: the parent scores the perfect score {ctx.cfg.search.max_score:g} on "
                                             "every minibatch example (skip_perfect_score)").id, False, 0.0)
        child = _reflect(ctx, parent, child, k, mb.results)
        if child.status == CandidateStatus.FAILED:
            return Outcome(child.id, False, 0.0)
    return _test_on_minibatch(ctx, parent, child, mb.keys, mb.results)


def _perfect(ctx: RunContext, parent_results: dict[str, Scored]) -> bool:
    """GEPA's skip_perfect_score: nothing to learn from a minibatch the parent already aces."""
    s = ctx.cfg.search
    return (s.skip_perfect_score and bool(parent_results)
            and all(r.score >= s.max_score - 1e-12 for r in parent_results.values()))


def _other_components(ctx: RunContext, parent: Candidate, child: Candidate, k: int, parent_results) -> dict | None:
    """With ``component_selector = "all"``: the parent's content with every component but the
    child's own rewritten (one LM call each; an unusable answer keeps that component as it was).
    None when the LM failed or the budget refused a call (the child is then failed)."""
    content = dict(parent.content)
    if ctx.cfg.search.component_selector != "all":
        return content
    cfg = ctx.cfg
    for comp in [c for c in ctx.components if c != child.component]:
        prompt = _prompt(ctx, parent, comp, parent_results)
        if not ctx.budget.may_call_lm():
            _fail(ctx, child, "budget: no room left for another LM call", Cause.BUDGET)
            return None
        res, _ = ctx.call_lm(reflection_lm(ctx, parent.content[comp]), prompt.messages, "reflection", child.id,
                             sample_index=sample_index(cfg.reflection_lm.model, k, f"{child.id}:{comp}"),
                             temperature=proposal_temperature(cfg.reflection_lm.temperature, k))
        if res.error:
            if res.error_kind == INTERRUPTED:
                _fail(ctx, child, res.error, Cause.INTERRUPTED)
            else:
                _fail(ctx, child, f"reflection LM failed on component {comp!r}: {res.error}", Cause.LM_FAILED)
            return None
        parsed = parse_answer(res.text, parent.content[comp], require_fence=cfg.search.require_fence)
        if parsed.text is not None:
            content[comp] = parsed.text
    return content


def _prompt(ctx: RunContext, parent: Candidate, component: str, parent_results):
    cfg = ctx.cfg
    return build_prompt(kind=cfg.artifact_kind, objective=cfg.objective, background=cfg.background,
                        component=component, components=ctx.components, current_text=parent.content[component],
                        feedback=feedback_for(ctx, parent_results), human_feedback=human_feedback(ctx, parent.id),
                        tried=tried_shown(ctx, parent), max_chars=ctx.prompt_char_budget(cfg.reflection_lm),
                        template=cfg.reflection_lm.prompt_template, vision=supports_vision(cfg.reflection_lm.model),
                        compact=is_local(cfg.reflection_lm.model))


def tried_shown(ctx: RunContext, parent: Candidate) -> list[tuple[str, str]]:
    """The earlier texts for ``parent`` that its next reflection lists under "Already tried": none
    on the local model. Shown them, the 1.5B model copied one as its answer (on real-LM runs a
    third of its proposals on a prompt task were repeats, and a retry told of the repeat repeated it
    again about half the time); GEPA shows none. A repeat is still caught, and sampled again."""
    if is_local(ctx.cfg.reflection_lm.model):
        return []
    return ctx.state.tried_outcomes(parent.id, ctx.step_index)


def reflection_lm(ctx: RunContext, current_text: str) -> LMConfig:
    """The reflection LM's settings for rewriting ``current_text``: on the local model the answer
    cap is fitted to the text's size (``answer_token_cap``); other models keep theirs."""
    lm = ctx.cfg.reflection_lm
    if not is_local(lm.model):
        return lm
    return lm.model_copy(update={"max_tokens": answer_token_cap(current_text, lm.max_tokens)})


def next_component(components: list[str], parent: Candidate, offset: int) -> str:
    """Round robin along the lineage (as GEPA): a child rewrites the component after the one
    that produced its parent; further proposals on the same parent move on by ``offset``."""
    start = components.index(parent.component) + 1 if parent.component in components else 0
    return components[(start + offset) % len(components)]


def _fail(ctx: RunContext, child: Candidate, reason: str, cause: Cause | str = "") -> Candidate:
    if not child.content:
        child.content_hash = ""
    return ctx.set_status(child, CandidateStatus.FAILED, reason, finished_at=utcnow(), cause=cause)


def _reflect(ctx: RunContext, parent: Candidate, child: Candidate, k: int, parent_results) -> Candidate:
    try:
        return _reflect_in_turn(ctx, parent, child, k, parent_results)
    finally:  # this slot claims nothing more: the slots after it need not wait for its minibatch test
        if ctx.claim_turn is not None:
            ctx.claim_turn.done()


def _reflect_in_turn(ctx: RunContext, parent: Candidate, child: Candidate, k: int, parent_results) -> Candidate:
    cfg = ctx.cfg
    component = child.component
    current = parent.content[component]
    prompt = _prompt(ctx, parent, component, parent_results)
    # first the other components (component_selector = "all"), each call reserved and settled
    # by itself, so that the reservation below is the one the child's own call settles
    base = _other_components(ctx, parent, child, k, parent_results)
    if base is None:
        return ctx.state.candidates[child.id]
    if not ctx.budget.may_call_lm():
        return _fail(ctx, child, "budget: no room left for another LM call", Cause.BUDGET)
    repo.bump_run(ctx.db, ctx.run_id, proposals_total=1)
    messages = prompt.messages
    temperature = proposal_temperature(cfg.reflection_lm.temperature, k)
    parsed_once, lm = False, reflection_lm(ctx, current)
    for attempt in range(ATTEMPTS):  # one retry, told what was wrong: unchanged, invalid, or a repeat
        if attempt:  # a retry is a reflection too: counted
            repo.bump_run(ctx.db, ctx.run_id, proposals_retried=1)
        res, call_id = ctx.call_lm(lm, messages, "reflection", child.id, temperature=temperature,
                                   sample_index=sample_index(lm.model, k, child.id, attempt))
        child.lm_call_id = call_id
        if res.error_kind == INTERRUPTED:
            return _fail(ctx, child, res.error, Cause.INTERRUPTED)
        if res.error:
            return _fail(ctx, child, f"reflection LM failed: {res.error}", Cause.LM_FAILED)
        if attempt == 0:  # an answer, usable or not: the rates are over these (storage.run_figures)
            repo.bump_run(ctx.db, ctx.run_id, proposals_answered=1)
        parsed = parse_answer(res.text, current, require_fence=cfg.search.require_fence)
        rules_retry = False
        if parsed.text is None and not parsed.fenced and cfg.search.require_fence:
            lm_calls.mark_lm_answer_unusable(ctx.db, call_id, "no_fence", f"unusable answer: {parsed.reason}")
        if parsed.text is None and parsed.reason not in RETRIED:
            return _fail(ctx, child, f"unusable answer: {parsed.reason}" + (" (side information was shortened)" if prompt.shortened else ""),
                         _unusable(parsed.reason))
        if parsed.text is None:
            failure, cause, retry = f"unusable answer: {parsed.reason}", _unusable(parsed.reason), RETRIED[parsed.reason]
            rules_retry = parsed.reason == UNCHANGED and is_prose(current)
            if parsed.reason == UNCHANGED and not rules_retry:
                retry = UNCHANGED_TOLD_RETRY
            resample = False  # told, even on the local model: see told_retry (engine.search.retries)
        else:
            if not parsed_once:
                parsed_once = True
                repo.bump_run(ctx.db, ctx.run_id, proposals_parsed=1)
            refused = _claim(ctx, parent, child, base, parsed.text, attempt)
            if refused is None:
                return ctx.save(child)
            failure, cause, retry = refused
            resample = cause == Cause.REPEAT
        if ctx.claim_turn is not None:  # claimed in vain, or never tried: the next turn need not wait for the retry
            ctx.claim_turn.passed(attempt)
        if attempt == 0:
            aced = aced_by_sibling(ctx, parent, child)  # the retry could at best tie it there
            if aced:
                failure += f"; no retry: {aced} already got every example of this minibatch right"
                break
            if not ctx.budget.may_call_lm():  # the retry is one more paid call: reserved like the first
                failure += "; no room in the budget for a retry"
                break
            if not (resample and is_local(lm.model)):
                messages = told_retry(messages, res.text, retry)
            if rules_retry and is_local(lm.model):  # room for the rules it is asked to add
                lm = lm.model_copy(update={"max_tokens": min(cfg.reflection_lm.max_tokens, lm.max_tokens + RULES_TOKENS)})
            temperature = min(temperature + 0.3, 1.5)
    if not child.content:
        child.content_hash = ""
    return _fail(ctx, child, failure, cause)


def _claim(ctx: RunContext, parent: Candidate, child: Candidate, base: dict, text: str,
           attempt: int) -> Optional[tuple[str, Cause, str]]:
    """``text`` as the child's new component, validated, then claimed for ``parent`` (no sibling or
    earlier step proposed it). None when claimed, else (why not, its cause, what the retry is told)."""
    content = dict(base)
    content[child.component] = text
    # validated before it is claimed: an invalid text is not "taken" for this parent, so
    # an LM that repeats it on the retry (or a sibling that proposes it) fails as invalid
    problem = ctx.evals.executor.validate(to_evaluator(content, ctx.single_text))
    child.content, child.content_hash = content, content_hash(content)  # kept as lineage if the retry fails too
    if problem is not None:
        return f"invalid candidate (validate): {problem}", Cause.INVALID, f"That version is invalid: {problem}\n{ASK_AGAIN}"
    if ctx.claim_turn is not None:
        ctx.claim_turn.wait(attempt)
    if ctx.state.claim(parent.id, child.content_hash):
        repo.bump_run(ctx.db, ctx.run_id, proposals_valid=1)
        return None
    # what became of it, if an earlier step tested it (a sibling's fate depends on timing)
    earlier = dict(ctx.state.tried_outcomes(parent.id, ctx.step_index)).get(text, "")
    return ("repeats an earlier proposal for this parent", Cause.REPEAT,
            "That exact version was already proposed for this parent and tried." + (f" Result: {earlier}" if earlier else "")
            + f"\n{ASK_AGAIN}")


def _unusable(parsed_reason: str) -> Cause:
    return Cause.NO_FENCE if parsed_reason == NO_FENCE else Cause.UNUSABLE


def _test_on_minibatch(ctx: RunContext, parent: Candidate, child: Candidate, minibatch: list[str],
                       parent_results: dict[str, Scored]) -> Outcome:
    results = ctx.evals.evaluate(child, [k for k in minibatch if k in parent_results], kind="minibatch")
    keys = [k for k in results if k in parent_results]
    if not keys and ctx.interrupt.is_set():  # a text worth keeping: rejected untested, not failed
        ctx.set_status(child, CandidateStatus.REJECTED, f"interrupted ({ctx.interrupt.reason}) before its minibatch "
                       "test. Pin it to validate it", finished_at=utcnow(), cause=Cause.INTERRUPTED)
        return Outcome(child.id, False, 0.0)
    if not keys:
        _fail(ctx, child, "budget: no metric calls left to test it", Cause.BUDGET)
        return Outcome(child.id, False, 0.0)
    strict = ctx.cfg.search.improvement == "strict"
    tie = strict and looks_again(parent_results, results, keys) and not ctx.interrupt.is_set()
    tied_at = (sum(results[k].score for k in keys), len(keys))
    if tie:  # judged again on more training examples (engine.search.second_look)
        parent_results, results, keys = _second_look(ctx, parent, child, keys, parent_results, results)
    p_total = sum(parent_results[k].score for k in keys)
    c_total = sum(results[k].score for k in keys)
    improved = c_total > p_total + 1e-12 if strict else c_total >= p_total - 1e-12
    child.parent_minibatch_score, child.minibatch_score = p_total, c_total
    if len(keys) > tied_at[1]:
        more = len(keys) - tied_at[1]
        child.minibatch_reason = ((child.minibatch_reason + "; " if child.minibatch_reason else "")
                                  + f"then {more} more training example{'s' * (more != 1)} after a tie on the "
                                  f"first {tied_at[1]} ({tied_at[0]:.4g} vs parent {tied_at[0]:.4g}): a second look")
    child.minibatch_keys = keys
    child.finished_at = utcnow()
    child.improved = improved
    if improved:
        child.reason = "improved" + (" on a second look" if len(keys) > tied_at[1] else "")
        repo.bump_run(ctx.db, ctx.run_id, proposals_improved=1)
        ctx.save(child)
    else:
        looked = " with a second look" if len(keys) > tied_at[1] else ""
        ctx.set_status(child, CandidateStatus.REJECTED, f"no improvement on the minibatch{looked} ({c_total:.4g} vs "
                       f"parent {p_total:.4g})" + worst_regression(parent_results, results, keys), cause=Cause.NO_IMPROVEMENT)
    return Outcome(child.id, improved, (c_total - p_total) / len(keys))


def _second_look(ctx: RunContext, parent: Candidate, child: Candidate, keys: list[str], parent_results, results):
    """The parent's and the child's scores on ``keys`` and on the training examples of a second
    look (``second_look.extra_keys``: those a share of a reflection's time pays for), and the keys
    both were scored on; as they were when none is affordable."""
    known = set(ctx.evals.known(parent, ctx.train_keys))
    extra = extra_keys(child.id, ctx.train_keys, keys, known, ctx.evals.pace, ctx.evals.executor.workers)
    if not extra:
        return parent_results, results, keys
    p_more = ctx.evals.evaluate(parent, extra, kind="minibatch")
    c_more = ctx.evals.evaluate(child, [k for k in extra if k in p_more], kind="minibatch")
    more = [k for k in extra if k in p_more and k in c_more]
    return ({**parent_results, **{k: p_more[k] for k in more}}, {**results, **{k: c_more[k] for k in more}},
            keys + more)


ERROR_FIELDS = ("error", "Error", "exception", "traceback")
NOTE_CHARS = 200


def worst_regression(parent_results: dict[str, Scored], results: dict[str, Scored], keys: list[str]) -> str:
    """``; worst: `key` 1 → 0: what went wrong`` for the example the child lost most on, or "".
    Kept in the rejected child's reason, so the lineage says why, and shown with its text under
    "Already tried" in the next reflection on the same parent: a small model otherwise proposes
    the same broken module again (a NameError it was never shown)."""
    drops = sorted((results[k].score - parent_results[k].score, k) for k in keys)  # largest loss first
    if not drops or drops[0][0] >= -1e-12:
        return ""
    key = drops[0][1]
    r = results[key]
    return (f"; worst: `{key}` {parent_results[key].score:.3g} → {r.score:.3g}: "
            + _first_problem(r))


def _first_problem(r: Scored) -> str:
    """The evaluator's error (its last line), else an error-like side-info field (its last line),
    else the side information on one line, strings with tabs or newlines quoted so that those
    stay visible (``got: "tabs\\tand\\nnewlines"``); at most ``NOTE_CHARS`` characters."""
    text = r.error or next((str(r.side_info[f]) for f in ERROR_FIELDS if r.side_info.get(f)), "")
    if text:
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        text = lines[-1] if lines else ""
    else:
        text = "; ".join(f"{k}: {_one_line(v)}" for k, v in r.side_info.items())
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 1] + "…"


def _one_line(value) -> str:
    if isinstance(value, str) and value.rstrip("\n").isprintable():  # print()'s own newline says nothing
        return value.rstrip("\n")
    return json.dumps(value, ensure_ascii=False, default=str)
