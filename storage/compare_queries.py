"""Read query for comparing two candidates of a run, example by example.

Same contract as ``storage.queries``: read-only, a fixed number of SQL statements per call (stated
in the docstring), plain data out.
"""

from __future__ import annotations

from sqlalchemy import select

from storage.db import Database, studio_read
from storage.models import Candidate, Evaluation, Example


def first_seed(db: Database, run_id: str, preferred: str) -> str | None:
    """``preferred`` (the engine's id for a run's seed) when the run has it, else its oldest
    candidate of origin ``seed`` (an imported or synthetic run); None without a seed. One
    statement."""
    with studio_read(db) as s:
        rows = s.execute(select(Candidate.id).where(Candidate.run_id == run_id, Candidate.origin == "seed")
                         .order_by(Candidate.created_at, Candidate.id)).scalars().all()
    return preferred if preferred in rows else (rows[0] if rows else None)


def pair_evaluations(db: Database, run_id: str, a: str, b: str) -> list[dict]:
    """Every example that ``a`` or ``b`` was evaluated on, in the order of the run's examples:
    ``{"example", "split", "payload", "score_a", "score_b", "side_a", "side_b", "error_a", "error_b"}``
    (None where that candidate has no evaluation of the example). One statement."""
    with studio_read(db) as s:
        rows = s.execute(select(Evaluation.candidate_id, Evaluation.score, Evaluation.side_info, Evaluation.error,
                                Example.key, Example.split, Example.pk, Example.payload)
                         .join(Example, Example.pk == Evaluation.example_pk)
                         .where(Evaluation.run_id == run_id, Evaluation.candidate_id.in_((a, b)))
                         .order_by(Example.pk)).all()
    out: dict[int, dict] = {}
    for cand, score, side, error, key, split, pk, payload in rows:
        row = out.setdefault(pk, {"example": key, "split": split, "payload": payload, "score_a": None, "score_b": None,
                                  "side_a": None, "side_b": None, "error_a": None, "error_b": None})
        for which in ("a", "b") if a == b else (("a",) if cand == a else ("b",)):
            row[f"score_{which}"], row[f"side_{which}"], row[f"error_{which}"] = score, side or {}, error
    return list(out.values())
