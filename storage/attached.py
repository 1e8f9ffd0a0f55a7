"""Runs attached to a Python process: started with ``engine.api.optimize.optimize_anything``.

Such a run's evaluator is a function in the process that started it, so only that process
can run it. ``Run.attached_to`` marks it (``claim_run`` never gives it to an engine worker) and
the process holds the run's lease like a worker does, renewing it with ``storage.leases.renew_lease``
and giving it up with ``storage.leases.release_run``. When the lease lapses (the notebook was closed,
the script ended or was interrupted) the run waits for ``optimize_anything(..., resume=ID)``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Optional

from sqlalchemy import update

from storage.db import Database
from storage.models import Run, utcnow
from storage.repo import create_run
from storage.states import ACTIVE

WAITING = ACTIVE  # not finished


def create_attached_run(db: Database, name: str, owner: str, config: dict, examples: Iterable[tuple[str, str, Any]],
                        process_id: str, lease_seconds: float) -> str:
    """Insert a running run, leased to ``process_id`` and attached to it, with its examples
    ((key, split, payload) triples), in one transaction. Returns the run id."""
    return create_run(db, name, owner, config, examples, held_by=(process_id, lease_seconds), attached_to=process_id)


def attach_run(db: Database, run_id: str, process_id: str, lease_seconds: float) -> bool:
    """Take the lease of an attached run whose lease is free (its process is gone), for
    ``process_id``. Atomic; False when the run is not attached or another process holds it."""
    now = utcnow()
    free = (Run.lease_expires_at == None) | (Run.lease_expires_at < now)  # noqa: E711
    with db.write() as s:
        res = s.exec(update(Run).where(Run.id == run_id, Run.attached_to != None, free)  # noqa: E711
                     .values(attached_to=process_id, lease_owner=process_id, heartbeat_at=now,
                             lease_expires_at=now + timedelta(seconds=lease_seconds)))
        return res.rowcount == 1


def waiting_note(run: dict, now: Optional[datetime] = None) -> Optional[str]:
    """What to tell a person looking at a run whose Python process is gone (None otherwise):
    such a run makes no progress, and commands sent to it wait, until it is resumed from Python.
    ``run`` is a run row as a dict (``commands_pending`` counted, as ``run_overview`` gives it)."""
    if not run.get("attached_to"):
        return None
    if run.get("status") not in WAITING and not run.get("commands_pending"):  # finished, and nothing asked of it
        return None
    expires = run.get("lease_expires_at")
    now = now or datetime.now(timezone.utc)
    if expires is not None and (expires if expires.tzinfo else expires.replace(tzinfo=timezone.utc)) > now:
        return None
    return (f"Waiting for its Python process: this run was started from Python and its evaluator lives in that "
            f"process, which is gone. Commands stay pending until it is resumed there with "
            f"`optimize_anything(..., evaluator=…, resume=\"{run['id']}\")`.")
