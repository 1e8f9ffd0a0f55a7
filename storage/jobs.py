"""Jobs: short work the studio hands to the engine instead of running it in a page.

The studio inserts a ``Job`` (``submit_job``) and polls it (``job_view``); an engine worker
claims it (``claim_job``), reports progress and partial results (``update_job``) and records
the outcome (``finish_job``). Contract:
- Every function is one transaction. ``claim_job`` is atomic: two workers never run the same
  job (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``FOR UPDATE SKIP LOCKED``).
- Not idempotent: a second ``finish_job`` overwrites the outcome (workers call it once).
- Not guaranteed: a worker killed while it runs a job leaves it ``running``; the studio shows
  how long it has been running and whether a worker is alive, and a new click submits a new job.
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import update
from sqlmodel import select

from storage.db import Database, studio_read
from storage.models import Job, utcnow
from storage.queries import utc
from storage.states import JobStatus

ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)


def submit_job(db: Database, kind: str, payload: dict, author: str = "") -> str:
    """Queue a job; returns its id."""
    with db.write() as s:
        job = Job(kind=kind, payload=payload, author=author)
        s.add(job)
        s.flush()
        return job.id


def claim_job(db: Database, worker_id: str, kinds: tuple[str, ...]) -> Optional[Job]:
    """The oldest pending job of one of ``kinds``, now ``running`` and ours; None when none waits."""
    with db.write() as s:
        q = select(Job).where(Job.status == JobStatus.PENDING.value, Job.kind.in_(kinds)).order_by(Job.created_at)
        job = s.exec(q.with_for_update(skip_locked=True)).first()
        if job is None:
            return None
        job.status, job.worker_id, job.started_at = JobStatus.RUNNING.value, worker_id, utcnow()
        s.add(job)
        return job


def update_job(db: Database, job_id: str, progress: str, result: Optional[dict] = None) -> None:
    """Record progress text (and a partial result) of a running job."""
    values: dict = {"progress": progress}
    if result is not None:
        values["result"] = result
    with db.write() as s:
        s.exec(update(Job).where(Job.id == job_id).values(**values))


def finish_job(db: Database, job_id: str, result: Optional[dict], error: Optional[str] = None) -> None:
    """The outcome: ``done`` with its result, or ``failed`` with ``error`` (``result`` None keeps
    the partial result recorded so far)."""
    values: dict = {"status": (JobStatus.FAILED if error else JobStatus.DONE).value, "error": error, "finished_at": utcnow()}
    if result is not None:
        values["result"] = result
    with db.write() as s:
        s.exec(update(Job).where(Job.id == job_id).values(**values))


def job_view(db: Database, job_id: str) -> Optional[dict]:
    """The job as a plain dict for the studio (its read time limit applies); None if unknown."""
    with studio_read(db) as s:
        job = s.get(Job, job_id)
    if job is None:
        return None
    out = job.model_dump()
    for key in ("created_at", "started_at", "finished_at"):
        out[key] = utc(out[key])
    return out
