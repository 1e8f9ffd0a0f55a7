"""Batching without quality loss (issue 6): config warnings, accept rules, sibling merges,
budgets reserved per dispatch and per proposal, trimmed steps, early-stopped validation."""

from __future__ import annotations

import re
import threading
import warnings

import pytest

from engine.budget import Budget
from engine.commands import send_command
from engine.config import BudgetConfig, ConfigError, ConfigWarning, parse_config
from engine.runs import submit_run
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import (assert_consistent_totals, evaluations, lm_calls, run_optimizer, run_toy, toy_config,
                                   toy_data)
from tests.support.merge_scripts import lossy_merging_script, merging_script

WORDS = " ".join(toy.WORDS[:8])


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _cands(db, run_id, origin=None):
    return [c for c in repo.list_candidates(db, run_id) if origin is None or c.origin == origin]


# ---------------------------------------------------------------- config: warnings and refusals


def _warnings_of(data: dict) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_config(data)
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_top_k_larger_than_the_batch_warns_at_load_and_is_allowed():
    got = _warnings_of(toy_data(search={"parents_per_step": 2, "proposals_per_parent": 2, "accept": "top_k", "top_k": 6}))
    assert len(got) == 1 and got[0].startswith("search.top_k: 6 is not smaller than the batch (2×2 = 4 proposals)")


def test_top_k_smaller_than_the_batch_does_not_warn():
    assert _warnings_of(toy_data(search={"accept": "top_k", "top_k": 3})) == []


def test_async_with_one_proposal_in_flight_warns_that_it_equals_sync():
    got = _warnings_of(toy_data(search={"parents_per_step": 1, "proposals_per_parent": 1, "schedule": "async"}))
    assert len(got) == 1 and "search.schedule" in got[0] and "same as \"sync\"" in got[0]


def test_an_option_the_async_schedule_cannot_honour_is_refused_at_load():
    search = {"accept": "best"}
    with pytest.raises(ConfigError, match=re.escape("search.accept: 'best' chooses among the children of one step")):
        parse_config(toy_data(search={"schedule": "async", **search}))
    # with one proposal in flight the run is the synchronous loop: every option works
    parse_config(toy_data(search={"schedule": "async", "parents_per_step": 1, "proposals_per_parent": 1, **search}))
    # the system-aware merge works in both schedules (asynchronously it re-bases each validated child)
    parse_config(toy_data(search={"schedule": "async", "merge": True}))


def test_merge_beside_merge_siblings_on_the_async_schedule_is_named_as_unused():
    both = {"schedule": "async", "merge": True, "merge_siblings": True}
    got = _warnings_of(toy_data(search=both))
    assert len(got) == 1 and got[0].startswith("search.merge: with schedule = \"async\" and merge_siblings = true")
    assert not _warnings_of(toy_data(search={**both, "schedule": "sync"}))  # synchronously both apply
    assert not _warnings_of(toy_data(search={**both, "merge_siblings": False}))


def test_the_old_name_acceptance_is_read_and_the_warning_says_to_rename_it():
    data = toy_data(search={"acceptance": "improvement_or_equal"})
    got = _warnings_of(data)
    assert len(got) == 1 and got[0].startswith("search.acceptance: renamed search.improvement")
    assert parse_config(data).search.improvement == "improvement_or_equal"


def test_budget_too_small_for_one_step_is_refused_with_the_minimum():
    with pytest.raises(ConfigError, match=r"budget.max_metric_calls: 7 is too small for even one step; the minimum is 12"):
        parse_config(toy_data(6, search={"schedule": "async"}, budget={"max_metric_calls": 7}))


# ---------------------------------------------------------------- accept rules


@pytest.mark.parametrize("accept,top_k,expected", [("all", 2, 4), ("best", 2, 1), ("top_k", 2, 2)])
def test_accept_rule_chooses_which_improving_children_are_validated(sqlite_db, tmp_path, accept, top_k, expected):
    cfg = toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 2, "accept": accept, "top_k": top_k},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    children = _cands(sqlite_db, run_id, "reflection")
    improved = [c for c in children if c.minibatch_score > c.parent_minibatch_score]
    assert len(children) == 4 and len(improved) == 4  # every toy proposal adds a missing word
    validated = [c for c in children if c.status == "accepted"]
    assert len(validated) == expected and all(c.val_count == 8 for c in validated)
    passed_over = [c for c in children if c.status == "rejected"]
    assert len(passed_over) == 4 - expected
    assert all(c.reason == f"improved on its minibatch but not selected (accept = {accept!r})" for c in passed_over)
    assert all(c.val_count == 0 for c in passed_over)  # they paid no validation pass
    gains = {c.id: c.minibatch_score - c.parent_minibatch_score for c in improved}
    assert min(gains[c.id] for c in validated) >= max((gains[c.id] for c in passed_over), default=0)
    step = repo.list_steps(sqlite_db, run_id)[0]
    assert sorted(step.accepted_ids) == sorted(c.id for c in validated)
    assert_consistent_totals(sqlite_db, run_id)


def test_the_children_passed_over_are_marked_while_the_validation_pass_runs(sqlite_db, tmp_path, monkeypatch):
    """Marking each child passed over is a write; the step's validation pass does not wait for
    them (they stood between the children's tests and the first validation evaluation)."""
    from engine.schedules import synchronous

    validating, seen = threading.Event(), []
    real_validate, real_reject = synchronous.validate_child, synchronous.reject

    def validate_child(ctx, cid):
        validating.set()
        return real_validate(ctx, cid)

    def reject(ctx, cid, reason):
        seen.append(validating.wait(5))
        return real_reject(ctx, cid, reason)

    monkeypatch.setattr(synchronous, "validate_child", validate_child)
    monkeypatch.setattr(synchronous, "reject", reject)
    cfg = toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 2, "accept": "best"},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    assert seen == [True, True, True]
    assert sum(c.status == "rejected" for c in _cands(sqlite_db, run_id, "reflection")) == 3


# ---------------------------------------------------------------- sibling merges


def test_sibling_merge_is_an_origin_sibling_merge_candidate_whose_parents_are_the_siblings(sqlite_db, tmp_path):
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 3, "merge_siblings": True},
                     reflection_lm={"model": "scripted/toy"}, budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=merging_script)
    siblings = _cands(sqlite_db, run_id, "reflection")
    merges = _cands(sqlite_db, run_id, "sibling_merge")
    assert len(merges) == 1
    merged = merges[0]
    assert merged.status == "accepted" and merged.val_count == 8
    assert sorted(merged.parent_ids) == sorted(c.id for c in siblings)
    assert all(c.status == "rejected" and f"combined into the merge {merged.id}" in c.reason for c in siblings)
    words = set(merged.content["text"].split())
    assert all(set(c.content["text"].split()) <= words for c in siblings)  # every sibling's fix is in it
    # what each fixed was in the merge prompt: the parent, each child, its gains
    merge_calls = [m for m, _ in stats.calls if "You combine improvements" in m[0]["content"]]
    assert len(merge_calls) == 1
    prompt = merge_calls[0][1]["content"]
    assert "## Base version" in prompt and prompt.count("Full text:") == 3 and "What it fixed:" in prompt
    step = repo.list_steps(sqlite_db, run_id)[0]
    assert step.accepted_ids == [merged.id] and merged.id in step.proposal_ids
    merge_lm = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "merge"]
    assert len(merge_lm) == 1 and merge_lm[0].candidate_id == merged.id
    assert_consistent_totals(sqlite_db, run_id)


def test_a_merge_that_drops_a_fix_is_evaluated_and_rejected_on_its_merits(sqlite_db, tmp_path):
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 3, "merge_siblings": True},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=lossy_merging_script)
    merged = _cands(sqlite_db, run_id, "sibling_merge")[0]
    assert merged.status == "rejected" and merged.reason.startswith("the merge lost the gains of")
    rows = [ev for ev, _, _ in evaluations(sqlite_db, run_id) if ev.candidate_id == merged.id]
    assert rows and not any(ev.cached for ev in rows)  # it was really evaluated
    assert merged.minibatch_score is not None and merged.val_count == 0
    # the siblings were then validated as the accept rule says (all)
    siblings = _cands(sqlite_db, run_id, "reflection")
    assert all(c.status == "accepted" and c.val_count == 8 for c in siblings)


def test_no_sibling_merge_unless_enabled(sqlite_db, tmp_path):
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 3},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=merging_script)
    assert _cands(sqlite_db, run_id, "sibling_merge") == []


# ---------------------------------------------------------------- budgets


def test_a_step_is_trimmed_so_that_its_children_can_be_validated(sqlite_db, tmp_path):
    # multi-task toy: val = train = 8 examples, so the seed's minibatch results are known (free)
    # and a slot costs its child's 3 minibatch calls; 8 (seed) + 15 leaves room for 2 slots + 8.
    cfg = toy_config(8, search={"parents_per_step": 4, "proposals_per_parent": 1},
                     budget={"max_metric_calls": 8 + 15, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    first = repo.list_steps(sqlite_db, run_id)[0]
    assert len(first.proposal_ids) == 2 and len(first.parent_ids) == 2
    run = repo.get_run(sqlite_db, run_id)
    assert run.metric_calls <= 23 and run.budget_overshoot == 0
    assert any(c.val_count == 8 for c in _cands(sqlite_db, run_id, "reflection"))
    assert_consistent_totals(sqlite_db, run_id)


def test_metric_call_blocks_are_drawn_by_their_thread_and_released_unused():
    b = Budget(BudgetConfig(max_metric_calls=10), metric_calls=0, cost_usd=0.0, seconds_before=0.0)
    block = b.reserve_block(6)
    assert block is not None and b.remaining_metric_calls() == 4
    assert b.reserve_block(5) is None  # not all there
    assert b.reserve_block(5, at_least=4).left == 4  # what is left, if it is enough
    assert b.remaining_metric_calls() == 0 and not b.reserve_metric_call()
    with b.drawing_from(block):
        assert all(b.reserve_metric_call() for _ in range(6))
        assert not b.reserve_metric_call()  # the block is empty and nothing else is left
    assert block.drawn == 6
    for _ in range(6):
        b.settle_metric_call(charged=True)
    assert b.metric_calls == 6 and b.remaining_metric_calls() == 0


def test_an_unused_block_goes_back():
    b = Budget(BudgetConfig(max_metric_calls=10), metric_calls=0, cost_usd=0.0, seconds_before=0.0)
    block = b.reserve_block(8)
    with b.drawing_from(block):
        assert b.reserve_metric_call()
    b.settle_metric_call(charged=True)
    assert b.remaining_metric_calls() == 9


def test_concurrent_lm_calls_reserve_dollars_and_never_overshoot_the_cap():
    """Eight threads keep calling a $0.01 LM under a $0.105 cap: the first call is priced
    alone, then each call reserves the largest price seen; the spend never exceeds the cap."""
    b = Budget(BudgetConfig(max_metric_calls=None, max_cost_usd=0.105), metric_calls=0, cost_usd=0.0, seconds_before=0.0)
    in_flight, peak, lock = [0], [0], threading.Lock()

    def caller():
        while b.may_call_lm():
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            threading.Event().wait(0.01)
            with lock:
                in_flight[0] -= 1
            b.add_cost(0.01)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b.cost_usd <= 0.105 + 1e-12 and b.cost_usd >= 0.09
    assert peak[0] > 1  # once priced, calls did run side by side


def test_cheap_task_lm_calls_do_not_price_the_first_reflections():
    """An evaluator's task-LM calls ($0.0005) come before the first reflection ($0.03). Priced
    by the task calls, eight reflections would all have started at once ($0.265 on a $0.11
    cap); priced per purpose, the first reflection goes alone and the cap holds."""
    b = Budget(BudgetConfig(max_metric_calls=None, max_cost_usd=0.11), metric_calls=0, cost_usd=0.0, seconds_before=0.0)
    for _ in range(50):
        assert b.may_call_lm("task")
        b.add_cost(0.0005)  # the reservation's purpose ("task") is the one priced
    assert b.affordable_lm_calls() is None  # no reflection priced yet

    def reflect():
        while b.may_call_lm("reflection"):
            threading.Event().wait(0.01)
            b.add_cost(0.03)

    threads = [threading.Thread(target=reflect) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0.08 <= b.cost_usd <= 0.11 + 1e-12


def test_a_dollar_cap_holds_for_a_wide_batch(sqlite_db, tmp_path):
    cfg = toy_config(8, search={"parents_per_step": 4, "proposals_per_parent": 2},
                     budget={"max_metric_calls": 10_000, "max_cost_usd": 0.02, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, price=1e-5, latency=0.02)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and "cost budget spent" in run.status_reason
    assert run.cost_usd <= 0.02 * 1.02
    assert_consistent_totals(sqlite_db, run_id)


# ---------------------------------------------------------------- validation by promise


def test_an_early_stopped_validation_pass_is_recorded_with_why(sqlite_db, tmp_path):
    """The seed is perfect everywhere; a human injects a candidate that scores 0: after its first
    results it can neither enter the frontier nor beat the best, so its pass stops early."""
    cfg = toy_config(8, seed_candidate=WORDS, search={"max_score": 1.0},
                     budget={"max_steps": 1, "stop_at_score": None}, executor={"workers": 2})
    install_script(toy.script)
    run_id = submit_run(sqlite_db, cfg)
    send_command(sqlite_db, run_id, "inject", {"content": "nothing useful"}, author="ana")
    run_optimizer(sqlite_db, run_id, tmp_path)
    human = _cands(sqlite_db, run_id, "human")[0]
    assert human.val_count < 8
    assert human.val_cut_short.startswith(f"stopped early after {human.val_count} of 8 examples")
    assert "could not beat the best (1)" in human.val_cut_short
    rows = [ev for ev, _, _ in evaluations(sqlite_db, run_id) if ev.candidate_id == human.id]
    assert len(rows) == human.val_count  # the cancelled evaluations were never run nor charged
    assert_consistent_totals(sqlite_db, run_id)


def test_no_early_stop_without_a_known_maximum(sqlite_db, tmp_path):
    cfg = toy_config(8, seed_candidate=WORDS, budget={"max_steps": 1, "stop_at_score": None})
    install_script(toy.script)
    run_id = submit_run(sqlite_db, cfg)
    send_command(sqlite_db, run_id, "inject", {"content": "nothing useful"}, author="ana")
    run_optimizer(sqlite_db, run_id, tmp_path)
    human = _cands(sqlite_db, run_id, "human")[0]
    assert human.val_count == 8 and human.val_cut_short == ""


def _always_unchanged(messages: list[dict], params: dict) -> str:
    """Answers with the current version unchanged: every proposal asks for its one retry."""
    return "```\n" + toy.current_version(messages[1]["content"]) + "\n```"


def test_the_retry_of_an_unchanged_answer_is_reserved_against_the_dollar_cap(sqlite_db, tmp_path):
    # one call costs about $0.0026 here; a cap of 1.6 calls leaves no room for a retry, which an
    # unreserved retry used to spend anyway (the cap was overshot by up to 9 % in wide batches)
    cfg = toy_config(8, budget={"max_metric_calls": 10_000, "max_cost_usd": 0.0042, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_always_unchanged, price=1e-5)
    run = repo.get_run(sqlite_db, run_id)
    assert run.cost_usd <= 0.0042
    assert len([c for c in lm_calls(sqlite_db, run_id) if c.purpose == "reflection"]) == 1
    reasons = [c.reason for c in repo.list_candidates(sqlite_db, run_id) if c.origin != "seed"]
    assert any("no room in the budget for a retry" in r for r in reasons), reasons


def test_a_thread_affords_what_is_left_of_its_block_and_what_nobody_reserved():
    b = Budget(BudgetConfig(max_metric_calls=10), metric_calls=2, cost_usd=0.0, seconds_before=0.0)
    block = b.reserve_block(5)
    assert b.affords_metric_calls(3) and not b.affords_metric_calls(4)  # another thread: 10 - 2 - 5
    with b.drawing_from(block):
        assert b.affords_metric_calls(8) and not b.affords_metric_calls(9)
        assert b.reserve_metric_call()
        assert b.affords_metric_calls(7) and not b.affords_metric_calls(8)
    assert Budget(BudgetConfig(max_metric_calls=None), 0, 0.0, 0.0).affords_metric_calls(10 ** 6)


def test_an_async_proposal_leaves_room_to_validate_what_is_queued():
    from engine.schedules.asynchronous import room_to_keep

    assert room_to_keep(16, queued=0, inflight=True) == 16  # one validation pass, as before
    assert room_to_keep(16, queued=1, inflight=True) == 32  # and the turn one queued child will take
    assert room_to_keep(16, queued=3, inflight=True) == 32  # three children: one merged pass
    assert room_to_keep(16, queued=4, inflight=True) == 48
    assert room_to_keep(16, queued=4, inflight=False) == 0  # the last proposal takes the tail


def test_each_validation_pass_bumps_the_runs_frontier_version(sqlite_db, tmp_path):
    """The studio reads the frontier (every validation score of the run) again only when this
    counter moves, not at every metric call."""
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(8, budget={"max_steps": 2, "stop_at_score": None}))
    passes = [c for c in repo.list_candidates(sqlite_db, run_id) if c.val_count]
    assert repo.get_run(sqlite_db, run_id).frontier_version == len(passes) >= 2
