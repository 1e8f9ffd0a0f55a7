"""Leases and worker heartbeats: which engine process runs which run.

Contract: each function is one transaction. ``claim_run`` is atomic (two workers never claim
the same run: ``BEGIN IMMEDIATE`` on SQLite, ``FOR UPDATE SKIP LOCKED`` on PostgreSQL);
``renew_lease`` and ``release_run`` act only while the caller owns the lease, so a worker that
lost its run cannot touch it. A dead worker is found by its lease expiring, and its run is then
claimable again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

from sqlalchemy import exists, or_, update
from sqlmodel import select

from storage.db import Database
from storage.models import Command, Run, WorkerBeat, utcnow
from storage.states import FINISHED, CommandStatus, RunStatus
from storage.transitions import move_run



def claim_run(db: Database, worker_id: str, lease_seconds: float, run_id: str | None = None) -> Optional[str]:
    """Claim a run that needs a worker: a queued one, a running one whose lease expired (its
    worker died), a paused one with pending commands (a resume or step may be among them), or
    a finished one with a pending resume (continued with a new budget). Never a run started
    from Python (``attached_to`` set): only its own process can evaluate it.
    Returns the run id or None. Atomic: two workers never claim the same run."""
    now = utcnow()
    free = (Run.lease_expires_at == None) | (Run.lease_expires_at < now)  # noqa: E711
    pending = CommandStatus.PENDING.value
    has_commands = exists().where(Command.run_id == Run.id, Command.status == pending)
    resumed = exists().where(Command.run_id == Run.id, Command.status == pending, Command.kind.in_(("resume", "step")))
    with db.write() as s:
        # a run started from Python (attached_to) is run only by that Python process
        q = select(Run).where(Run.attached_to == None,  # noqa: E711
                              or_(Run.status == RunStatus.QUEUED.value,
                                  (Run.status == RunStatus.RUNNING.value) & free,
                                  (Run.status == RunStatus.PAUSED.value) & free & has_commands,
                                  Run.status.in_([x.value for x in FINISHED]) & free & resumed))
        if run_id:
            q = q.where(Run.id == run_id)
        # FOR UPDATE SKIP LOCKED: on PostgreSQL two workers never take the same row (SQLite
        # ignores it; there BEGIN IMMEDIATE already serialises the claim)
        run = s.exec(q.order_by(Run.created_at).with_for_update(skip_locked=True)).first()
        if run is None:
            return None
        run.lease_owner = worker_id
        run.lease_expires_at = now + timedelta(seconds=lease_seconds)
        run.heartbeat_at = now
        s.add(run)
        if run.status == RunStatus.QUEUED:
            s.flush()
            move_run(s, run.id, RunStatus.RUNNING, run.status_reason or "", started_at=run.started_at or now)
        return run.id


def renew_lease(db: Database, run_id: str, worker_id: str, lease_seconds: float) -> bool:
    """Extend our lease; False when another worker owns the run now (we must stop)."""
    now = utcnow()
    with db.write() as s:
        res = s.exec(
            update(Run)
            .where(Run.id == run_id, Run.lease_owner == worker_id)
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds), heartbeat_at=now)
        )
        return res.rowcount == 1


def release_run(db: Database, run_id: str, worker_id: str) -> None:
    with db.write() as s:
        s.exec(update(Run).where(Run.id == run_id, Run.lease_owner == worker_id)
               .values(lease_owner=None, lease_expires_at=None))


def worker_heartbeat(db: Database, worker_id: str, pid: int, host: str, current_run_id: str | None,
                     run_ids: Optional[list[str]] = None, max_runs: int = 1) -> None:
    """Record that a worker is alive, the runs it runs now and how many it may run at once."""
    with db.write() as s:
        beat = s.get(WorkerBeat, worker_id) or WorkerBeat(id=worker_id, pid=pid, host=host)
        beat.heartbeat_at = utcnow()
        beat.current_run_id = current_run_id
        beat.run_ids = list(run_ids if run_ids is not None else [current_run_id] if current_run_id else [])
        beat.max_runs = max_runs
        beat.stopped_at = None
        s.add(beat)


def worker_stopped(db: Database, worker_id: str) -> None:
    """Record that a worker exited cleanly (its runs released): the studio then says it stopped,
    not that it went silent, which is what a crashed or hung worker does."""
    with db.write() as s:
        beat = s.get(WorkerBeat, worker_id)
        if beat is not None:
            beat.stopped_at, beat.current_run_id, beat.run_ids = utcnow(), None, []
            s.add(beat)


def latest_worker_beat(db: Database) -> Optional[WorkerBeat]:
    with db.read() as s:
        return s.exec(select(WorkerBeat).order_by(WorkerBeat.heartbeat_at.desc())).first()
