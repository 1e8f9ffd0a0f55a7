"""GEPA's four frontier types (``[search] frontier``), as one keyed frontier.

Each frontier entry is keyed by ``(example key, objective)``, one of them None:

- ``instance``: one entry per validation example (``(key, None)``), the score on it;
- ``objective``: one entry per objective of ``side_info["scores"]`` (``(None, name)``), the
  candidate's mean of that objective over the validation examples it was evaluated on;
- ``hybrid`` (GEPA's default for optimize_anything): both; without objectives it is ``instance``;
- ``cartesian``: one entry per (example, objective) pair, that objective's value on that example.

The entries are then handled exactly like examples in ``engine.search.frontier``: who holds the best
value, dominance pruning, and sampling by the number of entries a candidate holds.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional

from engine.search.frontier import Frontier, compute_frontier, mean

FRONTIER_TYPES = ("instance", "objective", "hybrid", "cartesian")
NOUNS = {"instance": "example(s)", "objective": "objective(s)", "hybrid": "example(s) or objective(s)",
         "cartesian": "example-objective pair(s)"}
Objectives = Mapping[str, Mapping[str, Mapping[str, float]]]  # candidate id -> example key -> name -> value


def objective_scores(side_info: Any) -> dict[str, float]:
    """The objectives an evaluation reported in ``side_info["scores"]`` (finite numbers only)."""
    scores = side_info.get("scores") if isinstance(side_info, dict) else None
    if not isinstance(scores, dict):
        return {}
    return {str(k): float(v) for k, v in scores.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def extra_entries(objectives: Mapping[str, Mapping[str, float]], frontier_type: str) -> dict[tuple[Optional[str], Optional[str]], float]:
    """A candidate's entries beyond its per-example scores: its mean of each objective
    (``objective``, ``hybrid``) or each (example, objective) value (``cartesian``), as
    ``_entries`` adds them to the per-example scores (``engine.search.kept_frontier`` keeps them apart)."""
    out: dict[tuple[Optional[str], Optional[str]], float] = {}
    if frontier_type in ("objective", "hybrid"):
        totals: dict[str, list[float]] = {}
        for per_example in objectives.values():
            for name, v in per_example.items():
                totals.setdefault(name, []).append(v)
        out.update({(None, name): mean(vs) for name, vs in totals.items()})
    if frontier_type == "cartesian":
        out.update({(k, name): v for k, per in objectives.items() for name, v in per.items()})
    return out


def _entries(scores: Mapping[str, float], objectives: Mapping[str, Mapping[str, float]],
             frontier_type: str) -> dict[tuple[Optional[str], Optional[str]], float]:
    out: dict = {}
    if frontier_type in ("instance", "hybrid"):
        out.update({(k, None): v for k, v in scores.items()})
    out.update(extra_entries(objectives, frontier_type))
    return out


def typed_frontier(scores: Mapping[str, Mapping[str, float]], objectives: Objectives, frontier_type: str,
                   eligible: Iterable[str] | None = None) -> Frontier:
    """The frontier of ``frontier_type`` over the candidates of ``scores`` (or ``eligible``)."""
    table = {cid: _entries(per, objectives.get(cid, {}), frontier_type) for cid, per in scores.items()}
    return compute_frontier(table, eligible)


def missing_objectives(frontier_type: str, objectives: Objectives) -> Optional[str]:
    """Why an ``objective`` or ``cartesian`` frontier cannot work (no objectives reported), or None."""
    if frontier_type in ("objective", "cartesian") and not any(per for c in objectives.values() for per in c.values()):
        return (f"search.frontier: {frontier_type!r} needs objectives, but the seed's evaluations have no "
                "side_info[\"scores\"]; return side_info[\"scores\"] = {\"name\": number, …} from evaluate(), "
                "or use frontier = \"instance\" or \"hybrid\"")
    return None


def frontier_entries(front: Frontier, val_keys: list[str]) -> list[dict]:
    """The export's ``frontier`` list: each entry names its ``example_id`` and/or ``objective``."""
    order = {k: i for i, k in enumerate(val_keys)}
    keys = sorted(front.best, key=lambda e: (order.get(e[0], len(order)) if e[0] is not None else -1, e[1] or ""))
    out = []
    for example, objective in keys:
        entry: dict = {}
        if example is not None:
            entry["example_id"] = example
        if objective is not None:
            entry["objective"] = objective
        entry.update(best_score=front.best[(example, objective)],
                     candidate_ids=sorted(front.holders[(example, objective)]))
        out.append(entry)
    return out
