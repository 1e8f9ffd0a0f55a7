"""The pieces of a step, tested directly rather than through whole runs: planning slots,
choosing which improving children are validated, a validation pass (and its early stop), one
proposal (improved, or failed on an LM error), and the refusal of status changes that make no
sense. The database, sandbox pool and scripted LM are the real ones."""

from __future__ import annotations

import litellm
import pytest

from engine.optimizer import Optimizer
from engine.search.minibatch import Minibatch
from engine.search.proposal import Outcome, run_proposal
from engine.runs import submit_run
from engine.state import SINGLE, content_hash
from engine.schedules.synchronous import choose_children, plan_slots
from tests.support.scripted_lm import install_script, uninstall_script
from engine.search.validation import Validator
from storage import repo
from storage.errors import InvalidTransition
from storage.models import Candidate
from storage.states import CandidateStatus, RunStatus
from tests.support import toy
from tests.support.harness import lm_client, toy_config

# ---------------------------------------------------------------- pure pieces


def test_plan_slots_keeps_room_for_a_validation_pass():
    # 2 parents × 2 proposals; each child costs 3, each parent's first proposal 3 more
    assert plan_slots([3, 3], [3, 3], 2, None, None, 6) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # 20 left, 6 kept for a validation pass: 14 pays (0,0)=6, (0,1)=3, but not (1,0)=6 more
    assert plan_slots([3, 3], [3, 3], 2, None, 20, 6) == [(0, 0), (0, 1)]
    # known parent results cost nothing: (1,0) now costs 3
    assert plan_slots([3, 3], [3, 0], 2, None, 20, 6) == [(0, 0), (0, 1), (1, 0)]


def test_plan_slots_at_the_budget_tail_and_under_a_dollar_cap():
    # no slot plus a validation pass fits: as many slots as their minibatch tests fit, at once
    assert plan_slots([3, 3], [3, 3], 2, None, 10, 20) == [(0, 0), (0, 1)]
    assert plan_slots([3, 3], [3, 3], 2, None, 5, 20) == []
    assert plan_slots([3, 3], [3, 3], 2, 1, None, 6) == [(0, 0)]  # one LM call affordable


def test_choose_children_by_accept_rule_most_promising_first():
    outs = [Outcome("c1", True, 1.0), Outcome("c2", False, -1.0), Outcome("c3", True, 2.0), Outcome("c4", True, 1.0)]
    chosen, rest = choose_children(outs, "all", 2, {})
    assert [o.child_id for o in chosen] == ["c3", "c1", "c4"] and rest == []
    chosen, rest = choose_children(outs, "best", 2, {})
    assert [o.child_id for o in chosen] == ["c3"] and [o.child_id for o in rest] == ["c1", "c4"]
    chosen, rest = choose_children(outs, "top_k", 2, {})
    assert [o.child_id for o in chosen] == ["c3", "c1"] and [o.child_id for o in rest] == ["c4"]


def test_equal_gains_are_chosen_by_content_not_by_id():
    """Ids hash the run id (random per run): a tie broken by id would make two runs with one
    seed validate different children."""
    outs = [Outcome("c1", True, 1.0), Outcome("c4", True, 1.0)]
    for hashes in ({"c1": "aa", "c4": "bb"}, {"c1": "bb", "c4": "aa"}):
        chosen, _ = choose_children(outs, "best", 1, hashes)
        assert chosen[0].child_id == min(hashes, key=hashes.get)


# ---------------------------------------------------------------- with a real run context


@pytest.fixture
def ctx(sqlite_db, tmp_path):
    install_script(toy.script)
    cfg = toy_config(8, search={"max_score": 1.0, "minibatch_size": 4})
    run_id = submit_run(sqlite_db, cfg)
    context = Optimizer(sqlite_db, run_id, lm=lm_client(tmp_path))._context()
    yield context
    context.evals.close()
    context.evals.executor.close()
    uninstall_script()


def _candidate(ctx, text: str, parent_ids=()) -> Candidate:
    content = {SINGLE: text}
    return ctx.save(Candidate(id=f"c-{len(ctx.state.candidates)}", run_id=ctx.run_id, content=content,
                              content_hash=content_hash(content), origin="human", parent_ids=list(parent_ids)))


def _validator(ctx) -> Validator:
    return Validator(ctx.state, ctx.evals, ctx.val_keys, ctx.cfg.search, ctx.set_status)


def test_a_validation_pass_accepts_the_child_and_adds_it_to_the_pool(ctx):
    cand = _candidate(ctx, "start alpha bravo")
    _validator(ctx).validate(cand)
    saved = repo.get_candidate(ctx.db, cand.id)
    assert saved.status == CandidateStatus.ACCEPTED and saved.val_count == 8 and saved.val_mean == 2 / 8
    assert saved.val_cut_short == "" and ctx.state.best() == (cand.id, 2 / 8)


def test_a_validation_pass_stops_early_when_the_child_cannot_matter(ctx):
    _validator(ctx).validate(_candidate(ctx, " ".join(toy.WORDS[:8])))  # 1.0 everywhere: the frontier is full
    weak = _candidate(ctx, "start")
    _validator(ctx).validate(weak)
    saved = repo.get_candidate(ctx.db, weak.id)
    assert saved.val_count < 8 and saved.val_cut_short.startswith("stopped early after")


def test_recorded_results_are_read_again_from_memory(ctx, monkeypatch):
    """A step read its parents' minibatch results from the database three or four times (its
    plan, each slot's draw, the slot, the merge); a candidate's results, recorded or read once,
    come from memory after that, the same as the database holds them."""
    cand = _candidate(ctx, "start alpha")
    keys = ctx.train_keys[:4]
    first = ctx.evals.evaluate(cand, keys, kind="minibatch")
    reads: list[str] = []
    real = repo.known_evaluations
    monkeypatch.setattr(repo, "known_evaluations", lambda *a, **k: reads.append(a[2]) or real(*a, **k))
    again = ctx.evals.evaluate(cand, keys, kind="minibatch")
    assert reads == [] and {k: r.score for k, r in again.items()} == {k: r.score for k, r in first.items()}
    ctx.evals.known(cand, ctx.train_keys[:6])  # two more keys: only those are looked up
    assert reads == [cand.id]
    stored = {e.example_pk: e.score for e in repo.evaluations_for(ctx.db, ctx.run_id, [cand.id])}
    assert {ctx.examples[k].pk: r.score for k, r in again.items()} == stored


def test_one_proposal_improves_on_its_parents_minibatch(ctx):
    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    minibatch = ctx.train_keys[:4]
    results = ctx.evals.evaluate(parent, minibatch, kind="minibatch")
    outcome = run_proposal(ctx, ctx.state.candidates[parent.id], 0, 0, Minibatch(minibatch, results))
    child = repo.get_candidate(ctx.db, outcome.child_id)
    assert outcome.improved and outcome.gain == 1 / 4 and child.improved  # +1 on a minibatch of 4
    assert child.status == CandidateStatus.PROPOSED and child.parent_ids == [parent.id]
    assert repo.get_run(ctx.db, ctx.run_id).proposals_improved == 1


def test_a_proposal_whose_lm_fails_is_a_failed_child_and_counts_in_the_streak(ctx):
    def failing(messages, params):
        raise litellm.APIConnectionError(message="connection refused", llm_provider="scripted", model="toy")

    install_script(failing)
    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    results = ctx.evals.evaluate(parent, ctx.train_keys[:4], kind="minibatch")
    outcome = run_proposal(ctx, ctx.state.candidates[parent.id], 0, 0, Minibatch(ctx.train_keys[:4], results))
    child = repo.get_candidate(ctx.db, outcome.child_id)
    assert not outcome.improved and not child.improved and child.status == CandidateStatus.FAILED
    assert ctx.consecutive_lm_failures == 1


def test_an_unchanged_answer_is_asked_for_the_missing_rules_and_other_slips_to_change(ctx):
    """The retry after an unchanged answer asks for the version with the rules it does not state added
    as sentences; after an answer with no fence, for a different change. Each retry's messages are the
    first exchange and what was wrong (its prefix already read by a local runtime)."""
    from engine.search.retries import ASK_AGAIN, UNCHANGED_RETRY

    asked: list[list[dict]] = []

    def script(messages, params):
        asked.append(messages)
        if len(messages) == 2:
            return "Same.\n```\nstart\n```" if len(asked) == 1 else "No block here."
        word = ctx.examples[minibatch[len(asked) > 2]].payload["word"]  # one fix per proposal: no repeat
        return f"Rules: ...\n```\nstart {word}\n```"

    install_script(script)
    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    minibatch = ctx.train_keys[:4]
    results = ctx.evals.evaluate(parent, minibatch, kind="minibatch")
    for k in (0, 1):
        outcome = run_proposal(ctx, ctx.state.candidates[parent.id], 0, k, Minibatch(minibatch, results))
        assert outcome.improved
    unchanged, no_fence = asked[1], asked[3]
    assert [m["role"] for m in unchanged] == ["system", "user", "assistant", "user"]
    assert unchanged[:2] == asked[0] and unchanged[2]["content"] == "Same.\n```\nstart\n```"
    assert unchanged[3]["content"] == UNCHANGED_RETRY and "short sentences added that state the rules" in UNCHANGED_RETRY
    assert no_fence[2]["content"] == "No block here." and no_fence[3]["content"].endswith(ASK_AGAIN)
    assert "no fenced code block" in no_fence[3]["content"]
    assert repo.get_run(ctx.db, ctx.run_id).proposals_retried == 2



@pytest.mark.parametrize("seed,changed", [
    ("def answer():\n    return 'start'", "def answer():\n    return 'start a'"),
    (r"^(start|\w+)$", r"^(start|a|\w+)$"),
])
def test_an_unchanged_notation_is_told_so_without_being_asked_for_rules(ctx, seed, changed):
    """Asked for the rules first, a small model fenced them before the unchanged function (the list
    became the new code, a SyntaxError) and fenced the objective as a new regular expression: code
    and other notations are only told that they are unchanged."""
    from engine.search.retries import UNCHANGED_TOLD_RETRY

    asked: list[list[dict]] = []

    def script(messages, params):
        asked.append(messages)
        return f"```\n{seed}\n```" if len(asked) == 1 else f"```\n{changed}\n```"

    install_script(script)
    parent = _candidate(ctx, seed)
    _validator(ctx).validate(parent)
    minibatch = ctx.train_keys[:4]
    run_proposal(ctx, ctx.state.candidates[parent.id], 0, 0,
                 Minibatch(minibatch, ctx.evals.evaluate(parent, minibatch, kind="minibatch")))
    assert len(asked) == 2 and asked[1][3]["content"] == UNCHANGED_TOLD_RETRY
    assert "rules" not in UNCHANGED_TOLD_RETRY


def test_prose_is_told_apart_from_notations():
    from engine.search.reflection import is_prose

    prose = ["start", "What is the price in this message?\n\n{message}",
             "Restore files from a snapshot.\n\nUsage: snap restore SNAPSHOT [PATH...] --target DIR --latest --dry-run"]
    notations = [r"\d+:\d+(:\d+)?", r"^(?:(?:19|20)\d{2})-(0[1-9]|1[0-2])$", '{"model": "gpt-4", "temperature": 0.7}',
                 "import os\nprint(os.getcwd())", "function f(x) { return [x, x * 2].map((y) => y + 1); }", "", "  \n"]
    assert [is_prose(t) for t in prose] == [True] * len(prose)
    assert [is_prose(t) for t in notations] == [False] * len(notations)


# ---------------------------------------------------------------- run status transitions


def test_transition_run_refuses_what_makes_no_sense(sqlite_db):
    run_id = submit_run(sqlite_db, toy_config())
    assert repo.transition_run(sqlite_db, run_id, RunStatus.RUNNING, "") == RunStatus.QUEUED
    repo.transition_run(sqlite_db, run_id, RunStatus.STOPPED, "stopped by ann")
    with pytest.raises(InvalidTransition, match="cannot go from stopped to completed"):
        repo.transition_run(sqlite_db, run_id, RunStatus.COMPLETED, "budget spent")
    run = repo.get_run(sqlite_db, run_id)
    assert (run.status, run.status_reason) == ("stopped", "stopped by ann")
    repo.transition_run(sqlite_db, run_id, RunStatus.STOPPED, "stopped again")  # the same status: allowed
    with pytest.raises(ValueError, match="use transition_run"):
        repo.set_run_fields(sqlite_db, run_id, status="running")


def test_slots_of_one_parent_claim_a_shared_text_in_slot_order(ctx):
    """Two slots of one parent answered with the same text: slot 0 keeps it and slot 1 retries,
    even when slot 0's answer arrives last (left to the race, which one retried depended on LM
    timing, and two runs with one seed diverged)."""
    from concurrent.futures import ThreadPoolExecutor
    import time

    from engine.schedules.claim_order import ClaimOrder
    from engine.schedules.synchronous import _ParentMinibatches, _slot

    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    minibatches = [ctx.train_keys[:2], ctx.train_keys[2:4]]

    def script(messages, params):
        if len(messages) > 2:  # a retry: told its text repeats a sibling's
            return "Another.\n```\nstart retried\n```"
        if f"Example `{minibatches[0][0]}`" in messages[-1]["content"]:
            time.sleep(0.6)  # slot 0 answers last
        return "Same.\n```\nstart alpha\n```"

    install_script(script)
    order = ClaimOrder([(parent.id, (0, 0)), (parent.id, (1, 0))], ctx.interrupt)
    parents = _ParentMinibatches(ctx, [parent.id, parent.id], sampler=None, first=0)
    parents._results = {p: Minibatch(mb, ctx.evals.evaluate(parent, mb, kind="minibatch"))  # drawn: these two
                        for p, mb in enumerate(minibatches)}
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_slot, ctx, parents, p, 0, order) for p in (0, 1)]
        first, second = (repo.get_candidate(ctx.db, f.result().child_id) for f in futures)
    assert first.content[SINGLE] == "start alpha" and second.content[SINGLE] == "start retried"


def test_a_retry_waits_for_no_other_slot_and_no_slot_waits_for_a_retry(ctx):
    """Slot 0's first answer is unchanged, and its retry is slow: slot 1 (same parent) claims its
    own text and finishes its minibatch test while that retry is still out (it used to wait for
    slot 0's whole proposal, retry and test included: retries ran in rounds)."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import datetime, timezone
    import time

    from engine.schedules.claim_order import ClaimOrder
    from engine.schedules.synchronous import _ParentMinibatches, _slot

    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    minibatches = [ctx.train_keys[:2], ctx.train_keys[2:4]]
    retry_answered: list[float] = []

    def script(messages, params):
        if f"Example `{minibatches[0][0]}`" not in messages[1]["content"]:
            return "New.\n```\nstart beta\n```"  # slot 1, at once
        if len(messages) <= 2:
            return "Same.\n```\nstart\n```"  # slot 0: unchanged, retried
        time.sleep(0.8)
        retry_answered.append(time.time())
        return "Another.\n```\nstart gamma\n```"

    install_script(script)
    order = ClaimOrder([(parent.id, (0, 0)), (parent.id, (1, 0))], ctx.interrupt)
    parents = _ParentMinibatches(ctx, [parent.id, parent.id], sampler=None, first=0)
    parents._results = {p: Minibatch(mb, ctx.evals.evaluate(parent, mb, kind="minibatch"))
                        for p, mb in enumerate(minibatches)}
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_slot, ctx, parents, p, 0, order) for p in (0, 1)]
        first, second = (repo.get_candidate(ctx.db, f.result().child_id) for f in futures)
    assert first.content[SINGLE] == "start gamma" and second.content[SINGLE] == "start beta"
    tested = second.finished_at.replace(tzinfo=second.finished_at.tzinfo or timezone.utc)
    assert tested < datetime.fromtimestamp(retry_answered[0], timezone.utc)


def test_no_retry_for_a_minibatch_a_sibling_has_already_aced(ctx):
    """Two proposals for one parent share its minibatch; the first child gets every example of it
    right, and the second's first answer, arriving after that, is the text unchanged: it is not
    asked again (the retry's child could at best tie there), and its reason says why."""
    from concurrent.futures import ThreadPoolExecutor
    import time

    from engine.schedules.claim_order import ClaimOrder
    from engine.schedules.synchronous import _ParentMinibatches, _slot

    parent = _candidate(ctx, "start")
    _validator(ctx).validate(parent)
    minibatch = ctx.train_keys[:2]
    words = " ".join(ctx.examples[k].payload["word"] for k in minibatch)
    retries: list[int] = []

    def script(messages, params):
        if len(messages) > 2:
            retries.append(params["sample_index"])
            return "Another.\n```\nstart retried\n```"
        if params["sample_index"] == 0:
            return f"Both.\n```\nstart {words}\n```"  # right on the whole minibatch
        time.sleep(0.8)  # after the first child's test
        return "Same.\n```\nstart\n```"

    install_script(script)
    order = ClaimOrder([(parent.id, (0, 0)), (parent.id, (0, 1))], ctx.interrupt)
    parents = _ParentMinibatches(ctx, [parent.id], sampler=None, first=0)
    parents._results = {0: Minibatch(minibatch, ctx.evals.evaluate(parent, minibatch, kind="minibatch"))}
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(_slot, ctx, parents, 0, k, order) for k in (0, 1)]
        first, second = (repo.get_candidate(ctx.db, f.result().child_id) for f in futures)
    assert first.improved and first.minibatch_score == len(minibatch)
    assert retries == [] and second.status == "failed"
    assert f"no retry: {first.id} already got every example of this minibatch right" in second.reason
