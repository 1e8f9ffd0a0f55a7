"""The fault-injection suite (issue 13): a real run whose reflection LM is a misbehaving
OpenAI-compatible server (429, 500, hangs past the timeout, bodies that are not JSON, answers
without a fenced block, 30 % of requests) and whose engine worker is killed with SIGKILL at
random points, several times. The export must show a completed run, nothing paid twice, totals
equal to the rows, no accepted candidate lost, the budget kept and every failure recorded.
The long version is bench/faults_soak.py (figures in docs/benchmarks-faults.md). And a studio
killed with SIGKILL takes its engine worker along, and a new studio starts no second one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.chaos import check_run, run_with_kills
from tests.support.fault_server import FAULTS, FaultServer

pytestmark = pytest.mark.faults


@pytest.fixture
def server():
    srv = FaultServer(rate=0.3, seed=13, hang_seconds=1.6).start()
    yield srv
    srv.stop()


# about a minute on a quiet 2-core machine; several times that when the machine is loaded
@pytest.mark.timeout(600)
def test_a_run_survives_kills_and_lm_faults_with_nothing_lost_or_paid_twice(tmp_path, server):
    chaos = run_with_kills(tmp_path, server, kills=3, seed=13, words=5, budget=150, timeout=540)
    figures = check_run(chaos, server)
    assert figures["kills"] == 3, figures  # the run outlived every kill
    assert all(figures["injected"][f] > 0 for f in FAULTS), figures  # each kind of fault happened
    assert figures["best"] == 1.0, figures
    assert "LM errors slowed it:" in figures["status_reason"]
    print(figures)


def _workers_of(db_url: str) -> list[int]:
    """The pids of live ``python -m engine worker --db DB_URL`` processes. Zombies are dead, and a
    worker's child between fork and exec (it shows its parent's command line) is no worker."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state != "Z" and b"engine" in argv and b"worker" in argv and db_url.encode() in argv:
            found[int(proc.name)] = int(ppid)
    return sorted(pid for pid, parent in found.items() if parent not in found)


def _beat_of(db, pid: int) -> bool:
    from sqlmodel import select

    from storage.models import WorkerBeat

    with db.read() as s:
        return s.exec(select(WorkerBeat).where(WorkerBeat.pid == pid)).first() is not None


class _Watch:
    """Waits for things while counting, at every look, the live workers of one database."""

    def __init__(self, db_url: str) -> None:
        self.db_url, self.most, self.crowds = db_url, 0, []

    def _look(self) -> None:
        pids = _workers_of(self.db_url)
        self.most = max(self.most, len(pids))
        if len(pids) > 1:
            self.crowds.append([(p, Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:300]) for p in pids])

    def until(self, predicate, seconds: float, what: str):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._look()
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"{what} did not happen in {seconds} s")

    def during(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._look()
            time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_killed_studio_takes_its_worker_along_and_the_next_studio_starts_no_second_one(tmp_path):
    """kill -9 of a studio's process group (the worker has a session of its own): the worker ends
    with it. While a worker of the dead studio still lives (here: stopped with SIGSTOP), a new
    studio on the same database starts none beside it; once it ends, the new studio starts its own."""
    from storage.db import Database
    from tests.e2e.conftest import start_studio, stop_studio

    url = f"sqlite:///{tmp_path}/studio.db"
    Database(url).create_all()
    db = Database(url)
    watch = _Watch(url)
    studios = []
    try:
        first, _ = start_studio(tmp_path, url, worker=True)
        studios.append(first)
        [old] = watch.until(lambda: _workers_of(url), 90, "the first studio's worker")
        watch.until(lambda: _beat_of(db, old), 90, "its heartbeat")
        os.kill(old, signal.SIGSTOP)  # alive, but deaf to the studio's death for now
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        second, _ = start_studio(tmp_path, url, worker=True)
        studios.append(second)
        watch.during(6)  # longer than a supervisor waits between looks at the lock
        assert _workers_of(url) == [old]  # no second worker beside the old one
        os.kill(old, signal.SIGCONT)  # the parent-death signal, pending, arrives
        started = time.monotonic()
        watch.until(lambda: old not in _workers_of(url), 30, "the old worker's exit")
        old_left = time.monotonic() - started
        [new] = watch.until(lambda: _workers_of(url), 90, "the second studio's own worker")
        watch.until(lambda: _beat_of(db, new), 90, "its heartbeat")
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
        started = time.monotonic()
        watch.until(lambda: new not in _workers_of(url), 30, "the second worker's exit with its studio")
        print(f"old worker left {old_left:.1f} s after SIGCONT; the second {time.monotonic() - started:.1f} s after "
              f"its studio's kill -9")
        assert watch.most == 1, watch.crowds  # never two workers of studios on one database
    finally:
        for proc in studios:
            stop_studio(proc)
        for pid in _workers_of(url):
            os.kill(pid, signal.SIGKILL)
        db.dispose()
