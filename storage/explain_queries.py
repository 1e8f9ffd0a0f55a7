"""Read queries for teaching: one step of a run in full, and every candidate's text for provenance.

Same contract as ``storage.queries``: read-only, a fixed number of SQL statements per call
(stated in each docstring), plain data out, unknown ids give ``None`` rather than an exception.
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import select

from storage.db import Database, studio_read
from storage.models import Candidate, Evaluation, Example, LMCall, Run, Step
from storage.queries import utc

_CANDIDATE_FIELDS = ("id", "content", "origin", "parent_ids", "component", "step", "status", "improved", "reason", "author",
                     "created_at", "lm_call_id", "parent_minibatch_score", "minibatch_score", "minibatch_keys", "minibatch_reason",
                     "val_mean", "val_count", "pinned", "vetoed")


def _candidate_dict(c: Candidate) -> dict:
    d = {f: getattr(c, f) for f in _CANDIDATE_FIELDS}
    d["created_at"] = utc(d["created_at"])
    return d


def run_lineage(db: Database, run_id: str) -> Optional[dict]:
    """The run's best candidate id and every candidate with its text, oldest first (a parent
    is always older than its children): ``{"best_candidate_id", "candidates": {id: dict}}``,
    or None for an unknown run. Two statements."""
    with studio_read(db) as s:
        run = s.get(Run, run_id)
        if run is None:
            return None
        cands = s.scalars(select(Candidate).where(Candidate.run_id == run_id)
                          .order_by(Candidate.created_at, Candidate.id)).all()
        return {"best_candidate_id": run.best_candidate_id,
                "candidates": {c.id: _candidate_dict(c) for c in cands}}


def step_indexes(db: Database, run_id: str) -> list[int]:
    """The indexes of the run's recorded steps, in order. One statement."""
    with studio_read(db) as s:
        return list(s.scalars(select(Step.index).where(Step.run_id == run_id).order_by(Step.index)))


def step_detail(db: Database, run_id: str, index: int) -> Optional[dict]:
    """Everything the step explanation shows about step ``index`` of a run, or None when the
    run has no such step. Five statements.

    Keys: ``step`` (the Step row as a dict); ``candidates`` {id: dict with text} of the whole
    run (the frontier before and after the step needs them all); ``evaluations`` [{candidate_id,
    example, split, score, side_info, error, seconds, cached}] of the run; ``lm_calls`` {id:
    {purpose, model, messages, answer, seconds, cost_usd, error, candidate_id}} of the step;
    ``examples`` [{key, split, payload}] in dataset order.
    """
    with studio_read(db) as s:
        step = s.scalars(select(Step).where(Step.run_id == run_id, Step.index == index)).first()
        if step is None:
            return None
        cands = s.scalars(select(Candidate).where(Candidate.run_id == run_id)
                          .order_by(Candidate.created_at, Candidate.id)).all()
        examples = s.scalars(select(Example).where(Example.run_id == run_id).order_by(Example.position)).all()
        evals = s.execute(select(Evaluation.candidate_id, Evaluation.example_pk, Evaluation.score, Evaluation.side_info,
                                 Evaluation.error, Evaluation.seconds, Evaluation.cached)
                          .where(Evaluation.run_id == run_id)).all()
        calls = s.scalars(select(LMCall).where(LMCall.run_id == run_id, LMCall.step == index)
                          .order_by(LMCall.id)).all()
        by_pk = {e.pk: e for e in examples}
        out = {
            "step": {**step.model_dump(), "started_at": utc(step.started_at), "ended_at": utc(step.ended_at)},
            "candidates": {c.id: _candidate_dict(c) for c in cands},
            "examples": [{"key": e.key, "split": e.split, "payload": e.payload} for e in examples],
            "evaluations": [{"candidate_id": e.candidate_id, "example": by_pk[e.example_pk].key,
                             "split": by_pk[e.example_pk].split, "score": e.score, "side_info": e.side_info,
                             "error": e.error, "seconds": e.seconds, "cached": e.cached}
                            for e in evals if e.example_pk in by_pk],
            "lm_calls": {c.id: {"purpose": c.purpose, "model": c.model, "messages": c.messages, "answer": c.answer,
                                "seconds": c.seconds, "cost_usd": c.cost_usd, "error": c.error, "cached": c.cached,
                                "candidate_id": c.candidate_id} for c in calls},
        }
    return out
