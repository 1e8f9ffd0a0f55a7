"""The warm stock of sandbox processes a long-lived worker keeps between runs
(engine/sandbox/warm.py): runs take processes from it, and nothing one run's evaluator leaves
in its processes reaches the next run."""

from __future__ import annotations

import threading
import time

import pytest

from engine.config import parse_config
from engine.runs import submit_run
from engine.sandbox.warm import WarmStock
from engine.sandbox.worker_process import SandboxSpec, WorkerProcess, spawn_key
from engine.worker import Worker
from storage import repo
from tests.support.harness import lm_client

# At load, the evaluator looks for what an earlier evaluator in the same process would have
# left (a builtin, a module, an environment variable, a file in its /tmp), then leaves all four.
LEAVES_MARKS = '''
import builtins, os, sys, tempfile, uuid
TOKEN = uuid.uuid4().hex
MARK = os.path.join(tempfile.gettempdir(), "refract-mark")
FOUND = [name for name, there in (("builtin", hasattr(builtins, "refract_mark")),
                                  ("module", "refract_mark" in sys.modules),
                                  ("environment", "REFRACT_MARK" in os.environ),
                                  ("file", os.path.exists(MARK))) if there]
builtins.refract_mark = TOKEN
sys.modules["refract_mark"] = sys
os.environ["REFRACT_MARK"] = TOKEN
with open(MARK, "w") as f:
    f.write(TOKEN)

def evaluate(candidate, example):
    return 1.0, {"process": TOKEN, "found": FOUND}
'''


def _wait(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _run(db, name: str) -> list[dict]:
    """Submit a run whose seed is its whole search (it scores stop_at_score); its evaluations'
    side information once it has ended."""
    cfg = parse_config({"name": name, "seed_candidate": "x", "evaluator": LEAVES_MARKS,
                        "dataset": [{"id": f"e{i}"} for i in range(8)],
                        "budget": {"max_metric_calls": 100, "stop_at_score": 1.0},
                        "reflection_lm": {"model": "scripted/toy"}, "executor": {"workers": 4}})
    run_id = submit_run(db, cfg)
    _wait(lambda: repo.get_run(db, run_id).status not in ("queued", "running"))
    assert repo.get_run(db, run_id).status == "completed", repo.get_run(db, run_id).status_reason
    return [e.side_info for e in repo.evaluations_for(db, run_id)]


def test_runs_take_warm_processes_and_leave_nothing_to_the_next_run(sqlite_db, tmp_path):
    # SQLite only: the stock holds sandbox processes, nothing of the database (a suite-time saving)
    db = sqlite_db
    worker = Worker(db, lm=lm_client(tmp_path), poll_seconds=0.05, max_runs=1)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run_forever, args=(stop,), daemon=True)
    thread.start()
    try:
        _wait(lambda: worker.stock is not None and worker.stock.ready() == 4)
        first = _run(db, "first")
        _wait(lambda: worker.stock.ready() == 4)  # refilled after the first run took its four
        second = _run(db, "second")
        assert worker.stock.taken == 8  # every pool process of both runs came warm from the stock
    finally:
        stop.set()
        thread.join(timeout=60)
    assert len(first) == len(second) == 8
    assert all(side["found"] == [] for side in first + second)  # no mark of an earlier evaluator
    assert not {s["process"] for s in first} & {s["process"] for s in second}  # no process served both
    assert worker.stock.ready() == 0  # the worker killed its stock when it stopped


def test_the_stock_follows_the_spec_runs_ask_for():
    stock = WarmStock(SandboxSpec(), size=1)
    try:
        _wait(lambda: stock.ready() == 1)
        networked = SandboxSpec(network=True)
        assert stock.take(networked) is None  # stocked for another spec: switches, starts anew
        _wait(lambda: stock.ready() == 1)
        spawned = stock.take(networked)
        assert spawned is not None and spawned.key == spawn_key(networked)
        proc = WorkerProcess(networked, "def evaluate(candidate):\n    return 1.0\n", spawned)
        proc.close()
    finally:
        stock.close()
    assert stock.ready() == 0


def test_a_reaped_process_is_never_signalled_by_its_old_pid():
    """A stock process that died and was reaped (alive() polls) frees its pid; once the pid
    numbers wrap, another session can have it. Discarding the old process must not kill that
    one: here the other session is a real process standing in at the old pid."""
    import os
    import signal
    import subprocess

    from engine.sandbox.worker_process import SpawnedProcess

    proc = SpawnedProcess(SandboxSpec())
    proc.proc.kill()
    proc.proc.wait()
    assert not proc.alive()  # dead and reaped: its pid is free
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        proc.proc.pid = other.pid  # what a wrapped pid counter hands out
        proc.discard()
        with pytest.raises(subprocess.TimeoutExpired):  # still running: discard sent nothing to its group
            other.wait(timeout=1)
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()
