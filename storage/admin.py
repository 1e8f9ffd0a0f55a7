"""Storage for admins' actions (engine/admin.py): deleting a run with every row that belongs to
it, role grants, and the record of both (table ``adminaction``, which outlives its subjects).

Contract: every function is one writer transaction, and the action and its record are written
together: a reader sees a run deleted and its record, or neither. ``delete_run`` checks, under the
writer lock (``BEGIN IMMEDIATE`` on SQLite, the run row locked ``FOR UPDATE`` on PostgreSQL), that
no worker holds or may claim the run, so a worker never finds its run vanishing under it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import delete
from sqlmodel import SQLModel, select

from storage.db import Database
from storage.errors import Conflict, NotFound
from storage.models import AdminAction, Command, Refusal, RoleGrant, Run, utcnow
from storage.states import FINISHED, CommandStatus

# tables that record who did what: they keep their rows about a deleted run (the access log)
KEPT = {Refusal.__tablename__, AdminAction.__tablename__}


def run_tables() -> list:
    """Every table with a ``run_id`` column except ``KEPT``, children before parents (the order
    their rows can be deleted in with foreign keys on). A table added later is included by itself."""
    return [t for t in reversed(SQLModel.metadata.sorted_tables) if "run_id" in t.columns and t.name not in KEPT]


def delete_run(db: Database, run_id: str, actor: str, reason: str) -> dict[str, int]:
    """Delete the run and every row of ``run_tables()`` that belongs to it, and record who did
    it. Returns the number of rows deleted per table. ``NotFound`` for an unknown run;
    ``Conflict`` (with what to do) for a run that is not finished, is held by a worker, or has a
    pending resume."""
    now = utcnow()
    with db.write() as s:
        run = s.exec(select(Run).where(Run.id == run_id).with_for_update()).first()
        if run is None:
            raise NotFound(f"no run with id {run_id!r}; `python -m engine status` lists runs")
        if run.status not in FINISHED:
            raise Conflict(f"run: {run_id} is {run.status}; stop it first (Stop on its dashboard, or "
                           f"`python -m engine stop {run_id}`), then delete it")
        if run.lease_owner and run.lease_expires_at and _aware(run.lease_expires_at) > now:
            raise Conflict(f"run: {run_id} is still held by worker {run.lease_owner}, which is finishing it; "
                           "try again in a few seconds")
        pending = s.exec(select(Command.id).where(Command.run_id == run_id, Command.kind.in_(("resume", "step")),
                                                  Command.status == CommandStatus.PENDING.value)).first()
        if pending is not None:
            raise Conflict(f"run: {run_id} has a pending resume (command {pending}): a worker is about to continue "
                           "it; stop it first, then delete it")
        detail = f"{run.name!r} by {run.owner or 'nobody'}, {run.status}, {run.metric_calls} metric calls, ${run.cost_usd:.4f}"
        counts = {}
        for table in run_tables():
            counts[table.name] = s.exec(delete(table).where(table.c.run_id == run_id)).rowcount
        s.exec(delete(Run).where(Run.id == run_id))
        s.add(AdminAction(actor=actor[:200], action="delete_run", subject=run_id, detail=detail, reason=reason))
        return counts


def _aware(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts


def list_grants(db: Database) -> list[RoleGrant]:
    """Every grant, by rule."""
    with db.read() as s:
        return list(s.exec(select(RoleGrant).order_by(RoleGrant.rule)).all())


def set_grant(db: Database, rule: str, role: str, actor: str, reason: str) -> Optional[str]:
    """Give ``rule`` the role ``role`` (replacing its grant, if any) and record it; returns the
    role it had before (None: no grant)."""
    with db.write() as s:
        grant = s.exec(select(RoleGrant).where(RoleGrant.rule == rule)).first()
        before = grant.role if grant else None
        if grant is None:
            grant = RoleGrant(rule=rule, role=role, granted_by=actor[:200])
        else:
            grant.role, grant.granted_by, grant.created_at = role, actor[:200], utcnow()
        s.add(grant)
        change = f"{before} → {role}" if before else role
        s.add(AdminAction(actor=actor[:200], action="grant", subject=rule, detail=change, reason=reason))
        return before


def remove_grant(db: Database, rule: str, actor: str, reason: str) -> str:
    """Remove the grant of ``rule`` and record it; returns the role it gave. ``NotFound`` when no
    grant names it (a rule of the secrets file is not a grant)."""
    with db.write() as s:
        grant = s.exec(select(RoleGrant).where(RoleGrant.rule == rule)).first()
        if grant is None:
            raise NotFound(f"rule: no grant for {rule!r} (rules of the secrets file are changed in the file)")
        s.delete(grant)
        s.add(AdminAction(actor=actor[:200], action="revoke", subject=rule, detail=f"was {grant.role}", reason=reason))
        return grant.role


def list_admin_actions(db: Database, limit: int = 200) -> list[AdminAction]:
    """The newest ``limit`` admin actions, newest first."""
    with db.read() as s:
        return list(s.exec(select(AdminAction).order_by(AdminAction.id.desc()).limit(limit)).all())
