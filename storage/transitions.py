"""Status changes of runs and candidates: the only functions that change a ``status`` column.

Contract: each move is checked against its table in ``storage.states`` (``RUN_TRANSITIONS``,
``CANDIDATE_TRANSITIONS``); a move the table does not list raises ``InvalidTransition`` and
writes nothing. Staying in the same status is allowed (a command or a step re-applied after a
crash). ``transition_run`` and ``set_candidate_status`` are one transaction each; ``move_run``
is the same check inside a transaction the caller already holds (a worker's claim, a queued
run's cancel), so those writes stay atomic with the rest of their transaction.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import update
from sqlmodel import Session

from storage.db import Database
from storage.errors import InvalidTransition, NotFound
from storage.models import Candidate, Run
from storage.states import CANDIDATE_TRANSITIONS, RUN_TRANSITIONS, CandidateStatus, RunStatus


def move_run(s: Session, run_id: str, to: RunStatus, reason: str, **fields: Any) -> RunStatus:
    """In the caller's transaction ``s``: move run ``run_id`` to ``to`` with ``reason`` and
    ``fields``, if ``RUN_TRANSITIONS`` allows it. Returns the status the run came from."""
    to = RunStatus(to)
    run = s.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run with id {run_id!r}")
    before = RunStatus(run.status)
    if to != before and to not in RUN_TRANSITIONS[before]:
        raise InvalidTransition(f"run {run_id} cannot go from {before} to {to} ({reason or 'no reason given'})")
    s.exec(update(Run).where(Run.id == run_id).values(status=to.value, status_reason=reason, **fields))
    return before


def transition_run(db: Database, run_id: str, to: RunStatus, reason: str, **fields: Any) -> RunStatus:
    """Move a run to status ``to`` with ``reason`` (and set ``fields`` in the same transaction).
    Staying in the same status is allowed (a command re-applied after a crash); a move that
    ``storage.states.RUN_TRANSITIONS`` does not list raises ``InvalidTransition``, so a stopped
    run never "completes" behind a human's back. Returns the status the run came from."""
    with db.write() as s:
        return move_run(s, run_id, to, reason, **fields)


def set_candidate_status(db: Database, candidate_id: str, to: CandidateStatus, reason: Optional[str],
                         *, row: Optional[Candidate] = None, **fields: Any) -> Candidate:
    """Move candidate ``candidate_id`` to status ``to`` (``reason`` None keeps its reason) and set
    ``fields``, in one transaction; returns the row as stored. With ``row`` (the engine's
    working copy: text, scores and lineage written since it was last saved) that copy is saved
    in the same transaction, and inserted when it is new: a new row may start in any status (a
    seed starts accepted, a proposal whose LM call failed before it was saved starts failed).
    A move ``CANDIDATE_TRANSITIONS`` does not list raises ``InvalidTransition`` (nothing
    written), so an accepted candidate never turns back into a proposal."""
    to = CandidateStatus(to)
    with db.write() as s:
        stored = s.get(Candidate, candidate_id)
        if stored is None and row is None:
            raise NotFound(f"no candidate with id {candidate_id!r}")
        if stored is not None:
            before = CandidateStatus(stored.status)
            if to != before and to not in CANDIDATE_TRANSITIONS[before]:
                raise InvalidTransition(f"candidate {candidate_id} cannot go from {before} to {to} "
                                        f"({reason or stored.reason or 'no reason given'})")
        target = s.merge(row) if row is not None else stored
        target.status = to.value
        if reason is not None:
            target.reason = reason
        for name, value in fields.items():
            setattr(target, name, value)
        s.flush()
        return target
