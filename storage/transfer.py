"""Writing a whole run at once: the storage half of importing an exported run.

``engine.records.export`` turns a document into rows; ``insert_run`` stores them. Contract:
- Atomic: one writer transaction; on any error nothing of the run is left behind.
- Not idempotent: a second import of the same run id raises ``Conflict`` (the first is kept), and
  so does a candidate id that another run of the database holds (candidate ids are global).
- Ids: the run and candidate ids are kept as given (so export → import → export gives the same
  document); integer ids (examples, LM calls, commands, steps …) are assigned by the database.
  Rows therefore refer to each other by position in the lists given, and ``insert_run``
  rewrites those positions to the new ids: ``Evaluation.example_pk`` is an index into
  ``examples`` (None for single-task search), ``Candidate.lm_call_id`` an index into
  ``lm_calls``, and ``Step.applied_command_ids`` indexes into ``commands``.
"""

from __future__ import annotations

from typing import Optional

from sqlmodel import select

from storage.db import Database
from storage.errors import Conflict
from storage.models import Candidate, Command, Comment, Evaluation, Example, LMCall, Run, Step


def insert_run(db: Database, run: Run, examples: list[Example], lm_calls: list[LMCall], candidates: list[Candidate],
               evaluations: list[Evaluation], commands: list[Command], steps: list[Step],
               comments: list[Comment]) -> str:
    """Insert ``run`` and all its rows (positions rewritten to ids, see above); the run id."""
    with db.write() as s:
        if s.get(Run, run.id) is not None:
            raise Conflict(f"run {run.id} already exists in this database")
        taken = _taken_candidate(s, [c.id for c in candidates])
        if taken is not None:
            raise Conflict(f"candidate {taken[0]} already exists in this database (in run {taken[1]}); "
                           "candidate ids are kept on import, so this document cannot be imported here")
        s.add(run)
        s.flush()
        example_pks = _insert_numbered(s, examples, "pk")
        call_ids = _insert_numbered(s, lm_calls, "id")
        for cand in candidates:
            cand.lm_call_id = call_ids[cand.lm_call_id] if cand.lm_call_id is not None else None
            s.add(cand)
        s.flush()
        for ev in evaluations:
            ev.example_pk = example_pks[ev.example_pk] if ev.example_pk is not None else None
            s.add(ev)
        command_ids = _insert_numbered(s, commands, "id")
        for step in steps:
            step.applied_command_ids = [command_ids[i] for i in step.applied_command_ids]
            s.add(step)
        s.add_all(comments)
    return run.id


def _taken_candidate(s, ids: list[str]) -> Optional[tuple[str, str]]:
    """(candidate id, its run) of the first of ``ids`` the database already holds, else None."""
    for start in range(0, len(ids), 500):  # bounded IN lists (SQLite's limit on bound parameters)
        row = s.exec(select(Candidate.id, Candidate.run_id).where(Candidate.id.in_(ids[start:start + 500]))).first()
        if row is not None:
            return row[0], row[1]
    return None


def _insert_numbered(s, rows: list, id_field: str) -> list[int]:
    """Insert rows in order; the ids the database gave them, by position."""
    s.add_all(rows)
    s.flush()
    return [getattr(row, id_field) for row in rows]
