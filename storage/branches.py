"""Reads across runs for branches (engine/branch.py, engine/reuse.py): a run's branches, its
base, the evaluations a branch may reuse, and what it reused.

Same contract as ``storage.repo``: each function one read transaction, a fixed number of
statements (stated), plain values or detached rows out.
"""

from __future__ import annotations

from typing import Iterable

from sqlalchemy import func
from sqlmodel import select

from storage.db import Database
from storage.models import Candidate, Evaluation, Example, Run


def branches_of(db: Database, run_id: str) -> list[dict]:
    """The runs that branched from ``run_id``, oldest first: ``{"id", "name", "status",
    "best_val_mean", "created_at", "candidates"}`` (``candidates``: the base run's candidates each
    started from, first the seed). One statement."""
    with db.read() as s:
        rows = s.execute(select(Run.id, Run.name, Run.status, Run.best_val_mean, Run.created_at, Run.config)
                         .where(Run.branch_of == run_id).order_by(Run.created_at)).all()
    return [{"id": r[0], "name": r[1], "status": r[2], "best_val_mean": r[3], "created_at": r[4],
             "candidates": list(((r[5] or {}).get("branch") or {}).get("candidates") or [])} for r in rows]


def run_configs(db: Database, run_ids: Iterable[str]) -> dict[str, dict]:
    """run id -> stored config, for the runs of ``run_ids`` that exist. One statement."""
    ids = list(run_ids)
    if not ids:
        return {}
    with db.read() as s:
        return {rid: cfg for rid, cfg in s.execute(select(Run.id, Run.config).where(Run.id.in_(ids))).all()}


def example_payloads(db: Database, run_ids: Iterable[str]) -> list[tuple[str, int, object]]:
    """(run id, example pk, payload) of every example of ``run_ids``. One statement."""
    ids = list(run_ids)
    if not ids:
        return []
    with db.read() as s:
        return [tuple(r) for r in s.execute(select(Example.run_id, Example.pk, Example.payload)
                                            .where(Example.run_id.in_(ids))).all()]


def evaluations_of_content(db: Database, run_ids: Iterable[str], content_hash: str,
                           example_pks: Iterable[int]) -> list[Evaluation]:
    """Evaluations recorded in ``run_ids`` of the content ``content_hash`` on ``example_pks``
    (copies included: a copy holds the same result). One statement."""
    ids, pks = list(run_ids), list(example_pks)
    if not ids or not pks:
        return []
    with db.read() as s:
        return list(s.exec(select(Evaluation).where(Evaluation.run_id.in_(ids), Evaluation.content_hash == content_hash,
                                                    Evaluation.example_pk.in_(pks)).order_by(Evaluation.id)))


def reused_counts(db: Database, run_id: str) -> dict[str, int]:
    """Per run they came from, how many of ``run_id``'s evaluations were reused (not paid).
    One statement."""
    with db.read() as s:
        rows = s.execute(select(Evaluation.reused_from, func.count()).where(
            Evaluation.run_id == run_id, Evaluation.reused_from.is_not(None)).group_by(Evaluation.reused_from)).all()
    return {base: n for base, n in rows}


def candidates_by_id(db: Database, ids: Iterable[str]) -> dict[str, dict]:
    """id -> {"run_id", "content", "status", "val_mean"} for those of the candidates ``ids``
    that exist, whichever run they belong to (the caller says which belong elsewhere). One
    statement."""
    wanted = list(ids)
    if not wanted:
        return {}
    with db.read() as s:
        rows = s.execute(select(Candidate.id, Candidate.run_id, Candidate.content, Candidate.status, Candidate.val_mean)
                         .where(Candidate.id.in_(wanted))).all()
    return {r[0]: {"run_id": r[1], "content": r[2], "status": r[3], "val_mean": r[4]} for r in rows}
