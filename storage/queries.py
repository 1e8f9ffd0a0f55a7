"""Read queries for the studio: plain dicts and pandas DataFrames, never ORM objects.

Contract:
- Every function is read-only and opens its own ``storage.db.studio_read`` session, with the
  studio's statement time limit (a slow statement raises ``TimedOut`` instead of holding the
  page). Each issues a fixed, small number of SQL statements (stated
  in its docstring) whatever the size of the run, so a page's query count is known in advance
  (the live dashboard fragment makes at most 3).
- Results are plain data (``dict``, ``list``, ``DataFrame``) that can be pickled by
  ``st.cache_data`` and used after the session is closed.
- Unknown ids give ``None`` (or an empty frame), never an exception: pages show "not found".
- Times are timezone-aware UTC ``datetime`` objects (SQLite returns naive ones; we mark them).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Iterable, Optional

import pandas as pd
from sqlalchemy import case, func, select, true

from storage.db import Database, studio_read
from storage.objective_queries import objective_means, val_objectives  # noqa: F401  (their home before)
from storage.run_figures import running_seconds
from storage.states import CommandStatus, LMCallStatus, RunStatus
from storage.models import LM_ERROR_KINDS, Candidate, Command, Comment, Evaluation, Example, LMCall, Run, Step, WorkerBeat

PURPOSES = ("reflection", "merge", "seed", "task", "judge", "analysis")

CANDIDATE_COLUMNS = (
    "id", "origin", "parent_ids", "component", "merge_path", "step", "status", "reason", "pinned", "vetoed", "author",
    "created_at", "finished_at", "lm_call_id", "parent_minibatch_score", "minibatch_score", "minibatch_keys", "minibatch_reason", "val_mean",
    "val_count", "cause", "val_min", "val_max", "frontier_examples", "frontier_entries",
)


def utc(ts: Optional[datetime]) -> Optional[datetime]:
    if ts is None:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def _run_dict(run: Run) -> dict:
    d = run.model_dump()
    for key in ("created_at", "started_at", "finished_at", "lease_expires_at", "heartbeat_at"):
        d[key] = utc(d[key])
    return d


# ---------------------------------------------------------------- runs


def run_overview(db: Database, run_id: str) -> Optional[dict]:
    """The run row as a dict plus ``cost_by_purpose`` {purpose: $}, ``calls_by_purpose``,
    ``lm_failures_by_kind`` {error kind: LM attempts that failed so}, and
    ``commands_pending`` / ``commands_done`` (counts of the run's human commands: a pin or a
    veto changes no counter of the run, so the studio's version token includes these), and
    ``proposals_reflecting`` (proposals of a running run whose reflection has not answered yet).

    One SQL statement: the sums and counts are one pass over the run's LM calls and one over its
    commands (conditional aggregates, joined to the run row; a correlated subquery per figure
    scanned the LM calls 24 times, 0.12 s at 10,000 of them, and the live fragments read this
    every second). Evaluator-side cost (``lm()`` inside the evaluator) is what remains of ``cost_usd``.
    """
    lm, cmd = LMCall.__table__, Command.__table__
    figures = []
    for p in PURPOSES:
        figures.append(func.coalesce(func.sum(case((lm.c.purpose == p, lm.c.cost_usd), else_=0.0)), 0.0).label(f"cost_{p}"))
        figures.append(func.count(case((lm.c.purpose == p, 1))).label(f"n_{p}"))
    for kind in LM_ERROR_KINDS:
        figures.append(func.count(case((lm.c.error_kind == kind, 1))).label(f"lm_{kind}"))
    # reflections sent and not yet answered: their proposals are counted, their answers not yet
    figures.append(func.count(case(((lm.c.purpose == "reflection") & (lm.c.status == LMCallStatus.STARTED.value), 1)))
                   .label("reflecting"))
    calls = select(*figures).where(lm.c.run_id == run_id).subquery()
    pending = cmd.c.status == CommandStatus.PENDING.value
    commands = select(func.count(case((pending, 1))).label("commands_pending"),
                      func.count(case((~pending, 1))).label("commands_done")).where(cmd.c.run_id == run_id).subquery()
    q = (select(Run, *calls.c, *commands.c).select_from(Run).join(calls, true()).join(commands, true())
         .where(Run.id == run_id))
    with studio_read(db) as s:
        row = s.execute(q).first()
    if row is None:
        return None
    out = _run_dict(row[0])
    m = row._mapping
    out["cost_by_purpose"] = {p: float(m[f"cost_{p}"] or 0.0) for p in PURPOSES}
    out["calls_by_purpose"] = {p: int(m[f"n_{p}"] or 0) for p in PURPOSES}
    out["commands_pending"], out["commands_done"] = int(m["commands_pending"] or 0), int(m["commands_done"] or 0)
    # a crashed worker's unanswered calls stay "started" until the run resumes: only a running run reflects
    out["proposals_reflecting"] = int(m["reflecting"] or 0) if out["status"] == RunStatus.RUNNING else 0
    out["lm_failures_by_kind"] = {k: int(m[f"lm_{k}"] or 0) for k in LM_ERROR_KINDS}
    lm_cost = sum(out["cost_by_purpose"].values())  # the evaluator's lm() calls (task, judge) are in it
    out["cost_by_purpose"]["evaluator"] = max(0.0, out["cost_usd"] - lm_cost)
    return out


def runs_table(db: Database) -> pd.DataFrame:
    """All runs, newest first, with budget columns read from the stored config. One statement."""
    with studio_read(db) as s:
        runs = list(s.scalars(select(Run).order_by(Run.created_at.desc())))
    now = datetime.now(timezone.utc)
    rows = []
    for run in runs:
        d = _run_dict(run)
        budget = (d["config"] or {}).get("budget") or {}
        rows.append({
            "id": d["id"], "name": d["name"], "owner": d["owner"], "status": d["status"],
            "best_val": d["best_val_mean"], "metric_calls": d["metric_calls"],
            "max_metric_calls": budget.get("max_metric_calls"), "cost_usd": d["cost_usd"],
            "max_cost_usd": budget.get("max_cost_usd"), "elapsed_s": running_seconds(d, now),
            "steps": d["steps_done"], "model": ((d["config"] or {}).get("reflection_lm") or {}).get("model", ""),
            "created_at": d["created_at"], "approved": d.get("approved_candidate_id") or "",
        })
    return pd.DataFrame(rows, columns=["id", "name", "owner", "status", "best_val", "metric_calls", "max_metric_calls",
                                       "cost_usd", "max_cost_usd", "elapsed_s", "steps", "model", "created_at",
                                       "approved"])


def run_config(db: Database, run_id: str) -> Optional[dict]:
    """The stored config of a run (to duplicate it). One statement."""
    with studio_read(db) as s:
        return s.scalar(select(Run.config).where(Run.id == run_id))


def worker_status(db: Database) -> Optional[dict]:
    """The most recent engine worker heartbeat, or None when no worker ever ran; a running
    worker's beat is preferred to a newer one of a worker that has just stopped. ``stopped_at``
    is set when that worker exited cleanly. One statement."""
    with studio_read(db) as s:
        beats = s.scalars(select(WorkerBeat).order_by(WorkerBeat.heartbeat_at.desc()).limit(8)).all()
    if not beats:
        return None
    recent = utc(beats[0].heartbeat_at) - timedelta(seconds=30)
    beat = next((b for b in beats if b.stopped_at is None and utc(b.heartbeat_at) >= recent), beats[0])
    d = beat.model_dump()
    d["heartbeat_at"] = utc(d["heartbeat_at"])
    d["started_at"] = utc(d["started_at"])
    d["stopped_at"] = utc(d["stopped_at"]) if d.get("stopped_at") else None
    d["age_s"] = (datetime.now(timezone.utc) - d["heartbeat_at"]).total_seconds()
    return d


# ---------------------------------------------------------------- candidates, evaluations, steps


def candidate_rows(db: Database, run_id: str) -> pd.DataFrame:
    """Every candidate of a run without its content (light columns), oldest first. One statement,
    read raw (``_fetch_raw``: SQLAlchemy's per-row processing was most of the time at 10,000
    candidates), its two JSON columns decoded here and its flags made booleans."""
    cols = [getattr(Candidate, c) for c in CANDIDATE_COLUMNS]
    raw = _fetch_raw(db, select(*cols).where(Candidate.run_id == run_id).order_by(Candidate.created_at, Candidate.id))
    pos = {c: i for i, c in enumerate(CANDIDATE_COLUMNS)}
    decoded = {c: _json_lists([r[pos[c]] for r in raw]) for c in ("parent_ids", "minibatch_keys")}
    df = pd.DataFrame(raw, columns=list(CANDIDATE_COLUMNS))
    for col, values in decoded.items():
        df[col] = pd.Series(values, index=df.index, dtype=object)
    for col in ("created_at", "finished_at"):
        df[col] = pd.to_datetime(df[col], utc=True)
    for col in ("pinned", "vetoed"):
        df[col] = df[col].astype(bool)
    for col in ("val_mean", "val_min", "val_max", "parent_minibatch_score", "minibatch_score"):
        df[col] = df[col].astype("float64")
    return df


def _json_lists(values: list) -> list[list]:
    """A JSON list column read raw: SQLite gives its texts, decoded here in one call (a call per
    row was half the read at 10,000 candidates); PostgreSQL the lists themselves."""
    if values and all(isinstance(v, str) for v in values):
        return json.loads("[" + ",".join(values) + "]")
    return [json.loads(v) if isinstance(v, str) else (v or []) for v in values]


def _fetch_raw(db: Database, q) -> list[tuple]:
    """Rows of a Core select as plain DBAPI tuples: skips SQLAlchemy's per-row processing, which
    is most of the time for the 10^5-row reads of a big run (measured: 0.75 s → 0.3 s). Only for
    columns whose raw driver value is what we want (strings, numbers)."""
    with studio_read(db) as s:
        return s.connection().execute(q).cursor.fetchall()


_E, _X = Evaluation.__table__, Example.__table__


def _validation_split(run_id: str):
    """The split the engine validates on: "val" when the run has a validation set, else "train"
    (multi-task search: the dataset is the validation set). An SQL expression, so that callers
    stay one statement."""
    has_val = select(_X.c.pk).where(_X.c.run_id == run_id, _X.c.split == "val").exists()
    return case((has_val, "val"), else_="train")


def val_scores(db: Database, run_id: str) -> pd.DataFrame:
    """Long table (candidate_id, example, score) of validation evaluations (the "val" split, or
    "train" when the run has no validation set)."""
    return val_scores_since(db, run_id, 0)[0]


def val_scores_since(db: Database, run_id: str, after_id: int) -> tuple[pd.DataFrame, int]:
    """``val_scores`` of the evaluations recorded after the one with id ``after_id``, and the
    last id read (``after_id`` when none): a live run's frontier reads only what is new. One
    statement."""
    q = (select(_E.c.candidate_id, _X.c.key, _E.c.score, _E.c.id).join(_X, _X.c.pk == _E.c.example_pk)
         .where(_E.c.run_id == run_id, _E.c.id > after_id, _X.c.split == _validation_split(run_id)))
    raw = pd.DataFrame(_fetch_raw(db, q), columns=["candidate_id", "example", "score", "id"])
    last = int(raw["id"].max()) if not raw.empty else after_id
    return raw.drop(columns="id"), last


def example_keys(db: Database, run_id: str, split: str = "val") -> list[str]:
    """Example keys of one split in dataset order. One statement."""
    with studio_read(db) as s:
        return list(s.scalars(select(Example.key).where(Example.run_id == run_id, Example.split == split)
                              .order_by(Example.position)))


def step_rows(db: Database, run_id: str, after: int = -1) -> pd.DataFrame:
    """The steps of a run with an index above ``after`` (every step by default) with their
    timeline events, in order. One statement. A step is written once more when it ends and never
    after, so a live run's reader reads again only the steps after the last it saw ended."""
    cols = ["index", "parent_ids", "parent_reasons", "proposal_ids", "accepted_ids", "applied_command_ids",
            "metric_calls", "cost_usd", "started_at", "ended_at", "seconds", "predicted_speedup",
            "measured_speedup", "worker_utilisation", "events"]
    with studio_read(db) as s:
        rows = s.execute(select(*[getattr(Step, c) for c in cols]).where(Step.run_id == run_id, Step.index > after)
                         .order_by(Step.index)).all()
    df = pd.DataFrame(rows, columns=cols)
    for col in ("started_at", "ended_at"):
        df[col] = pd.to_datetime(df[col], utc=True)
    return df


# ---------------------------------------------------------------- one candidate


def candidate_detail(db: Database, candidate_id: str) -> Optional[dict]:
    """Everything the candidate page shows, as plain data. Six statements.

    Keys: ``candidate`` (full row), ``parents`` [{id, content}], ``lm_call`` (dict or None),
    ``earlier_answers`` [answer text] (the reflections of this proposal before the one that wrote it),
    ``evaluations`` [{example, split, payload, score, side_info, error, seconds, cost_usd, cached}]
    in dataset order, ``comments`` [{author, text, kind, created_at}].
    """
    with studio_read(db) as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            return None
        c = cand.model_dump()
        parents = [{"id": pid, "content": content} for pid, content in
                   s.execute(select(Candidate.id, Candidate.content).where(Candidate.id.in_(c["parent_ids"] or [""]))).all()]
        parents.sort(key=lambda p: c["parent_ids"].index(p["id"]))
        call = s.get(LMCall, c["lm_call_id"]) if c["lm_call_id"] is not None else None
        # the answers of this proposal's earlier reflections (a retry's first answer), oldest first
        earlier = s.execute(select(LMCall.answer).where(LMCall.candidate_id == candidate_id,
                                                        LMCall.purpose == "reflection", LMCall.error.is_(None),
                                                        LMCall.id != (c["lm_call_id"] or -1))
                            .order_by(LMCall.id)).scalars().all()
        evs = s.execute(
            select(Example.key, Example.split, Example.payload, Evaluation.score, Evaluation.side_info, Evaluation.error,
                   Evaluation.seconds, Evaluation.cost_usd, Evaluation.cached)
            .join(Example, Example.pk == Evaluation.example_pk, isouter=True)
            .where(Evaluation.candidate_id == candidate_id).order_by(Example.position)).all()
        comments = s.execute(select(Comment.author, Comment.text, Comment.kind, Comment.created_at)
                             .where(Comment.candidate_id == candidate_id).order_by(Comment.id)).all()
    for key in ("created_at", "started_at", "finished_at"):
        c[key] = utc(c[key])
    return {
        "candidate": c,
        "parents": parents,
        "lm_call": call.model_dump() if call is not None else None,
        "earlier_answers": list(earlier),
        "evaluations": [dict(example=r[0] or "task", split=r[1] or "val", payload=r[2], score=r[3], side_info=r[4] or {},
                             error=r[5], seconds=r[6], cost_usd=r[7], cached=r[8]) for r in evs],
        "comments": [dict(author=r[0], text=r[1], kind=r[2], created_at=utc(r[3])) for r in comments],
    }


# ---------------------------------------------------------------- interventions (issue 5)


def command_log(db: Database, run_id: str) -> pd.DataFrame:
    """The run's commands (pin, veto, edit, pause …), newest first: the command log. One statement."""
    cols = ["id", "kind", "payload", "author", "reason", "created_at", "status", "applied_at", "applied_step", "result"]
    with studio_read(db) as s:
        rows = s.execute(select(*[getattr(Command, c) for c in cols]).where(Command.run_id == run_id)
                         .order_by(Command.id.desc())).all()
    df = pd.DataFrame(rows, columns=cols)
    for col in ("created_at", "applied_at"):
        df[col] = pd.to_datetime(df[col], utc=True)
    return df


def candidate_live(db: Database, run_id: str, candidate_id: str) -> Optional[dict]:
    """What may change on a candidate while someone looks at it: its flags and scores, its
    comment thread, and the run's commands about it (pending ones included). Three statements.

    Keys: ``candidate`` {id, status, pinned, vetoed, val_mean, step, origin}, ``run_status``,
    ``comments`` [{author, text, kind, created_at}], ``commands`` [{id, kind, author, reason,
    created_at, status, result, applied_step, payload}] oldest first. None when the candidate is
    not in the run.
    """
    with studio_read(db) as s:
        row = s.execute(select(Candidate.id, Candidate.status, Candidate.pinned, Candidate.vetoed, Candidate.val_mean,
                               Candidate.step, Candidate.origin, Run.status).join(Run, Run.id == Candidate.run_id)
                        .where(Candidate.id == candidate_id, Candidate.run_id == run_id)).first()
        if row is None:
            return None
        comments = s.execute(select(Comment.author, Comment.text, Comment.kind, Comment.created_at)
                             .where(Comment.candidate_id == candidate_id).order_by(Comment.id)).all()
        cmds = s.execute(select(Command.id, Command.kind, Command.author, Command.reason, Command.created_at,
                                Command.status, Command.result, Command.applied_step, Command.payload)
                         .where(Command.run_id == run_id).order_by(Command.id)).all()
    cand = dict(zip(("id", "status", "pinned", "vetoed", "val_mean", "step", "origin"), row))
    keys = ("id", "kind", "author", "reason", "created_at", "status", "result", "applied_step", "payload")
    mine = [dict(zip(keys, c)) for c in cmds if (c[8] or {}).get("candidate_id") == candidate_id]
    for c in mine:
        c["created_at"] = utc(c["created_at"])
    return {"candidate": cand, "run_status": row[7],
            "comments": [dict(author=r[0], text=r[1], kind=r[2], created_at=utc(r[3])) for r in comments],
            "commands": mine}


# ---------------------------------------------------------------- comparing runs


def compare_runs(db: Database, run_ids: Iterable[str]) -> pd.DataFrame:
    """Best validation score after each step of several runs, against cumulative metric calls,
    dollars and seconds. Columns: run_id, step, metric_calls, cost_usd, seconds, best. Two
    statements."""
    ids = list(run_ids)
    columns = ["run_id", "step", "metric_calls", "cost_usd", "seconds", "best"]
    if not ids:
        return pd.DataFrame(columns=columns)
    with studio_read(db) as s:
        steps = s.execute(select(Step.run_id, Step.index, Step.metric_calls, Step.cost_usd, Step.seconds)
                          .where(Step.run_id.in_(ids)).order_by(Step.run_id, Step.index)).all()
        # the best fully validated candidate: a pass cut short (val_cut_short) ranks nothing
        cands = s.execute(select(Candidate.run_id, Candidate.step, func.max(Candidate.val_mean))
                          .where(Candidate.run_id.in_(ids), Candidate.val_mean.is_not(None), Candidate.vetoed.is_(False),
                                 Candidate.val_cut_short == "")
                          .group_by(Candidate.run_id, Candidate.step)).all()
    steps_df = pd.DataFrame(steps, columns=["run_id", "step", "calls", "cost", "secs"])
    best_df = pd.DataFrame(cands, columns=["run_id", "step", "best_here"])
    out = []
    for rid in ids:
        st_ = steps_df[steps_df.run_id == rid].sort_values("step")
        bs = best_df[best_df.run_id == rid].set_index("step")["best_here"]
        seed_best = bs.get(0)
        calls = cost = secs = 0.0
        best = seed_best
        if seed_best is not None:
            out.append(dict(run_id=rid, step=0, metric_calls=0, cost_usd=0.0, seconds=0.0, best=seed_best))
        for row in st_.itertuples():
            calls += row.calls
            cost += row.cost
            secs += row.secs or 0.0
            here = bs.get(row.step)
            if here is not None and (best is None or here > best):
                best = here
            out.append(dict(run_id=rid, step=row.step, metric_calls=calls, cost_usd=cost, seconds=secs, best=best))
    return pd.DataFrame(out, columns=columns)
