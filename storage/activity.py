"""A run's activity feed: its commands, comments and refusals together, newest first; and the
engine workers' heartbeats, for health checks.

One read transaction (three statements); rows are plain dicts {when, who, what, candidate,
detail, status}. ``what`` is the command kind, ``comment``/``feedback``, or ``refused: ACTION``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlmodel import select

from storage.db import Database, studio_read
from storage.models import Command, Comment, Refusal, WorkerBeat


def _utc(ts):
    return ts.replace(tzinfo=timezone.utc) if ts is not None and ts.tzinfo is None else ts


def run_activity(db: Database, run_id: str, person: Optional[str] = None, limit: int = 500) -> list[dict]:
    """The newest ``limit`` events of the run, of one ``person`` when given."""
    with studio_read(db) as s:
        commands = s.exec(select(Command).where(Command.run_id == run_id)).all()
        comments = s.exec(select(Comment).where(Comment.run_id == run_id)).all()
        refusals = s.exec(select(Refusal).where(Refusal.run_id == run_id)).all()
    rows = [{"when": _utc(c.created_at), "who": c.author, "what": c.kind,
             "candidate": (c.payload or {}).get("candidate_id"), "detail": c.reason, "status": c.status}
            for c in commands]
    rows += [{"when": _utc(c.created_at), "who": c.author, "what": c.kind, "candidate": c.candidate_id,
              "detail": c.text, "status": ""} for c in comments]
    rows += [{"when": _utc(r.created_at), "who": r.actor, "what": f"refused: {r.action}", "candidate": None,
              "detail": r.reason, "status": "refused"} for r in refusals]
    if person is not None:
        rows = [r for r in rows if r["who"] == person]
    rows.sort(key=lambda r: r["when"], reverse=True)
    return rows[:limit]


def worker_beats(db: Database) -> list[dict]:
    """Every engine worker that ever beat on this database, most recent first:
    {id, pid, host, age_s, current_run_id, stopped} (``age_s``: seconds since its last heartbeat;
    ``stopped``: it exited cleanly)."""
    with studio_read(db) as s:
        beats = s.exec(select(WorkerBeat).order_by(WorkerBeat.heartbeat_at.desc())).all()
    now = datetime.now(timezone.utc)
    return [{"id": b.id, "pid": b.pid, "host": b.host, "current_run_id": b.current_run_id,
             "age_s": (now - _utc(b.heartbeat_at)).total_seconds(), "stopped": b.stopped_at is not None} for b in beats]
