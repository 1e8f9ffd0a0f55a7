"""A synthetic run as it goes on: what the engine writes when a validation pass ends
(``add_validated``), a veto applies (``apply_veto``) or scores were rewritten by a test
(``rescored``), the frontier it keeps included (``engine.search.kept_frontier``), for the studio's
benchmark and tests. The kept frontier of each run ``tests.support.synthetic.generate_run`` made
stays in this process (``KEPT``), so that each change writes what the engine's pool would."""

from __future__ import annotations

from sqlalchemy import insert

from storage.db import Database
from storage.models import Candidate, Evaluation, Example
from tests.support.synthetic import _content_hash

# the kept frontier of each generated run (by database url and run id), so that ``add_validated``
# updates it as the engine's pool would, without reading every score back
KEPT: dict = {}  # (database url, run id) -> engine.search.kept_frontier.KeptFrontier


def keep_frontier(db: Database, run_id: str, accepted: list[str], scores: dict[str, dict[str, float]],
                   vetoed: str | None, version: int) -> None:
    """The frontier the engine would have kept (``engine.search.kept_frontier``): every accepted
    candidate added in the order it was validated, the vetoed one removed; written whole."""
    from engine.search.kept_frontier import KeptFrontier
    from storage.frontier import write_frontier

    kept = KeptFrontier("instance", scores)
    for cid in accepted:
        kept.add(cid)
    if vetoed:
        kept.remove(vetoed)
    changes = kept.take_changes()
    write_frontier(db, run_id, changes.entries, changes.counts, version, full=True)
    KEPT[(db.url, run_id)] = kept




def add_validated(db: Database, run_id: str, seed: int = 0) -> str:
    """What a live run records when a validation pass ends: one more accepted candidate (a child
    of the best) with a score on every validation example, the run's metric calls bumped, and
    the kept frontier updated and written with the next ``frontier_version``, as the engine's
    pool does (``engine.search.kept_frontier``). Returns its id."""
    import random

    from storage import repo
    from storage.frontier import write_frontier

    rng = random.Random(f"{run_id}:{seed}:{repo.get_run(db, run_id).metric_calls}")
    run = repo.get_run(db, run_id)
    with db.write() as s:
        keys = list(s.execute(Example.__table__.select().with_only_columns(Example.key, Example.pk)
                              .where(Example.run_id == run_id, Example.split == "val")))
    scores = {key: round(rng.random(), 3) for key, _ in keys}
    cid = f"c{rng.getrandbits(60):015x}"[:16]
    content = {"system_prompt": f"live {cid}"}
    cand = Candidate(id=cid, run_id=run_id, content=content, content_hash=_content_hash(content), origin="reflection",
                     parent_ids=[run.best_candidate_id], status="accepted", step=run.steps_done,
                     val_mean=sum(scores.values()) / len(scores), val_count=len(scores), val_min=min(scores.values()),
                     val_max=max(scores.values()), reason="improved")
    with db.write() as s:
        s.add(cand)
        s.flush()
        s.execute(insert(Evaluation), [dict(run_id=run_id, candidate_id=cid, example_pk=pk, score=scores[key],
                                            side_info={}, content_hash=cand.content_hash, seconds=0.01)
                                       for key, pk in keys])
    repo.bump_run(db, run_id, metric_calls=len(keys))
    kept = KEPT.get((db.url, run_id)) or kept_from_database(db, run_id, [key for key, _ in keys])
    kept.scores[cid] = scores
    kept.add(cid)
    changes = kept.take_changes()
    write_frontier(db, run_id, changes.entries, changes.counts, run.frontier_version + 1)
    return cid


def kept_from_database(db: Database, run_id: str, val_keys: list[str]):
    """The kept frontier of a run this process did not generate, rebuilt from its scores as a
    resumed engine does (read raw: the engine's load of 2.5 M evaluations takes minutes)."""
    from engine.search.kept_frontier import KeptFrontier
    from storage import queries

    cands = queries.candidate_rows(db, run_id)
    accepted = cands[cands["status"] == "accepted"]
    scores: dict[str, dict[str, float]] = {}
    long = queries.val_scores(db, run_id)
    for cid, key, score in zip(long["candidate_id"].tolist(), long["example"].tolist(), long["score"].tolist()):
        scores.setdefault(cid, {})[key] = score
    scores = {c: s for c, s in scores.items() if c in set(accepted["id"])}
    kept = KeptFrontier("instance", scores)
    kept.rebuild([c for c in accepted.loc[~accepted["vetoed"], "id"] if c in scores], {})
    kept.take_changes()
    KEPT[(db.url, run_id)] = kept
    return kept


def apply_veto(db: Database, run_id: str, candidate_id: str, vetoed: bool = True) -> None:
    """What the engine writes when it applies a veto (or an unveto) to a synthetic run: the
    candidate's flag, and the kept frontier without it (with it) under the next frontier version."""
    from storage import repo
    from storage.frontier import write_frontier

    run = repo.get_run(db, run_id)
    repo.update_candidate(db, candidate_id, vetoed=vetoed)
    with db.write() as s:
        keys = [k for (k,) in s.execute(Example.__table__.select().with_only_columns(Example.key)
                                        .where(Example.run_id == run_id, Example.split == "val"))]
    kept = KEPT.get((db.url, run_id)) or kept_from_database(db, run_id, keys)
    kept.add(candidate_id) if not vetoed else kept.remove(candidate_id)
    changes = kept.take_changes()
    write_frontier(db, run_id, changes.entries, changes.counts, run.frontier_version + 1)


def rescored(db: Database, run_id: str) -> None:
    """After a test rewrote evaluations of a synthetic run by hand: each candidate's validation
    mean, lowest and highest score again, and the kept frontier rebuilt from the scores and written
    whole under the next frontier version, as the engine records them."""
    from storage import repo
    from storage.frontier import write_frontier

    with db.write() as s:
        keys = [k for (k,) in s.execute(Example.__table__.select().with_only_columns(Example.key)
                                        .where(Example.run_id == run_id, Example.split == "val"))]
    KEPT.pop((db.url, run_id), None)
    kept = kept_from_database(db, run_id, keys)
    for cid, scores in kept.scores.items():
        if scores:
            repo.update_candidate(db, cid, val_mean=sum(scores.values()) / len(scores), val_min=min(scores.values()),
                                  val_max=max(scores.values()))
    kept.rebuild(list(kept.eligible), {})
    changes = kept.take_changes()
    write_frontier(db, run_id, changes.entries, changes.counts, repo.get_run(db, run_id).frontier_version + 1, full=True)
