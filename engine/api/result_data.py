"""Reading a run's ``OptimizeResult`` (``engine.api.result``) from the database."""

from __future__ import annotations

import bisect
import math
from typing import Optional

from storage import repo
from storage.db import Database

from engine.api.result import STR_CANDIDATE_KEY, OptimizeResult, studio_url
from engine.search.frontier import compute_frontier
from engine.state import SINGLE


def collect(db: Database, run_id: str, run_dir: Optional[str] = None) -> OptimizeResult:
    run = repo.get_run(db, run_id)
    examples = repo.get_examples(db, run_id)
    val = [e for e in examples if e.split == "val"] or [e for e in examples if e.split == "train"]
    position = {e.pk: i for i, e in enumerate(val)}
    accepted = [c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.val_mean is not None]
    full = [c for c in accepted if c.val_count >= len(val)]
    index = {c.id: i for i, c in enumerate(full)}
    evaluations = repo.evaluations_for(db, run_id)
    subscores: dict[str, dict[int, float]] = {c.id: {} for c in full}
    objectives: dict[str, dict[str, list[float]]] = {c.id: {} for c in full}
    for ev in evaluations:
        if ev.candidate_id in index and ev.example_pk in position:
            subscores[ev.candidate_id][position[ev.example_pk]] = ev.score
            for name, value in ((ev.side_info or {}).get("scores") or {}).items():
                objectives[ev.candidate_id].setdefault(name, []).append(float(value))
    single = not isinstance(run.config.get("seed_candidate"), dict)
    front = compute_frontier(subscores, [c.id for c in full if not c.vetoed])
    per_objective = [{k: math.fsum(v) / len(v) for k, v in objectives[c.id].items()} for c in full]
    keys = {i: e.key for i, e in enumerate(val)}
    return OptimizeResult(
        candidates=[_gepa_form(c.content, single) for c in full],
        parents=[[index.get(p) for p in c.parent_ids] or [None] for c in full],
        val_aggregate_scores=[c.val_mean for c in full], val_subscores=[subscores[c.id] for c in full],
        per_val_instance_best_candidates={k: {index[c] for c in front.holders[k]} for k in sorted(front.best)},
        discovery_eval_counts=_discovery_counts(full, evaluations, examples),
        **_objective_fields(per_objective),
        total_metric_calls=run.metric_calls, num_full_val_evals=len(full), run_dir=run_dir,
        seed=(run.config.get("search") or {}).get("seed", 0), _str_candidate_key=STR_CANDIDATE_KEY if single else None,
        chosen_idx=index.get(run.best_candidate_id), run_id=run_id, status=run.status,
        status_reason=run.status_reason, test_score=run.test_mean, cost_usd=run.cost_usd, url=studio_url(run_id),
        frontier={keys[k]: {"best_score": front.best[k], "candidates": sorted(index[c] for c in front.holders[k])}
                  for k in sorted(front.best)},
        partially_validated=[{"candidate": _gepa_form(c.content, single), "val_mean": c.val_mean,
                              "val_count": c.val_count} for c in accepted if c.id not in index])


def _gepa_form(content: dict, single: bool) -> dict:
    return {STR_CANDIDATE_KEY: content[SINGLE]} if single else dict(content)


def _objective_fields(per_objective: list[dict[str, float]]) -> dict:
    """GEPA's objective fields: each candidate's mean per objective, who is best on each, and the
    best mean; all None when the evaluator reports no objectives."""
    if not any(per_objective):
        return {}
    best: dict[str, float] = {}
    for scores in per_objective:
        for name, value in scores.items():
            best[name] = max(best.get(name, value), value)
    holders = {name: {i for i, scores in enumerate(per_objective) if scores.get(name) == top}
               for name, top in best.items()}
    return {"val_aggregate_subscores": per_objective, "per_objective_best_candidates": holders,
            "objective_pareto_front": best}


def _discovery_counts(cands: list, evaluations: list, examples: list) -> list[int]:
    """Metric calls spent before each candidate was made (GEPA's ``discovery_eval_counts``)."""
    test = {e.pk for e in examples if e.split == "test"}
    paid = sorted(ev.created_at for ev in evaluations if not ev.cached and ev.example_pk not in test)
    return [bisect.bisect_left(paid, c.created_at) for c in cands]
