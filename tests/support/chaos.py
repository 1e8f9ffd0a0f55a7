"""A real run under faults: a misbehaving LM server and an engine worker killed with SIGKILL.

``run_with_kills`` submits the toy task with its reflection LM pointed at a ``FaultServer``,
then starts ``python -m engine worker`` processes and kills each with SIGKILL at a random point
after it has made progress, ``kills`` times, then lets a last worker finish the run.
``check_run`` reads the run's export and asserts what must survive any of that: the run
completed, no (candidate, example) pair charged twice, totals equal to the rows, no accepted
candidate lost, the budget kept, every LM request and every injected fault visible in the
rows. Both return plain figures, for the test and for the soak benchmark (bench/faults_soak.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func
from sqlmodel import select

from engine.records.export import export_run
from engine.runs import submit_run
from storage import repo
from storage.db import Database
from storage.models import Evaluation, LMCall
from tests.support.fault_server import FAULTS, FaultServer
from tests.support.harness import PYTHON, ROOT, subprocess_env, toy_config


@dataclass
class ChaosRun:
    db: Database
    run_id: str
    max_metric_calls: int
    kills: int = 0
    kill_delays: list[float] = field(default_factory=list)
    startup_seconds: list[float] = field(default_factory=list)  # worker start to its first new fact
    accepted_at_kills: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0


def chaos_config(server: FaultServer, words: int, budget: int, parents: int = 2, proposals: int = 2):
    return toy_config(words, search={"parents_per_step": parents, "proposals_per_parent": proposals},
                      budget={"max_metric_calls": budget, "stop_at_score": 1.0},
                      reflection_lm={"model": "openai/gpt-4.1-mini", "api_base": server.api_base,
                                     "timeout_seconds": 1.0, "num_retries": 5, "max_concurrency": 8})


def _facts(db: Database, run_id: str) -> int:
    with db.read() as s:
        calls = s.exec(select(func.count()).select_from(LMCall).where(LMCall.run_id == run_id)).one()
        evals = s.exec(select(func.count()).select_from(Evaluation).where(Evaluation.run_id == run_id)).one()
    return calls + evals


def _worker(url: str, env: dict, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "engine", "worker", "--db", url, "--lease", "2", "--poll", "0.2", *extra],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.kill(proc.pid, signal.SIGKILL)  # the worker itself, as a crash would
    except ProcessLookupError:
        pass
    try:  # and anything it left in its group: before the wait, while the unreaped worker still holds its pid
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=20)


def _finished(db: Database, run_id: str) -> bool:
    return repo.get_run(db, run_id).status in ("completed", "failed", "stopped")


def run_with_kills(tmp_path: Path, server: FaultServer, kills: int, seed: int = 0, words: int = 8,
                   budget: int = 300, max_delay: float = 1.5, timeout: float = 300) -> ChaosRun:
    """Run the toy task to its end through ``kills`` SIGKILLs of its worker (fewer if the run
    ends first). Each kill lands a random 0–``max_delay`` s after the worker's first new fact."""
    url = f"sqlite:///{tmp_path / 'chaos.db'}"
    db = Database(url)
    db.create_all()
    cfg = chaos_config(server, words, budget)
    chaos = ChaosRun(db=db, run_id=submit_run(db, cfg), max_metric_calls=budget)
    env = subprocess_env(tmp_path)
    rng, started = random.Random(seed), time.monotonic()
    deadline = started + timeout
    while chaos.kills < kills and not _finished(db, chaos.run_id):
        before, proc, t0 = _facts(db, chaos.run_id), _worker(url, env), time.monotonic()
        try:
            while _facts(db, chaos.run_id) == before and time.monotonic() < deadline and not _finished(db, chaos.run_id):
                time.sleep(0.05)
            chaos.startup_seconds.append(time.monotonic() - t0)
            delay = rng.uniform(0, max_delay)
            time.sleep(delay)
        finally:
            _kill(proc)
        if time.monotonic() >= deadline:
            raise AssertionError(f"the run made no progress within {timeout} s")
        chaos.kills += 1
        chaos.kill_delays.append(delay)
        chaos.accepted_at_kills.update({c.id: c.content for c in repo.list_candidates(db, chaos.run_id, ["accepted"])})
    _finish(db, chaos.run_id, url, env, deadline)
    chaos.seconds = time.monotonic() - started
    return chaos


def _finish(db: Database, run_id: str, url: str, env: dict, deadline: float) -> None:
    """A last worker (``--once``) after the dead one's lease has expired: it runs the run to its end."""
    while not _finished(db, run_id):
        run = repo.get_run(db, run_id)
        expires = run.lease_expires_at
        if expires is not None:
            time.sleep(max(0.0, (expires.replace(tzinfo=None) - _utcnow_naive()).total_seconds()) + 0.2)
        proc = _worker(url, env, "--once")
        try:
            proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError("the last worker did not finish the run in time") from None
        finally:
            _kill(proc)


def _utcnow_naive():
    from storage.models import utcnow

    return utcnow().replace(tzinfo=None)


def check_run(chaos: ChaosRun, server: FaultServer) -> dict:
    """Assert what must hold after the kills and faults; return the figures."""
    doc = export_run(chaos.db, chaos.run_id)
    run, totals = doc["run"], doc["run"]["totals"]
    assert run["status"] == "completed", (run["status"], run["status_reason"])
    evals = [e for e in doc["evaluations"]]
    split = {e["id"]: e["split"] for e in doc["examples"]}
    pairs = Counter((e["candidate_id"], e["example_id"]) for e in evals)
    assert max(pairs.values()) == 1, "a (candidate, example) pair was recorded twice"
    content = {c["id"]: repr(sorted(c["content"].items())) for c in doc["candidates"]}
    paid = Counter((content[e["candidate_id"]], e["example_id"]) for e in evals
                   if not e["cached"] and split[e["example_id"]] != "test")
    assert max(paid.values()) == 1, "the same content was paid twice on one example"
    assert totals["metric_calls"] == sum(paid.values()) <= chaos.max_metric_calls
    assert totals["budget_overshoot"] == 0
    calls = doc["lm_calls"]
    assert abs(totals["cost_usd"] - sum(c["cost_usd"] for c in calls)) < 1e-9
    assert totals["tokens_in"] == sum(c["tokens_in"] for c in calls)
    assert totals["tokens_out"] == sum(c["tokens_out"] for c in calls)
    by_status = Counter(c["status"] for c in calls)
    assert by_status["started"] == 0, "a call is still marked in flight"
    kinds = Counter(c["error_kind"] for c in calls if c["error_kind"] and not c["cached"])
    assert totals["lm_calls"] == {"total": len(calls), "failed": by_status["failed"],  # unusable answers included
                                  "interrupted": by_status["interrupted"]}
    now = {c["id"]: c for c in doc["candidates"]}
    for cid, cand_content in chaos.accepted_at_kills.items():
        assert cid in now and now[cid]["status"] == "accepted" and now[cid]["content"] == cand_content, cid
    served = server.snapshot()
    sent = [c for c in calls if not c["cached"]]
    # every request the server saw has its row (written before sending); a row without a
    # request can only be one a kill cut off between the row and the request
    assert by_status["interrupted"] >= len(sent) - sum(served.values()) >= 0, (len(sent), served)
    injected = sum(served[f] for f in FAULTS)
    for fault in FAULTS:  # each injected fault is a row of its kind, unless a kill cut it off
        assert served[fault] - by_status["interrupted"] <= kinds[fault] <= served[fault], (fault, kinds, served)
    return {"kills": chaos.kills, "seconds": round(chaos.seconds, 1),
            "worker_start_seconds": [round(s, 1) for s in chaos.startup_seconds], "requests": sum(served.values()),
            "injected": {f: served[f] for f in FAULTS}, "injected_total": injected,
            "recorded": {f: kinds[f] for f in FAULTS}, "interrupted": by_status["interrupted"],
            "lm_rows": len(calls), "metric_calls": totals["metric_calls"], "budget": chaos.max_metric_calls,
            "cost_usd": totals["cost_usd"], "accepted": sum(1 for c in doc["candidates"] if c["status"] == "accepted"),
            "best": doc["best"]["val_mean"], "status_reason": run["status_reason"]}
