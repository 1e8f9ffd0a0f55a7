"""Budgets on whole runs: metric calls (never exceeded, for several batch shapes), dollars
(reflection and evaluator-side LM calls, counted exactly), steps, stop-at-score, wall-clock."""

from __future__ import annotations

import pytest

from engine.config import BudgetConfig
from engine.budget import Budget
from tests.support.scripted_lm import uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import assert_consistent_totals, evaluations, lm_calls, run_toy, toy_config


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


@pytest.mark.parametrize("p,k", [(1, 1), (2, 2), (4, 1), (1, 4), (3, 2)])
def test_max_metric_calls_is_never_exceeded(sqlite_db, tmp_path, p, k):
    cap = 41  # not a multiple of anything the step does
    cfg = toy_config(10, search={"parents_per_step": p, "proposals_per_parent": k, "minibatch_size": 3},
                     budget={"max_metric_calls": cap, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and "metric-call budget spent" in run.status_reason
    assert run.metric_calls <= cap
    assert run.budget_overshoot == 0
    assert run.metric_calls >= cap - 2 * 3 * p * k  # it did use the budget, not stop far short of it
    assert_consistent_totals(sqlite_db, run_id)


def test_the_smallest_feasible_budget_runs_one_proposal(sqlite_db, tmp_path):
    cfg = toy_config(6, search={"parents_per_step": 2, "proposals_per_parent": 2, "minibatch_size": 3},
                     budget={"max_metric_calls": 6 + 2 * 3, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    run = repo.get_run(sqlite_db, run_id)
    assert run.metric_calls <= 12 and run.budget_overshoot == 0
    assert run.steps_done >= 1
    tested = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection" and c.minibatch_score is not None]
    assert tested, "the minimum budget must pay for at least one proposal's minibatch test"
    assert_consistent_totals(sqlite_db, run_id)


def test_cached_evaluations_cost_no_metric_call(sqlite_db, tmp_path):
    """A human injects a copy of the seed: its evaluations are copies, marked cached, free."""
    from engine.commands import send_command

    def inject_once(ctx):
        if ctx.step_index == 1:
            send_command(ctx.db, ctx.run_id, "inject", {"content": "start"}, author="ana")

    cfg = toy_config(4, budget={"max_steps": 2, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, on_step=inject_once)
    human = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "human"]
    assert len(human) == 1
    rows = [ev for ev, _, _ in evaluations(sqlite_db, run_id) if ev.candidate_id == human[0].id]
    assert len(rows) == 4 and all(ev.cached for ev in rows)
    assert_consistent_totals(sqlite_db, run_id)


def _price_run(sqlite_db, tmp_path, max_cost, p=2, k=2):
    cfg = toy_config(8, search={"parents_per_step": p, "proposals_per_parent": k},
                     budget={"max_metric_calls": 1000, "max_cost_usd": max_cost, "stop_at_score": None})
    return run_toy(sqlite_db, tmp_path, cfg, price=1e-4)


@pytest.mark.parametrize("p,k", [(1, 1), (2, 2)])
def test_max_cost_usd_stops_the_run_and_dollars_are_counted_exactly(sqlite_db, tmp_path, p, k):
    run_id, stats = _price_run(sqlite_db, tmp_path, 0.25, p, k)
    run = repo.get_run(sqlite_db, run_id)
    calls = lm_calls(sqlite_db, run_id)
    assert run.status == "completed" and "cost budget spent" in run.status_reason
    assert len(calls) >= 3
    # exact: the scripted provider charges 1e-4 per token, in and out
    assert run.cost_usd == pytest.approx(sum(c.cost_usd for c in calls), abs=1e-12)
    assert run.cost_usd == pytest.approx(1e-4 * (run.tokens_in + run.tokens_out), rel=1e-9)
    for c in calls:
        assert c.cost_usd == pytest.approx(1e-4 * (c.tokens_in + c.tokens_out), rel=1e-9)
    # stays under the cap, give or take the growth of one call over the largest one before it
    largest = max(c.cost_usd for c in calls)
    assert run.cost_usd <= 0.25 + 0.1 * largest, (run.cost_usd, largest)
    assert_consistent_totals(sqlite_db, run_id)


TASK_EVALUATOR = '''
from refract_evaluator import lm

def evaluate(candidate, example):
    verdict = lm("Does the list " + candidate + " contain " + example["word"] + "?")
    return float(example["word"] in candidate.split()), {"judge": verdict}
'''


def _judge_or_reflect(messages, params):
    if messages[0]["role"] == "user" and messages[0]["content"].startswith("Does the list"):
        return "yes it does"
    return toy.script(messages, params)


def test_evaluator_side_lm_calls_are_recorded_and_charged(sqlite_db, tmp_path):
    cfg = toy_config(4, evaluator=TASK_EVALUATOR, task_lm={"model": "scripted/judge", "num_retries": 0},
                     search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_judge_or_reflect, price=1e-4)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed", run.status_reason
    calls = lm_calls(sqlite_db, run_id)
    task = [c for c in calls if c.purpose == "task"]
    rows = [ev for ev, _, _ in evaluations(sqlite_db, run_id) if not ev.cached]
    assert len(task) == len(rows)  # one judge call per paid evaluation
    assert all(c.model == "scripted/judge" and c.example_key for c in task)
    assert all(ev.side_info["judge"] == "yes it does" for ev in rows)
    # every dollar is in the run's total; each evaluation carries the cost of its own judge call
    assert run.cost_usd == pytest.approx(sum(c.cost_usd for c in calls), abs=1e-12)
    assert sum(ev.cost_usd for ev in rows) == pytest.approx(sum(c.cost_usd for c in task), abs=1e-12)
    assert all(ev.cost_usd > 0 for ev in rows)
    assert_consistent_totals(sqlite_db, run_id)


def test_max_steps(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(8, budget={"max_steps": 3, "stop_at_score": None}))
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.status_reason == "step budget spent (3 of 3)"
    assert run.steps_done == 3 and len(repo.list_steps(sqlite_db, run_id)) == 3


def test_stop_at_score_stops_at_the_first_step_boundary_after_reaching_it(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(8, budget={"stop_at_score": 0.5}))
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.status_reason.startswith("reached stop_at_score 0.5")
    assert run.best_val_mean >= 0.5
    reached = min(c.step for c in repo.list_candidates(sqlite_db, run_id, ["accepted"])
                  if c.val_mean is not None and c.val_mean >= 0.5 and c.val_count == 8)
    assert run.steps_done == reached + 1


def test_max_seconds(sqlite_db, tmp_path):
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_seconds": 1.0, "stop_at_score": None, "max_metric_calls": 1000})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, latency=0.3)
    run = repo.get_run(sqlite_db, run_id)
    # spent, or too little left for another step of the length measured so far (nothing starts
    # that the time left cannot finish)
    assert run.status == "completed" and run.status_reason.startswith("time budget"), run.status_reason
    assert run.seconds < 6.0
    assert 1 <= run.steps_done <= 4  # a 0.3 s LM call per step: a second holds about three


class TestBudgetObject:
    """engine.budget.Budget on its own: reservations and settling."""

    def test_reservations_never_exceed_the_cap(self):
        b = Budget(BudgetConfig(max_metric_calls=5), metric_calls=3, cost_usd=0.0, seconds_before=0.0)
        assert b.reserve_metric_call() and b.reserve_metric_call()
        assert not b.reserve_metric_call()  # 3 charged + 2 reserved = 5
        b.settle_metric_call(charged=False)  # one turned out cached
        assert b.reserve_metric_call()
        b.settle_metric_call(charged=True)
        b.settle_metric_call(charged=True)
        assert b.metric_calls == 5 and not b.reserve_metric_call()

    def test_exhausted_reasons(self):
        b = Budget(BudgetConfig(max_metric_calls=100, max_steps=2, stop_at_score=0.9), 10, 0.0, 0.0)
        assert b.exhausted(best=0.5, steps_done=1, min_step_calls=6) is None
        assert b.exhausted(best=0.95, steps_done=1, min_step_calls=6).startswith("reached stop_at_score 0.9")
        assert b.exhausted(best=0.5, steps_done=2, min_step_calls=6) == "step budget spent (2 of 2)"
        assert b.exhausted(best=0.5, steps_done=0, min_step_calls=91).startswith("metric-call budget spent")

    def test_time_counts_earlier_sessions(self):
        b = Budget(BudgetConfig(max_seconds=10), 0, 0.0, seconds_before=10.5)
        assert b.exhausted(None, 0, 1).startswith("time budget spent")
        assert not b.reserve_metric_call()

    def test_no_unit_starts_unless_the_recent_mean_and_a_margin_fit(self):
        b = Budget(BudgetConfig(max_seconds=10), 0, 0.0, seconds_before=8.5)
        assert b.time_too_short() is None  # nothing measured yet
        b.note_duration(1.2)
        b.note_duration(1.4)
        # 8.5 s + 1.3 s (the mean) fits in 10 s, but a step a little slower than the mean would not
        why = b.exhausted(None, 1, 1)
        assert why.startswith("time budget: 1 s of 10 s left, too few for another step") and "1.3 s" in why
        b.update_limits(BudgetConfig(max_seconds=11))  # 8.5 s + 1.3 s × 1.2 fits in 11 s
        assert b.exhausted(None, 1, 1) is None

    def test_raising_the_cap_on_a_live_budget(self):
        b = Budget(BudgetConfig(max_metric_calls=1), 1, 0.0, 0.0)
        assert not b.reserve_metric_call()
        b.update_limits(BudgetConfig(max_metric_calls=2))
        assert b.reserve_metric_call()


def test_the_time_left_pays_a_share_of_a_step_and_a_step_is_shrunk_to_it():
    from engine.schedules.synchronous import time_slots

    b = Budget(BudgetConfig(max_seconds=100), 0, 0.0, seconds_before=70.0)
    b.note_duration(40.0)
    b.note_duration(60.0)  # 30 s left, a step takes 50 s on average, 60 s with the margin: half a step
    assert abs(b.time_share_left() - 0.5) < 0.01
    assert b.time_too_short() is not None  # a whole step does not fit
    assert b.time_too_short(min_share=0.25) is None  # one slot of a 2x2 step does
    assert "not even one proposal" in b.time_too_short(min_share=0.75)
    assert time_slots(0.5, 4) == 2 and time_slots(None, 4) == 4 and time_slots(0.1, 4) == 1 and time_slots(1.3, 4) == 4


def test_a_run_on_a_one_at_a_time_lm_uses_its_last_seconds_for_a_smaller_step(sqlite_db, tmp_path):
    # max_concurrency = 1: the scripted LM then answers the step's four reflections one after
    # another, as the local model does; the run stops only when not even one proposal fits
    cfg = toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 2},
                     budget={"max_seconds": 4.0, "stop_at_score": None, "max_metric_calls": 1000},
                     reflection_lm={"max_concurrency": 1})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, latency=0.3)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status_reason.startswith("time budget"), run.status_reason
    assert "spent" in run.status_reason or "not even one proposal" in run.status_reason, run.status_reason
    sizes = [len(s.proposal_ids) for s in repo.list_steps(sqlite_db, run_id)]
    assert sizes[0] == 4 and (len(sizes) == 1 or min(sizes) <= 4), sizes
    assert run.seconds <= 4.5


def test_on_the_free_local_model_a_step_starts_when_half_of_one_fits():
    """A step cut at the time limit costs the local model nothing; time left unused is lost."""
    from engine.config import parse_config
    from engine.optimizer import min_time_share

    base = {"name": "x", "seed_candidate": "s", "evaluator": "def evaluate(c):\n    return 1.0\n"}
    assert min_time_share(parse_config(base)) == 0.5 / 3  # the local model: 1x3, half of one proposal's share
    two = parse_config({**base, "search": {"parents_per_step": 2, "proposals_per_parent": 2}})
    assert min_time_share(two) == 0.125  # half of one proposal's share of a 2x2 step
    hosted = parse_config({**base, "reflection_lm": {"model": "openai/gpt-4.1-mini"}})
    assert min_time_share(hosted) == 1.0  # a paid LM: a whole step must fit
    serial = parse_config({**base, "reflection_lm": {"model": "openai/gpt-4.1-mini", "max_concurrency": 1}})
    assert serial.search.batch_size == 1 and min_time_share(serial) == 1.0  # 1x1 by default, paid: a whole step
