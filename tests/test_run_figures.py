"""A run's figures with one definition each (storage/run_figures.py), and the engine writing
them the moment they change: the running time (paused time left out, the held-out test pass
in), the proposal rates (never above 100 %, a proposal without an answer never counted as
unparsed) and the best candidate (written as soon as its validation pass ends, not when the
step ends)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from engine.commands import send_command
from engine.optimizer import Optimizer
from engine.runs import submit_run
from storage import leases, queries, repo
from storage.run_figures import proposal_counts, running_seconds
from tests.support import toy
from tests.support.harness import lm_client, run_optimizer, toy_config
from tests.support.scripted_lm import install_script

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


# ---------------------------------------------------------------- running time


def test_running_time_counts_only_while_the_run_runs():
    run = {"status": "running", "seconds": 10.0, "test_seconds": 0.0, "seconds_at": T0}
    assert running_seconds(run, now=T0 + timedelta(seconds=5)) == pytest.approx(15.0)
    # paused, queued or finished: what the engine wrote, however long ago
    for status in ("paused", "queued", "completed"):
        assert running_seconds({**run, "status": status}, now=T0 + timedelta(hours=3)) == 10.0
    # the held-out test passes are running time, but not the search's (what max_seconds counts)
    done = {"status": "completed", "seconds": 10.0, "test_seconds": 4.0, "seconds_at": None}
    assert running_seconds(done) == 14.0 and running_seconds(done, search_only=True) == 10.0
    # a worker that died works on it no more: counted until its lease lapsed, not on and on
    dead = {**run, "lease_expires_at": T0 + timedelta(seconds=15)}
    assert running_seconds(dead, now=T0 + timedelta(minutes=10)) == pytest.approx(25.0)
    # SQLite's naive datetimes are UTC
    naive = {**run, "seconds_at": T0.replace(tzinfo=None)}
    assert running_seconds(naive, now=T0 + timedelta(seconds=1)) == pytest.approx(11.0)


def test_a_paused_run_does_not_count_its_pause_and_its_test_pass_counts(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.script, latency=0.05)
    cfg = toy_config(6, testset=toy.dataset(6)[:3], budget={"max_metric_calls": 200, "stop_at_score": None},
                     search={"parents_per_step": 1, "proposals_per_parent": 1})
    run_id = submit_run(db, cfg)

    def pause_once(ctx):
        if ctx.step_index == 1:
            send_command(db, run_id, "pause", author="ana")

    t0 = time.monotonic()
    assert run_optimizer(db, run_id, tmp_path, on_step=pause_once) == "paused"
    paused = repo.get_run(db, run_id)
    assert paused.seconds_at is None and paused.seconds > 0
    time.sleep(1.5)  # paused: not running time
    assert running_seconds(repo.get_run(db, run_id)) == paused.seconds
    send_command(db, run_id, "resume", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    wall = time.monotonic() - t0
    run = repo.get_run(db, run_id)
    assert run.test_seconds > 0 and run.test_mean is not None
    assert running_seconds(run) == pytest.approx(run.seconds + run.test_seconds)
    assert running_seconds(run) < wall - 1.4  # the pause is left out
    # the figure every view reads
    assert queries.runs_table(db).set_index("id").at[run_id, "elapsed_s"] == pytest.approx(running_seconds(run))


# ---------------------------------------------------------------- proposal rates


def test_rates_are_over_answered_proposals_and_never_above_one():
    # 10 proposals: 6 answered (one of them retrying, its retry in flight), 2 waiting, 2 whose LM failed
    run = {"proposals_total": 10, "proposals_answered": 6, "proposals_parsed": 6, "proposals_valid": 5,
           "proposals_improved": 3, "proposals_retried": 1}
    c = proposal_counts(run, reflecting=3)  # 2 first answers and 1 retry in flight
    assert c.answered == 6 and c.waiting + c.unanswered == 4
    assert c.rate(c.parsed) == 1.0 and c.percent(c.improved) == "50%"
    # no answer yet: no rate at all (not "0 % parsed")
    none = proposal_counts({"proposals_total": 4}, reflecting=0)
    assert none.answered == 0 and none.rate(none.parsed) is None and none.unanswered == 4
    # a run recorded before answers were counted: its answered proposals are those not waiting
    old = proposal_counts({"proposals_total": 16, "proposals_parsed": 15, "proposals_valid": 15,
                           "proposals_improved": 12}, reflecting=1)
    assert old.answered == 15 and old.rate(old.parsed) == 1.0


def test_a_retry_in_flight_keeps_every_rate_at_most_100_percent(sqlite_db, tmp_path):
    """An unchanged first answer makes the proposal ask again; while that retry is in flight
    the run's rates, as the dashboard and `engine status` compute them, stay within 100 %."""
    db = sqlite_db
    seen = []

    def unchanged_first(messages, params):
        prompt = messages[1]["content"]
        if len(messages) <= 2:  # the first answer: the current version, unchanged (retried)
            return "```\n" + toy.current_version(prompt) + "\n```"
        run_id = repo.list_runs(db)[0].id
        ov = queries.run_overview(db, run_id)
        # the run's own counters, unclamped: every rate's numerator within its denominator
        seen.append((ov["proposals_answered"], ov["proposals_parsed"], ov["proposals_valid"], ov["proposals_improved"]))
        return toy.script([messages[0], {"role": "user", "content": prompt}], params)

    install_script(unchanged_first)
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 60}))
    run_optimizer(db, run_id, tmp_path)
    assert seen and all(answered >= parsed >= valid >= improved for answered, parsed, valid, improved in seen)
    assert any(answered > 0 for answered, *_ in seen)
    run = repo.get_run(db, run_id)
    assert run.proposals_answered == run.proposals_total >= run.proposals_parsed > 0


# ---------------------------------------------------------------- the best, at once


class _Watching:
    """An executor that notes, as each validation evaluation is dispatched, which candidate
    the run row names as its best at that moment."""

    def __init__(self, inner, db, run_id, seen):
        self.inner, self.db, self.run_id, self.seen = inner, db, run_id, seen

    def submit(self, task):
        if task.kind == "validation":
            self.seen.append((task.candidate_id, repo.get_run(self.db, self.run_id).best_candidate_id))
        return self.inner.submit(task)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_the_best_is_written_when_its_validation_pass_ends_not_when_the_step_ends(sqlite_db, tmp_path):
    from engine.sandbox import make_executor

    db = sqlite_db
    install_script(toy.script)
    # one parent, two proposals: both children add a missing word and are validated one after the other
    # (max_score known: a pass may stop early against the frontier the one before updated, so the
    # passes are not run side by side)
    run_id = submit_run(db, toy_config(6, search={"parents_per_step": 1, "proposals_per_parent": 2, "max_score": 1.0},
                                       budget={"max_metric_calls": 40, "stop_at_score": None}))
    seen: list = []
    factory = lambda *a: _Watching(make_executor(*a), db, run_id, seen)  # noqa: E731
    assert leases.claim_run(db, "w", 60, run_id=run_id) == run_id
    Optimizer(db, run_id, lm=lm_client(tmp_path), executor_factory=factory).run()
    seed = next(c.id for c in repo.list_candidates(db, run_id) if c.origin == "seed")
    step0 = [c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.step == 0 and c.origin != "seed"]
    assert len(step0) == 2  # both validated in the first step
    first, second = sorted(step0, key=lambda c: min(i for i, (cid, _) in enumerate(seen) if cid == c.id))
    # while the second child's pass ran (in the same step), the first one was already the run's best
    during_second = {best for cid, best in seen if cid == second.id}
    assert during_second == {first.id} != {seed}


def test_a_veto_applied_while_paused_moves_the_best_at_once(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.script)
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 60, "stop_at_score": None}))
    stop = threading.Event()

    def pause(ctx):
        if not stop.is_set():
            stop.set()
            send_command(db, run_id, "pause", author="ana")

    run_optimizer(db, run_id, tmp_path, on_step=pause)
    best = repo.get_run(db, run_id).best_candidate_id
    send_command(db, run_id, "veto", {"candidate_id": best}, author="ana")
    run_optimizer(db, run_id, tmp_path)  # applies the veto; the run stays paused
    run = repo.get_run(db, run_id)
    assert run.status == "paused" and run.best_candidate_id != best
