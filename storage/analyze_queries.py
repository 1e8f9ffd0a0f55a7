"""Read queries for Analyze (``engine.analyze``): a run's own records, as plain data.

Same contract as ``storage.queries``: read-only, a fixed number of SQL statements per call
(stated in the docstring) whatever the size of the run, plain data out. The large reads (every
evaluation of a 2,000-candidate run) come back as raw DBAPI tuples: they are most of the time.
"""

from __future__ import annotations

import json
from typing import Optional

from sqlalchemy import desc, func, select

from storage.db import Database
from storage.models import Candidate, Command, Evaluation, Example, LMCall, Run, Step
from storage.queries import CANDIDATE_COLUMNS, _fetch_raw, _run_dict
from storage.states import LMCallStatus

STEP_COLUMNS = ("index", "parent_ids", "proposal_ids", "accepted_ids", "metric_calls", "cost_usd", "started_at",
                "ended_at", "seconds")
LM_COLUMNS = ("id", "purpose", "status", "error_kind", "seconds", "cached", "step", "candidate_id")
EVAL_SAMPLE = 2000  # the latest evaluations whose seconds measure a metric call's latency
SIDE_INFO_SAMPLE = 24  # candidates whose side information is compared (a bounded read, whatever the run's size)


def _json(value):
    """A JSON column read raw: SQLite gives text, PostgreSQL a parsed value."""
    return json.loads(value) if isinstance(value, str) else value


def run_records(db: Database, run_id: str) -> Optional[dict]:
    """Everything Analyze reads of one run, but side information; None for an unknown run.
    Eight statements.

    Keys: ``run`` (the run row as a dict), ``examples`` [(pk, key, split)], ``candidates``
    [dict of ``storage.queries.CANDIDATE_COLUMNS``], ``steps`` [dict of STEP_COLUMNS],
    ``lm_calls`` [dict of LM_COLUMNS], ``commands`` [(kind, payload, status)], ``scores``
    [(candidate_id, example_pk, score)] of every evaluation (the caller aggregates them: one read
    of the covering index costs less than aggregates and joins in SQL), and ``eval_seconds``
    (mean, count) of the latest EVAL_SAMPLE evaluations that ran (not cached)."""
    with db.read() as s:
        run = s.get(Run, run_id)
        if run is None:
            return None
        out: dict = {"run": _run_dict(run)}
        out["examples"] = [tuple(r) for r in s.execute(select(Example.pk, Example.key, Example.split)
                                                      .where(Example.run_id == run_id).order_by(Example.position))]
        cols = [getattr(Candidate, c) for c in CANDIDATE_COLUMNS]
        out["candidates"] = [dict(zip(CANDIDATE_COLUMNS, r)) for r in s.execute(
            select(*cols).where(Candidate.run_id == run_id).order_by(Candidate.created_at, Candidate.id))]
        out["steps"] = [dict(zip(STEP_COLUMNS, r)) for r in s.execute(
            select(*[getattr(Step, c) for c in STEP_COLUMNS]).where(Step.run_id == run_id).order_by(Step.index))]
        out["lm_calls"] = [dict(zip(LM_COLUMNS, r)) for r in s.execute(
            select(*[getattr(LMCall, c) for c in LM_COLUMNS]).where(LMCall.run_id == run_id).order_by(LMCall.id))]
        out["commands"] = [tuple(r) for r in s.execute(select(Command.kind, Command.payload, Command.status)
                                                       .where(Command.run_id == run_id).order_by(Command.id))]
    e = Evaluation.__table__
    # every score of the run, from the covering index (ix_evaluation_scores): joining the examples and the
    # candidates to keep only the accepted ones' validation scores cost more than the rows it saves
    out["scores"] = _fetch_raw(db, select(e.c.candidate_id, e.c.example_pk, e.c.score).where(e.c.run_id == run_id))
    latest = (select(e.c.seconds).where(e.c.run_id == run_id, e.c.cached.is_(False)).order_by(e.c.id.desc())
              .limit(EVAL_SAMPLE).subquery())
    out["eval_seconds"] = tuple(_fetch_raw(db, select(func.avg(latest.c.seconds), func.count()))[0])
    return out


def side_info_of(db: Database, run_id: str, candidate_ids: list[str]) -> list[tuple[str, int, str]]:
    """(candidate_id, example_pk, side information as canonical JSON text) of the evaluations of
    at most SIDE_INFO_SAMPLE candidates (side information is the heaviest column). One statement."""
    e = Evaluation.__table__
    rows = _fetch_raw(db, select(e.c.candidate_id, e.c.example_pk, e.c.side_info)
                      .where(e.c.run_id == run_id, e.c.candidate_id.in_(candidate_ids[:SIDE_INFO_SAMPLE])))
    return [(c, pk, json.dumps(_json(info) or {}, sort_keys=True, default=str)) for c, pk, info in rows]


def last_diagnosis(db: Database, run_id: str) -> Optional[dict]:
    """The run's latest written diagnosis (its LM call of purpose ``analysis`` that answered):
    {"id", "model", "answer", "messages", "started_at", "seconds"}, or None. One statement."""
    with db.read() as s:
        call = s.scalars(select(LMCall).where(LMCall.run_id == run_id, LMCall.purpose == "analysis",
                                           LMCall.status == LMCallStatus.DONE.value).order_by(desc(LMCall.id)).limit(1)).first()
        return None if call is None else {"id": call.id, "model": call.model, "answer": call.answer,
                                          "messages": call.messages, "started_at": call.started_at,
                                          "seconds": call.seconds}
