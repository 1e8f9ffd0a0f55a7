"""Writing a whole run at once: the storage half of importing an exported run.

``engine.records.export`` turns a document into rows; ``insert_run`` stores them. Contract:
- Atomic: one writer transaction; on any error nothing of the run is left behind.
- Not idempotent: a second import of the same run id raises ``Conflict`` (the first is kept).
- Ids: the run and candidate ids are kept as given (so export → import → export gives the same
  document); integer ids (examples, LM calls, commands, steps …) are assigned by the database.
  Rows therefore refer to each other by position in the lists given, and ``insert_run``
  rewrites those positions to the new ids: ``Evaluation.example_pk`` is an index into
  ``examples`` (None for single-task search), ``Candidate.lm_call_id`` an index into
  ``lm_calls``, and ``Step.applied_command_ids`` indexes into ``commands``.
"""

from __future__ import annotations

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


def _insert_numbered(s, rows: list, id_field: str) -> list[int]:
    """Insert rows in order; the ids the database gave them, by position."""
    s.add_all(rows)
    s.flush()
    return [getattr(row, id_field) for row in rows]
