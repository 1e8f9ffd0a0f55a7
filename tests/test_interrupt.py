"""A pause, a stop or the time limit cuts the work in flight (engine/interrupt.py): with a
reflection LM that takes 30 s a call, a pause is applied within seconds, what was spent is
recorded, and the run resumes from the next step and finishes. The time budget is kept to
within a watch period."""

from __future__ import annotations

import itertools

import threading
import time

import pytest

from engine.commands import send_command
from engine.runs import submit_run
from storage import repo
from tests.support import toy
from tests.support.harness import assert_consistent_totals, lm_calls, run_optimizer, toy_config
from tests.support.scripted_lm import install_script, uninstall_script

SLOW = 30.0  # seconds per LM call: far longer than any pause may take
PAUSE_TARGET = 5.0  # the product's promise: a pause is applied within 5 s whatever the model


@pytest.fixture(autouse=True)
def _no_script():
    yield
    uninstall_script()


def _in_thread(db, run_id, tmp_path):
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("status", run_optimizer(db, run_id, tmp_path)), daemon=True)
    t.start()
    return t, out


def _wait_for_reflection(db, run_id, timeout=60.0):
    """Until a reflection request is in flight."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.purpose == "reflection" and c.status == "started" for c in lm_calls(db, run_id)):
            return
        time.sleep(0.05)
    raise AssertionError("no reflection call started")


def _pause_and_time(db, run_id, thread, out):
    t0 = time.monotonic()
    send_command(db, run_id, "pause", author="ana", reason="look now")
    thread.join(timeout=30)
    return time.monotonic() - t0


def test_pause_cuts_a_slow_reflection_and_resume_finishes(db, tmp_path):
    _pause_and_resume(db, tmp_path, "sync")


def test_pause_cuts_asynchronous_proposals_and_resume_finishes(sqlite_db, tmp_path):
    _pause_and_resume(sqlite_db, tmp_path, "async")


def _pause_and_resume(db, tmp_path, schedule):
    install_script(toy.script, latency=SLOW)
    run_id = submit_run(db, toy_config(6, search={"schedule": schedule}, budget={"max_steps": 8}))
    thread, out = _in_thread(db, run_id, tmp_path)
    _wait_for_reflection(db, run_id)
    waited = _pause_and_time(db, run_id, thread, out)

    assert out["status"] == "paused" and waited < PAUSE_TARGET, f"pause applied after {waited:.1f} s"
    run = repo.get_run(db, run_id)
    assert (run.status, run.status_reason) == ("paused", "paused by ana")
    cut = [c for c in lm_calls(db, run_id) if c.status == "interrupted"]
    assert cut and all(c.error_kind == "interrupted" and "paused by ana" in c.error for c in cut)
    sent = [c for c in cut if "abandoned" in c.error]  # others were cut before their request went out
    assert sent and all(c.tokens_in > 0 for c in sent)  # what was sent is counted, estimated from the prompt
    assert run.lm_calls_failed == 0  # a pause is not an LM failure
    cands = repo.list_candidates(db, run_id)
    assert not [c for c in cands if c.status == "proposed"], "a proposal was left half done"
    cut_children = [c for c in cands if c.reason.startswith("interrupted (paused by ana)")]
    assert cut_children and all(c.status == "failed" and not c.content for c in cut_children)
    steps = repo.list_steps(db, run_id)
    assert steps and all(s.ended_at is not None for s in steps)  # the step was closed, not left open
    assert_consistent_totals(db, run_id)

    install_script(toy.script, latency=0.0)  # the model is fast again: the run resumes and ends
    send_command(db, run_id, "resume", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    run = repo.get_run(db, run_id)
    assert run.best_val_mean == 1.0 and run.steps_done > len(steps)
    assert not [c for c in repo.list_candidates(db, run_id) if c.status == "proposed"]
    assert_consistent_totals(db, run_id)


def test_stop_cuts_the_step_in_flight(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.script, latency=SLOW)
    run_id = submit_run(db, toy_config(6, budget={"max_steps": 8}))
    thread, out = _in_thread(db, run_id, tmp_path)
    _wait_for_reflection(db, run_id)
    t0 = time.monotonic()
    send_command(db, run_id, "stop", author="bo")
    thread.join(timeout=30)
    assert out["status"] == "stopped" and time.monotonic() - t0 < PAUSE_TARGET
    assert repo.get_run(db, run_id).status_reason == "stopped by bo"
    assert_consistent_totals(db, run_id)


def test_time_budget_cuts_work_in_flight_at_the_limit(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.endless, latency=SLOW)
    limit = 4.0
    run_id = submit_run(db, toy_config(6, budget={"max_seconds": limit, "stop_at_score": None}))
    t0 = time.monotonic()
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    wall = time.monotonic() - t0
    run = repo.get_run(db, run_id)
    assert run.status_reason.startswith("time budget spent")
    # cut within a watch period (0.5 s) and the closing of the step
    assert run.seconds <= limit + 1.5 and wall < limit + 5, (run.seconds, wall)
    assert [c for c in lm_calls(db, run_id) if c.status == "interrupted"]
    assert_consistent_totals(db, run_id)


def test_time_budget_starts_no_step_it_cannot_finish(sqlite_db, tmp_path):
    db = sqlite_db
    # a step takes a little over a second, every time: each answer is new (no repeat, so no retry,
    # which would add a second LM call to one step and make it longer than every step before it)
    fresh = itertools.count()
    install_script(lambda messages, params: f"```\n{toy.current_version(messages[1]['content'])} new{next(fresh)}\n```",
                   latency=1.0)
    limit = 5.0
    run_id = submit_run(db, toy_config(6, budget={"max_seconds": limit, "stop_at_score": None}))
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    run = repo.get_run(db, run_id)
    assert run.steps_done >= 1 and run.proposals_retried == 0
    assert run.status_reason.startswith("time budget: ") and "too few for another step" in run.status_reason
    assert run.seconds <= limit
    assert not [c for c in lm_calls(db, run_id) if c.status == "interrupted"]  # nothing had to be cut


def test_pause_while_the_lm_writes_the_seed(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.script, latency=SLOW)
    run_id = submit_run(db, toy_config(6, seed_candidate="", objective="list the words", budget={"max_steps": 3}))
    thread, out = _in_thread(db, run_id, tmp_path)
    deadline = time.monotonic() + 60
    while not any(c.purpose == "seed" for c in lm_calls(db, run_id)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _pause_and_time(db, run_id, thread, out) < PAUSE_TARGET
    assert out["status"] == "paused"  # not failed: the seed is written when the run resumes
    assert repo.list_candidates(db, run_id) == []
    install_script(toy.script, latency=0.0)
    send_command(db, run_id, "resume", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    assert [c.origin for c in repo.list_candidates(db, run_id)][0] == "seed"
    assert_consistent_totals(db, run_id)
