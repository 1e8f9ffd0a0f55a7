"""Several runs at once in one worker process (engine/worker/__init__.py), their evaluations shared
fairly (engine/fair_share.py), and the runs list saying why a run waits."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pandas as pd

from engine.executor import EvalOutcome, EvalTask
from engine.fair_share import FairShare
from engine.runs import submit_run
from engine.worker import Worker
from storage import leases, queries, repo
from tests.support import toy
from tests.support.harness import PYTHON, ROOT, assert_consistent_totals, lm_client, subprocess_env, toy_config
from tests.support.scripted_lm import install_script, uninstall_script
from ui.analysis import waiting_reasons


class _Pool:
    """A pool of ``workers`` threads that records when each task starts (the order the share
    handed them over)."""

    def __init__(self, name: str, workers: int, started: list, seconds: float = 0.05) -> None:
        self.name, self._pool, self.started, self.seconds = name, ThreadPoolExecutor(workers), started, seconds
        self.workers = workers

    def submit(self, task: EvalTask) -> Future:
        def run() -> EvalOutcome:
            self.started.append(self.name)
            time.sleep(self.seconds)
            return EvalOutcome(score=1.0)
        return self._pool.submit(run)


def test_the_share_alternates_between_runs_with_work_waiting():
    share, started = FairShare(capacity=2), []
    big, small = _Pool("big", 2, started), _Pool("small", 2, started)
    share.register("big", 2)
    share.register("small", 2)
    futures = [share.submit("big", big, EvalTask(candidate="x")) for _ in range(12)]
    time.sleep(0.02)  # the big run's batch is queued first …
    futures += [share.submit("small", small, EvalTask(candidate="y")) for _ in range(3)]
    assert all(f.result(timeout=10).score == 1.0 for f in futures)
    # … yet the small run's three evaluations start within its fair turns, not after all 12
    last_small = max(i for i, name in enumerate(started) if name == "small")
    assert last_small <= 2 + 2 * 3, started


def test_a_run_alone_hands_its_evaluations_to_its_pool_at_once():
    """Alone, a run's evaluations reach its pool in the call that submits them, up to twice its
    pool (each worker's next task waits beside it in the pool), not a turn of the dispatcher
    thread later; a second run then waits only for those."""
    handed: list[int] = []

    class Recording(_Pool):
        def submit(self, task: EvalTask) -> Future:
            handed.append(1)
            return super().submit(task)

    share, started = FairShare(capacity=2), []
    pool = Recording("alone", 2, started, seconds=0.2)
    share.register("alone", 2)
    futures = [share.submit("alone", pool, EvalTask(candidate="x")) for _ in range(6)]
    assert len(handed) == 4  # before any of them ended
    assert all(f.result(timeout=10).score == 1.0 for f in futures)
    assert len(handed) == 6


def test_a_cancelled_task_never_reaches_the_pool():
    share, started = FairShare(capacity=1), []
    pool = _Pool("a", 1, started, seconds=0.3)
    share.register("a", 1)
    first = share.submit("a", pool, EvalTask(candidate="x"))
    second = share.submit("a", pool, EvalTask(candidate="x"))
    time.sleep(0.05)
    assert second.cancel()
    assert first.result(timeout=5).score == 1.0
    time.sleep(0.1)
    assert started == ["a"]


def test_one_worker_runs_two_runs_at_once_and_the_third_waits_with_a_reason(sqlite_db, tmp_path):
    db = sqlite_db
    install_script(toy.script, latency=0.2)
    try:
        runs = [submit_run(db, toy_config(6, name=f"run {i}", budget={"max_steps": 2, "stop_at_score": None}))
                for i in range(3)]
        worker = Worker(db, lm=lm_client(tmp_path), lease_seconds=30, poll_seconds=0.1, max_runs=2)
        stop = threading.Event()
        thread = threading.Thread(target=worker.run_forever, args=(stop,), kwargs={"once": True}, daemon=True)
        thread.start()
        seen_running, note = set(), ""
        deadline = time.monotonic() + 120
        while thread.is_alive() and time.monotonic() < deadline:
            statuses = {r: repo.get_run(db, r).status for r in runs}
            if list(statuses.values()).count("running") == 2 and statuses[runs[2]] == "queued":
                seen_running.add(tuple(sorted(r for r, s in statuses.items() if s == "running")))
                worker.beat()
                table = pd.DataFrame([{"id": r, "status": statuses[r], "created_at": repo.get_run(db, r).created_at}
                                      for r in runs])
                seen = waiting_reasons(table, queries.worker_status(db), 60).get(runs[2], note)
                # a run that ended between the statuses and the heartbeat leaves the two disagreeing
                # (the worker forgets a run only after its status is written): keep a consistent view
                if {r: repo.get_run(db, r).status for r in runs} == statuses:
                    note = seen
            time.sleep(0.05)
        thread.join(timeout=5)
        assert not thread.is_alive()
        assert (tuple(sorted(runs[:2])),) == tuple(seen_running)  # the two oldest ran side by side
        assert note.startswith("waiting for a worker, 1 in the queue: the engine worker is busy with runs ")
        assert "2 at a time" in note
        for r in runs:
            assert repo.get_run(db, r).status == "completed"
            assert_consistent_totals(db, r)
    finally:
        uninstall_script()


def test_a_worker_that_exits_cleanly_is_shown_stopped_not_silent(sqlite_db, tmp_path):
    from ui.analysis import worker_state

    db = sqlite_db
    install_script(toy.script)
    try:
        run_id = submit_run(db, toy_config(6, budget={"max_steps": 1, "stop_at_score": None}))
        worker = Worker(db, lm=lm_client(tmp_path), lease_seconds=30, poll_seconds=0.1)
        worker.run_forever(threading.Event(), once=True)
    finally:
        uninstall_script()
    assert repo.get_run(db, run_id).status == "completed"
    beat = queries.worker_status(db)
    assert beat["id"] == worker.id and beat["stopped_at"] is not None and beat["run_ids"] == []
    assert worker_state(beat, 30) == "stopped"  # at once, not after 30 s of silence
    health = subprocess.run([PYTHON, "-m", "engine", "health", "--db", db.url], cwd=ROOT, capture_output=True,
                            text=True, env=subprocess_env(tmp_path))
    assert health.returncode == 1 and "s ago, stopped" in health.stdout, health.stdout + health.stderr
    table = pd.DataFrame([{"id": "queued-run", "status": "queued", "created_at": pd.Timestamp.now(tz="UTC")}])
    assert waiting_reasons(table, beat, 30)["queued-run"].endswith("the engine worker stopped: start one with "
                                                                   "`make run` or `python -m engine worker`")
    # another worker that beats is what the studio shows, though the stopped one beat later
    other = Worker(db, lm=lm_client(tmp_path), lease_seconds=30)
    other.beat()
    worker.beat()  # its last beat before it stopped, newer than the other's
    leases.worker_stopped(db, worker.id)
    assert queries.worker_status(db)["id"] == other.id and worker_state(queries.worker_status(db), 30) == "alive"
    worker.beat()  # a stopped worker that beats again runs again
    assert queries.worker_status(db)["stopped_at"] is None


def test_the_worker_state_of_a_heartbeat():
    from ui.analysis import worker_state

    assert worker_state(None, 30) == "none"
    assert worker_state({"age_s": 5, "stopped_at": None}, 30) == "alive"
    assert worker_state({"age_s": 45, "stopped_at": None}, 30) == "silent"
    assert worker_state({"age_s": 5, "stopped_at": pd.Timestamp.now(tz="UTC")}, 30) == "stopped"
