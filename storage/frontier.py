"""The frontier the engine keeps (table ``frontier``, each candidate's ``frontier_examples`` and
``frontier_entries``, the run's ``frontier_kept``): the engine's write and the studio's reads.

The engine computes the changes (``engine.search.kept_frontier``); ``write_frontier`` stores them
with the run's new ``frontier_version`` in one transaction, so a reader that finds
``run.frontier_kept == run.frontier_version`` reads rows that describe that version. The reads
follow ``storage.queries``' contract (``studio_read``, a fixed number of statements, plain data).
"""

from __future__ import annotations

from typing import Iterable, Optional

import pandas as pd
from sqlalchemy import bindparam, delete, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite

from storage.db import Database, studio_read
from storage.models import Candidate, Evaluation, Example, Frontier, Run
from storage.queries import _fetch_raw, _validation_split

Key = tuple[Optional[str], Optional[str]]  # (example key, objective): engine.search.kept_frontier.Key
CHUNK = 500  # keys or ids per statement: SQLite's limit on bound parameters


def write_frontier(db: Database, run_id: str, entries: dict[Key, Optional[tuple[float, float, int]]],
                   counts: dict[str, tuple[int, int]], version: int, full: bool = False) -> None:
    """Store the frontier's changes (``kept_frontier.Changes``) and set the run's
    ``frontier_version`` and ``frontier_kept`` to ``version``, in one transaction. ``entries``:
    (best, lowest, holders) by key, None for an entry that is gone; ``counts``: (examples,
    entries) held by candidate id. ``full``: these are all of them (rows and counts not named are
    cleared)."""
    f, c = Frontier.__table__, Candidate.__table__
    with db.write() as s:
        conn = s.connection()
        if full:
            conn.execute(delete(f).where(f.c.run_id == run_id))
            conn.execute(update(c).where(c.c.run_id == run_id, (c.c.frontier_examples != 0) | (c.c.frontier_entries != 0))
                         .values(frontier_examples=0, frontier_entries=0))
        gone = [(k[0] or "", k[1] or "") for k, v in entries.items() if v is None]
        for i in range(0, len(gone), CHUNK):
            conn.execute(delete(f).where(f.c.run_id == run_id, tuple_(f.c.example, f.c.objective).in_(gone[i:i + CHUNK])))
        rows = [dict(run_id=run_id, example=k[0] or "", objective=k[1] or "", best=v[0], lowest=v[1], holders=v[2])
                for k, v in entries.items() if v is not None]
        if rows:
            insert = (sqlite.insert if db.is_sqlite else postgresql.insert)(f)
            upsert = insert.on_conflict_do_update(
                index_elements=[f.c.run_id, f.c.example, f.c.objective],
                set_={"best": insert.excluded.best, "lowest": insert.excluded.lowest, "holders": insert.excluded.holders})
            conn.execute(upsert, rows)
        if counts:
            conn.execute(update(c).where(c.c.id == bindparam("cid"))
                         .values(frontier_examples=bindparam("n_examples"), frontier_entries=bindparam("n_entries")),
                         [dict(cid=cid, n_examples=n[0], n_entries=n[1]) for cid, n in counts.items()])
        conn.execute(update(Run.__table__).where(Run.__table__.c.id == run_id)
                     .values(frontier_version=version, frontier_kept=version))


def set_val_range(db: Database, ranges: dict[str, tuple[float, float]]) -> None:
    """Candidates' lowest and highest validation score (``val_min``, ``val_max``), for those a
    release before them validated (written when the engine resumes such a run)."""
    c = Candidate.__table__
    if ranges:
        with db.write() as s:
            s.connection().execute(update(c).where(c.c.id == bindparam("cid"))
                                   .values(val_min=bindparam("lo"), val_max=bindparam("hi")),
                                   [dict(cid=cid, lo=lo, hi=hi) for cid, (lo, hi) in ranges.items()])


# ---------------------------------------------------------------- the studio's reads


FRONTIER_CANDIDATE_COLUMNS = ("id", "origin", "step", "status", "pinned", "vetoed", "val_mean", "val_count", "val_min",
                              "val_max", "frontier_examples", "frontier_entries")


def kept_frontier(db: Database, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's kept frontier: its entries (example, objective, best, lowest, holders) and its
    accepted candidates' aggregates (``FRONTIER_CANDIDATE_COLUMNS``). Two statements, a few
    hundred rows and one narrow row per accepted candidate: never the scores themselves."""
    f = Frontier.__table__
    cols = [getattr(Candidate, n) for n in FRONTIER_CANDIDATE_COLUMNS]
    with studio_read(db) as s:
        conn = s.connection()
        entries = conn.execute(select(f.c.example, f.c.objective, f.c.best, f.c.lowest, f.c.holders)
                               .where(f.c.run_id == run_id)).cursor.fetchall()
        cands = conn.execute(select(*cols).where(Candidate.run_id == run_id, Candidate.status == "accepted")
                             .order_by(Candidate.created_at, Candidate.id)).cursor.fetchall()
    out = pd.DataFrame(entries, columns=["example", "objective", "best", "lowest", "holders"])
    agg = pd.DataFrame(cands, columns=list(FRONTIER_CANDIDATE_COLUMNS))
    for col in ("pinned", "vetoed"):
        agg[col] = agg[col].astype(bool)
    for col in ("val_mean", "val_min", "val_max"):
        agg[col] = agg[col].astype("float64")
    return out, agg


def scores_of(db: Database, run_id: str, candidate_ids: Iterable[str],
              examples: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """Long table (candidate_id, example, score) of the validation scores of ``candidate_ids``
    only (the rows a heatmap shows), on ``examples`` only when given (its columns). One
    statement per 500 ids."""
    e, x = Evaluation.__table__, Example.__table__
    ids = list(dict.fromkeys(candidate_ids))
    keys = list(examples) if examples is not None else None
    rows: list = []
    for i in range(0, len(ids), CHUNK):
        q = (select(e.c.candidate_id, x.c.key, e.c.score).join(x, x.c.pk == e.c.example_pk)
             .where(e.c.run_id == run_id, e.c.candidate_id.in_(ids[i:i + CHUNK]), x.c.split == _validation_split(run_id)))
        if keys is not None and len(keys) <= CHUNK:
            q = q.where(x.c.key.in_(keys))
        rows += _fetch_raw(db, q)
    return pd.DataFrame(rows, columns=["candidate_id", "example", "score"])


def holding_above(db: Database, run_id: str, candidate_ids: Iterable[str], above: float,
                  tol: float = 1e-9) -> set[str]:
    """Which of ``candidate_ids`` hold the best score on a contested validation example whose
    best is above ``above`` (plus ``tol``): for degenerate members, whether a candidate wins
    somewhere a constant answer does not. Evaluated in the database over the kept frontier (a
    scan of those candidates' scores, no rows sent back but their ids). One statement per 500 ids."""
    e, x, f = Evaluation.__table__, Example.__table__, Frontier.__table__
    ids = list(dict.fromkeys(candidate_ids))
    out: set[str] = set()
    for i in range(0, len(ids), CHUNK):
        q = (select(e.c.candidate_id).distinct()
             .join(x, x.c.pk == e.c.example_pk)
             .join(f, (f.c.run_id == x.c.run_id) & (f.c.example == x.c.key) & (f.c.objective == ""))
             .where(e.c.run_id == run_id, e.c.candidate_id.in_(ids[i:i + CHUNK]), f.c.best > above + tol,
                    f.c.lowest < f.c.best - tol, e.c.score >= f.c.best - tol))
        out.update(r[0] for r in _fetch_raw(db, q))
    return out
