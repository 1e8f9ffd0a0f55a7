"""Storage for the access rules of ``engine.access``: refusals, the per-person counts behind the
rate limits, and approvals.

Contract: every function is one transaction. ``approve`` records the command and sets the run's
approved candidate together, so a reader never sees one without the other.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

from sqlalchemy import func
from sqlmodel import select

from storage.db import Database, studio_read
from storage.errors import NotFound
from storage.models import Command, Job, Refusal, Run, utcnow
from storage.states import CommandKind, CommandStatus


def record_refusal(db: Database, actor: str, role: str, action: str, run_id: Optional[str], reason: str) -> int:
    with db.write() as s:
        row = Refusal(actor=actor[:200], role=role, action=action, run_id=run_id, reason=reason)
        s.add(row)
        s.flush()
        return row.id


def list_refusals(db: Database, run_id: Optional[str] = None, limit: Optional[int] = None) -> list[Refusal]:
    """Newest first; those of one run when ``run_id`` is given; the newest ``limit`` when given.
    The studio's admin page reads it: with the studio's time limit."""
    with studio_read(db) as s:
        q = select(Refusal).order_by(Refusal.id.desc())
        if run_id is not None:
            q = q.where(Refusal.run_id == run_id)
        if limit is not None:
            q = q.limit(limit)
        return list(s.exec(q).all())


def count_last_hour(db: Database, action: str, actor: str) -> int:
    """How many runs (``create_run``) or evaluator tries (``try_evaluator``) ``actor`` started in
    the last hour: counted from the rows themselves, so every process sees the same number."""
    since = utcnow() - timedelta(hours=1)
    with db.read() as s:
        if action == "create_run":
            q = select(func.count()).select_from(Run).where(Run.owner == actor, Run.created_at >= since)
        elif action == "try_evaluator":
            q = select(func.count()).select_from(Job).where(Job.kind == "try_evaluator", Job.author == actor,
                                                            Job.created_at >= since)
        else:
            raise ValueError(f"no rate limit is kept for {action!r}")
        return int(s.exec(q).one())


def approve(db: Database, run_id: str, candidate_id: Optional[str], author: str, reason: str,
            client_token: Optional[str] = None) -> int:
    """Record an ``approve`` command (applied at once: approving needs no engine) and set the
    run's approved candidate (None withdraws the approval). Returns the command's id."""
    now = utcnow()
    with db.write() as s:
        run = s.get(Run, run_id)
        if run is None:
            raise NotFound(f"run: no run with id {run_id!r}")
        result = f"approved {candidate_id}" if candidate_id else f"approval of {run.approved_candidate_id} withdrawn"
        cmd = Command(run_id=run_id, kind=CommandKind.APPROVE.value, payload={"candidate_id": candidate_id}, author=author,
                      reason=reason, client_token=client_token, status=CommandStatus.APPLIED.value,
                      applied_at=now, result=result)
        run.approved_candidate_id = candidate_id
        s.add(cmd)
        s.add(run)
        s.flush()
        return cmd.id
