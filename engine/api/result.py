"""What ``optimize_anything`` returns: GEPA's names for what GEPA has, plus Refract's own.

``candidates`` are the run's validated candidates (accepted, in the order they were made;
vetoed ones included, as they were validated), in the form the evaluator receives them (a
text, or a dict of named texts). ``parents[i]`` lists the indices of candidate i's parents in
``candidates`` (``[None]`` for the seed, as GEPA writes it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from storage import repo
from storage.db import Database

from engine.search.frontier import compute_frontier
from engine.state import to_evaluator

STUDIO_URL = "http://127.0.0.1:8501"


@dataclass
class OptimizeResult:
    best_candidate: Any
    candidates: list = field(default_factory=list)
    val_aggregate_scores: list[float] = field(default_factory=list)
    val_subscores: list[dict[str, float]] = field(default_factory=list)  # example id -> score, per candidate
    best_idx: Optional[int] = None
    parents: list[list[Optional[int]]] = field(default_factory=list)
    total_metric_calls: int = 0
    run_id: str = ""
    status: str = ""
    status_reason: str = ""
    test_score: Optional[float] = None  # the best candidate's mean on the held-out test set
    cost_usd: float = 0.0
    frontier: dict[str, dict] = field(default_factory=dict)  # example id -> {"best_score", "candidates": [idx]}
    url: str = ""

    @property
    def best_score(self) -> Optional[float]:
        return None if self.best_idx is None else self.val_aggregate_scores[self.best_idx]


def studio_url(run_id: str) -> str:
    """The run's dashboard (REFRACT_STUDIO_URL when the studio is served elsewhere)."""
    base = os.environ.get("REFRACT_STUDIO_URL", STUDIO_URL).rstrip("/")
    return f"{base}/dashboard?run={run_id}"


def build_result(db: Database, run_id: str) -> OptimizeResult:
    """The result of a run as it stands in the database."""
    run = repo.get_run(db, run_id)
    cands = [c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.val_mean is not None]
    index = {c.id: i for i, c in enumerate(cands)}
    val_keys = {e.pk: e.key for e in repo.get_examples(db, run_id) if e.split == "val"} or \
        {e.pk: e.key for e in repo.get_examples(db, run_id) if e.split == "train"}
    subscores: dict[str, dict[str, float]] = {c.id: {} for c in cands}
    for ev in repo.evaluations_for(db, run_id, list(index)):
        if ev.example_pk in val_keys:
            subscores[ev.candidate_id][val_keys[ev.example_pk]] = ev.score
    front = compute_frontier(subscores, [c.id for c in cands if not c.vetoed])
    single = not isinstance(run.config.get("seed_candidate"), dict)
    best_idx = index.get(run.best_candidate_id)
    if best_idx is None and cands:
        best_idx = max(range(len(cands)), key=lambda i: cands[i].val_mean)
    return OptimizeResult(
        best_candidate=None if best_idx is None else to_evaluator(cands[best_idx].content, single),
        candidates=[to_evaluator(c.content, single) for c in cands],
        val_aggregate_scores=[c.val_mean for c in cands], val_subscores=[subscores[c.id] for c in cands],
        best_idx=best_idx, parents=[[index.get(p) for p in c.parent_ids] or [None] for c in cands],
        total_metric_calls=run.metric_calls, run_id=run_id, status=run.status, status_reason=run.status_reason,
        test_score=run.test_mean, cost_usd=run.cost_usd, url=studio_url(run_id),
        frontier={k: {"best_score": front.best[k], "candidates": sorted(index[c] for c in front.holders[k])}
                  for k in sorted(front.best)})
