"""What one step did, phase by phase, computed from the stored facts of the step
(``storage.explain_queries.step_detail``): plain data for the explain page, no Streamlit.

The frontier "before" the step is the per-example best validation score among the candidates
accepted in earlier steps; "after" adds the ones accepted in this step (human edits applied at
its start included). The runtime model is ``engine.runtime.model`` itself, fed with this
step's measured latencies (its timeline events), as the engine does for its speed-up figures.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Optional

from engine.lm.providers import is_local
from engine.config import ConfigWarning, SearchConfig
from engine.runtime.model import Latencies, Shape, latencies_of_events, shape_of, slowest_lm, sync_step


def _val_split(detail: dict) -> str:
    return "val" if any(e["split"] == "val" for e in detail["examples"]) else "train"


def frontier_at(detail: dict, last_step: int, products: bool = True) -> dict:
    """{"best": {example: score}, "holders": {example: [ids]}, "members": [ids], "best_mean": (id, mean),
    "below_seed": {id: (mean, seed's mean)}}
    over the accepted, non-vetoed candidates made up to ``last_step``; with ``products=False``,
    without what step ``last_step`` itself proposed (its seed and the people's edits applied at
    its start stay: they were there when it began)."""
    cands, split = detail["candidates"], _val_split(detail)
    alive = {cid for cid, c in cands.items() if c["status"] == "accepted" and not c["vetoed"] and
             (c["step"] < last_step or c["step"] == last_step and (products or c["origin"] in ("seed", "human")))}
    best: dict[str, float] = {}
    holders: dict[str, list[str]] = {}
    scores: dict[str, dict[str, float]] = {}
    for e in detail["evaluations"]:
        if e["candidate_id"] not in alive or e["split"] != split:
            continue
        key, score = e["example"], e["score"]
        scores.setdefault(e["candidate_id"], {})[key] = score
        if key not in best or score > best[key] + 1e-9:
            best[key], holders[key] = score, [e["candidate_id"]]
        elif abs(score - best[key]) <= 1e-9:
            holders[key].append(e["candidate_id"])
    members = sorted({c for ids in holders.values() for c in ids}, key=lambda c: (-sum(c in h for h in holders.values()), c))
    means = [(cands[c]["val_mean"], c) for c in alive if cands[c]["val_mean"] is not None]
    top = max(means) if means else None
    return {"best": best, "holders": holders, "members": members, "best_mean": (top[1], top[0]) if top else None,
            "below_seed": below_seed(scores, cands)}


def parent_minibatches(detail: dict) -> list[dict]:
    """Per parent: {id, reason, keys, rows [{example, score, side_info, error}]} — the examples its
    children were tested on (the parent's minibatch) and what the parent scored on them."""
    step, cands = detail["step"], detail["candidates"]
    out, seen = [], Counter()
    for pid in step["parent_ids"]:
        # a parent may fill several slots, each with its own minibatch: the j-th slot's is the
        # j-th distinct minibatch among its children
        kids = [cands[c] for c in step["proposal_ids"] if c in cands and cands[c]["parent_ids"] == [pid]]
        batches = list(dict.fromkeys(tuple(k["minibatch_keys"]) for k in kids if k["minibatch_keys"]))
        keys = list(batches[min(seen[pid], len(batches) - 1)]) if batches else []
        drawn = next((k["minibatch_reason"] for k in kids if tuple(k["minibatch_keys"] or ()) == tuple(keys)
                      and k.get("minibatch_reason")), "")
        seen[pid] += 1
        scored = {e["example"]: e for e in detail["evaluations"] if e["candidate_id"] == pid and e["split"] != "test"}
        rows = [{"example": k, "score": scored[k]["score"] if k in scored else None,
                 "side_info": scored[k]["side_info"] if k in scored else {},
                 "error": scored[k]["error"] if k in scored else None} for k in keys]
        out.append({"id": pid, "reason": step["parent_reasons"].get(pid, ""), "keys": keys, "rows": rows,
                    "drawn": drawn})
    return out


def below_seed(before_scores: dict, cands: dict) -> dict:
    """Candidates the step could not choose as parents because their validation mean was below
    the seed's (the engine's rule, ``engine.search.selection.below_seed``): id -> (mean, seed's)."""
    from engine.search.selection import below_seed as rule

    seed = next((c for c in cands.values() if c["origin"] == "seed" and c["id"] in before_scores), None)
    return rule(before_scores, before_scores[seed["id"]]) if seed else {}


def proposals(detail: dict) -> list[dict]:
    """Every child of the step with its parent(s), reflection call, minibatch scores and fate."""
    step, cands, calls = detail["step"], detail["candidates"], detail["lm_calls"]
    out = []
    for cid in step["proposal_ids"]:
        c = cands.get(cid)
        if c is None:
            continue
        # improved on its minibatch (stored when it was tested), or validated all the same (pinned)
        improved = c["improved"] or c["status"] == "accepted"
        out.append({**c, "lm_call": calls.get(c["lm_call_id"]), "improved": improved,
                    "validated": cid in step["accepted_ids"],
                    "parents": [cands[p] for p in c["parent_ids"] if p in cands]})
    return out


def humans(detail: dict) -> list[dict]:
    """Candidates people made with a command applied at the start of this step."""
    n = detail["step"]["index"]
    return [c for c in detail["candidates"].values() if c["origin"] == "human" and c["step"] == n]


def step_latencies(detail: dict, config: dict) -> Optional[Latencies]:
    """This step's measured latencies, in the runtime model's terms (None without LM and evaluation events)."""
    events, search = detail["step"]["events"] or [], config.get("search") or {}
    kids = proposals(detail)
    tested = [p for p in kids if p["minibatch_score"] is not None]
    accept = sum(p["improved"] for p in tested) / len(tested) if tested else None
    n_val = sum(1 for e in detail["examples"] if e["split"] == _val_split(detail))
    return latencies_of_events(events, accept, int(search.get("minibatch_size", 3)), n_val,
                               int((config.get("executor") or {}).get("workers", 1)))


def shape_from(config: dict) -> Shape:
    """The Shape of a stored config, read as the engine reads it (``engine.runtime.model.shape_of``;
    a stored search section holds every value the run used, so no default of this page's own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)  # the run's page is no place to warn about its config
        return shape_of(SearchConfig.model_validate(config.get("search") or {}))


def reflections_note(config: dict) -> str:
    """How a step's K reflections share the LM's time, for the runtime panel: at once with a
    hosted LM; one after the other with the built-in local model, which serves one request at a
    time (its later siblings reuse the prompt the first one processed)."""
    if is_local((config.get("reflection_lm") or {}).get("model", "")):
        return ("This run's reflection LM is the built-in local model, which answers one request at a time: a "
                "step's K reflections queue, and each call's measured LM time includes its wait. Siblings share "
                "their prompt, so the later ones cost little more than their answer; batching saves less here "
                "than with a hosted LM, which answers the K at once.")
    return ("The K reflections of a step run at the same time, so the LM wait is paid once per step, not K "
            "times: that is why batching helps most when the step is LM-bound.")


def runtime_check(detail: dict, config: dict) -> Optional[dict]:
    """Predicted against measured seconds of this step, and which side bounds it:
    {"predicted", "measured", "lm_seconds", "eval_seconds", "bound", "latencies", "shape"}."""
    lat = step_latencies(detail, config)
    if lat is None:
        return None
    shape = shape_from(config)
    predicted, calls = sync_step(shape, lat)
    # the step waits for the slowest of its reflections (and a conflicting merge's call)
    lm_s = slowest_lm(lat, shape.k) + (lat.merge_lm * lat.lm if shape.merge_siblings and lat.accept * shape.k >= 2 else 0)
    eval_s = max(0.0, predicted - lm_s)
    return {"predicted": predicted, "measured": detail["step"]["seconds"], "calls": calls, "lm_seconds": lm_s,
            "eval_seconds": eval_s, "bound": "LM-bound" if lm_s >= eval_s else "evaluator-bound",
            "latencies": lat, "shape": shape}


def improvement_sentence(search: dict) -> str:
    """How a child *improved*, in the words of the rule the engine used: the run's stored
    ``[search]`` read as the engine reads it (``improvement``, or the old name ``acceptance``)."""
    from engine.config import SearchConfig

    known = {k: v for k, v in (search or {}).items() if k in SearchConfig.model_fields}
    rule = SearchConfig.model_validate(known).improvement
    return (f"A child **improved** when its minibatch total is {'above' if rule == 'strict' else 'at least'} its "
            f"parent's (improvement = {rule}). A child that ties its parent there without losing anything gets a "
            "**second look** when reflections take seconds and evaluations little beside them: both are scored on a "
            "few more training examples (a quarter of a reflection's time at most), and the totals over all of them "
            "decide; a minibatch of three cannot see a fix elsewhere")
