"""Durability: a real ``kill -9`` of an engine worker in the middle of a step, then a second
worker process finishes the run from the database (issue 2 §7).

Both workers are ``python -m engine worker`` subprocesses on one SQLite file; the reflection LM
is the toy's scripted one, loaded from REFRACT_SCRIPTED_LM, with 0.3 s of latency so that the
kill lands while proposals are in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest

from engine.runs import submit_run
from storage import leases, repo
from storage.db import Database
from storage.models import utcnow
from tests.support.harness import PYTHON, ROOT, assert_consistent_totals, evaluations, subprocess_env, toy_config


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def _worker(url, env, *extra):
    return subprocess.Popen([PYTHON, "-m", "engine", "worker", "--db", url, "--lease", "2", "--poll", "0.2", *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _mid_step(db, run_id, moment):
    """The index of a step (not the first) that has started and not ended, and is at
    ``moment``: "reflecting" (parents chosen, LM calls in flight, no proposal written yet) or
    "evaluating" (at least one proposal written, so its tests are running); else None."""
    for step in repo.list_steps(db, run_id):
        if step.index >= 1 and step.ended_at is None and step.parent_ids:
            made = [c for c in repo.list_candidates(db, run_id) if c.origin == "reflection" and c.step == step.index]
            if (moment == "evaluating") == bool(made):
                return step.index
    return None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("moment", ["reflecting", "evaluating"])
def test_kill_9_mid_step_and_a_second_worker_finishes_the_run(tmp_path, moment):
    url = f"sqlite:///{tmp_path / 'refract.db'}"
    db = Database(url)
    db.create_all()
    cfg = toy_config(6, search={"parents_per_step": 2, "proposals_per_parent": 2},
                     budget={"max_metric_calls": 400, "stop_at_score": 1.0})
    run_id = submit_run(db, cfg)
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LATENCY="0.3", REFRACT_SCRIPTED_PRICE="0.00001")

    first = _worker(url, env)
    try:
        killed_in = _wait(lambda: _mid_step(db, run_id, moment), 90, f"the first worker to be {moment} in step 1+")
        os.kill(first.pid, signal.SIGKILL)  # the worker itself, as a crash would; its sandboxes die with it
        first.wait(timeout=10)
    finally:
        _kill_group(first)
    assert first.returncode == -signal.SIGKILL

    at_kill = repo.get_run(db, run_id)
    accepted_at_kill = {c.id: c.content for c in repo.list_candidates(db, run_id, ["accepted"])}
    evals_at_kill = {(ev.candidate_id, ev.example_pk): (ev.id, ev.score) for ev, _, _ in evaluations(db, run_id)}
    assert at_kill.status == "running" and at_kill.lease_owner is not None
    assert [s.ended_at is None for s in repo.list_steps(db, run_id)].count(True) == 1
    assert at_kill.metric_calls > 0 and len(accepted_at_kill) > 1
    made_at_kill = [c for c in repo.list_candidates(db, run_id) if c.origin == "reflection" and c.step == killed_in]
    assert (moment == "evaluating") == bool(made_at_kill)

    # the dead worker's lease runs out (2 s), then any worker may take the run over
    _wait(lambda: repo.get_run(db, run_id).lease_expires_at.replace(tzinfo=None) < utcnow().replace(tzinfo=None),
          10, "the dead worker's lease to expire")
    second = _worker(url, env, "--once")
    try:
        out, _ = second.communicate(timeout=120)
    finally:
        _kill_group(second)
    assert second.returncode == 0, out

    run = repo.get_run(db, run_id)
    assert run.status == "completed", (run.status, run.status_reason, out)
    assert run.best_val_mean == 1.0
    assert run.lease_owner is None

    # no accepted candidate lost: still there, still accepted, same content
    now = {c.id: c for c in repo.list_candidates(db, run_id)}
    for cid, content in accepted_at_kill.items():
        assert cid in now and now[cid].status == "accepted" and now[cid].content == content

    # no evaluation paid twice: rows from before the kill kept as they were, none recorded again
    evs = evaluations(db, run_id)
    rows = {(ev.candidate_id, ev.example_pk): (ev.id, ev.score) for ev, _, _ in evs}
    for pair, row in evals_at_kill.items():
        assert rows[pair] == row
    paid = Counter((ev.content_hash, ev.example_pk) for ev, _, split in evs if not ev.cached and split != "test")
    assert max(paid.values()) == 1, [k for k, n in paid.items() if n > 1]

    # the interrupted step was finished (redone from its rows), and the steps are 0..n-1 exactly once
    steps = repo.list_steps(db, run_id)
    assert [s.index for s in steps] == list(range(len(steps)))
    assert all(s.ended_at is not None for s in steps)
    assert steps[killed_in].proposal_ids and len(steps[killed_in].proposal_ids) == 4
    assert run.steps_done == len(steps) > killed_in

    # totals agree with the rows: metric calls, dollars and tokens of both workers' LM calls
    assert_consistent_totals(db, run_id)
    assert run.cost_usd > at_kill.cost_usd > 0
    db.dispose()


# ---------------------------------------------------------------- leases, in process


def _start(db, tmp_path, run_id, worker_id, lease):
    import threading

    from engine.worker import Worker
    from tests.support.harness import lm_client

    worker = Worker(db, lease_seconds=lease, lm=lm_client(tmp_path), worker_id=worker_id)
    assert leases.claim_run(db, worker_id, lease, run_id=run_id) == run_id
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(status=worker.run_claimed(run_id)), daemon=True)
    thread.start()
    return thread, result


def test_heartbeats_keep_the_lease_so_no_other_worker_can_claim_a_live_run(sqlite_db, tmp_path):
    from tests.support.scripted_lm import install_script, uninstall_script
    from tests.support import toy

    # a 2 s lease renewed every 2/3 s: short enough that the run outlives it twice over, long enough
    # that a heartbeat held up for a second by a busy machine (tests run two at a time) does not lose it
    install_script(toy.script, latency=0.5)
    try:
        run_id = submit_run(sqlite_db, toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                                                  budget={"max_steps": 10, "stop_at_score": None}))
        thread, result = _start(sqlite_db, tmp_path, run_id, "w1", lease=2.0)
        attempts = 0
        t0 = time.monotonic()
        while thread.is_alive():
            assert leases.claim_run(sqlite_db, "intruder", 5, run_id=run_id) is None
            attempts += 1
            time.sleep(0.1)
        thread.join()
        assert time.monotonic() - t0 > 2 * 2.0  # the run outlived its lease (ten 0.5 s LM calls)
        assert attempts > 30
        assert result["status"] == "completed"
        run = repo.get_run(sqlite_db, run_id)
        assert run.steps_done == 10 and run.lease_owner is None  # released at the end
    finally:
        uninstall_script()


def test_a_worker_that_loses_its_lease_stops_touching_the_run(sqlite_db, tmp_path):
    from datetime import timedelta

    from tests.support.scripted_lm import install_script, uninstall_script
    from tests.support import toy

    install_script(toy.script, latency=0.3)
    try:
        run_id = submit_run(sqlite_db, toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                                                  budget={"max_steps": 30, "stop_at_score": None}))
        thread, result = _start(sqlite_db, tmp_path, run_id, "w1", lease=0.9)
        _wait(lambda: repo.get_run(sqlite_db, run_id).steps_done >= 1, 60, "the first step")
        # another worker took the run over (w1 was believed dead)
        repo.set_run_fields(sqlite_db, run_id, lease_owner="w2", lease_expires_at=utcnow() + timedelta(seconds=60))
        at_theft = repo.get_run(sqlite_db, run_id).steps_done
        thread.join(30)
        assert not thread.is_alive() and result["status"] == "lost"
        run = repo.get_run(sqlite_db, run_id)
        assert run.lease_owner == "w2"  # w1 did not release (or overwrite) the new owner's lease
        assert run.status == "running" and run.finished_at is None  # and did not finish the run
        assert run.steps_done <= at_theft + 2  # at most the step in flight when it noticed
    finally:
        uninstall_script()


@pytest.mark.timeout(120)
def test_sigterm_stops_the_worker_at_a_step_boundary_and_frees_the_run_at_once(tmp_path):
    """`make run` stopping the studio sends SIGTERM to its engine: the worker must leave the run
    at the next step boundary and release its lease, so that the next worker resumes it at
    once instead of finishing a long run first (or leaving it locked until the lease expires)."""
    url = f"sqlite:///{tmp_path / 'refract.db'}"
    db = Database(url)
    db.create_all()
    run_id = submit_run(db, toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                                       budget={"max_steps": 200, "max_metric_calls": 5000, "stop_at_score": None}))
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LATENCY="0.3", REFRACT_SCRIPTED_LM="tests.support.toy:endless")
    proc = subprocess.Popen([PYTHON, "-m", "engine", "worker", "--db", url, "--lease", "6", "--poll", "0.2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        _wait(lambda: repo.get_run(db, run_id).steps_done >= 1, 90, "the first step")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker was still running {time.monotonic() - t0:.0f} s after SIGTERM "
                        f"(steps done: {repo.get_run(db, run_id).steps_done} of 200)")
    finally:
        _kill_group(proc)
    assert proc.returncode == 0
    run = repo.get_run(db, run_id)
    assert run.status == "running", (run.status, run.status_reason, proc.stdout.read())
    assert run.steps_done < 200
    assert run.lease_owner is None  # released: the next worker need not wait for it to expire
    assert leases.claim_run(db, "next", 5, run_id=run_id) == run_id
    assert [s.ended_at is not None for s in repo.list_steps(db, run_id)].count(False) <= 1
    db.dispose()


@pytest.mark.timeout(120)
def test_sigterm_cuts_a_step_that_would_outlast_the_grace_and_records_its_lm_call(tmp_path):
    """A reflection that takes a minute (a local model) is not waited for: after LEAVE_GRACE the
    worker cuts it as a pause would, records the call as interrupted (not left to the crash
    recovery), exits long before a supervisor's SIGKILL and frees the run; the next worker
    finishes it."""
    from engine.worker import LEAVE_GRACE
    from tests.support import toy
    from tests.support.harness import run_optimizer
    from tests.support.scripted_lm import install_script, uninstall_script

    url = f"sqlite:///{tmp_path / 'refract.db'}"
    db = Database(url)
    db.create_all()
    run_id = submit_run(db, toy_config(6, search={"parents_per_step": 1, "proposals_per_parent": 1},
                                       budget={"max_steps": 2, "stop_at_score": None}))
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LATENCY="60")
    proc = subprocess.Popen([PYTHON, "-m", "engine", "worker", "--db", url, "--lease", "6", "--poll", "0.2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        _wait(lambda: [c for c in repo.lm_calls_for(db, run_id) if c.status == "started"], 60, "a reflection in flight")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        left_after = time.monotonic() - t0
    finally:
        _kill_group(proc)
    assert proc.returncode == 0
    assert left_after < LEAVE_GRACE + 5, left_after  # the supervisor kills after 10 s
    calls = repo.lm_calls_for(db, run_id)
    assert [c.status for c in calls] == ["interrupted"], [(c.status, c.error) for c in calls]
    assert "the engine worker is stopping" in calls[0].error
    run = repo.get_run(db, run_id)
    assert run.status == "running" and run.lease_owner is None
    install_script(toy.script)
    try:
        assert run_optimizer(db, run_id, tmp_path) == "completed"
    finally:
        uninstall_script()
    assert repo.get_run(db, run_id).steps_done == 2
    assert_consistent_totals(db, run_id)
    db.dispose()
