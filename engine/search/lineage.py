"""Lineage: which candidates a candidate descends from (its parents, their parents, …)."""

from __future__ import annotations

from storage.models import Candidate


def ancestors(cands: dict[str, Candidate], cid: str) -> set[str]:
    """Every candidate ``cid`` descends from, among ``cands`` (``cid`` itself excluded).
    Parents missing from ``cands`` end that branch of the walk."""
    seen: set[str] = set()
    stack = list(cands[cid].parent_ids) if cid in cands else []
    while stack:
        p = stack.pop()
        if p not in seen and p in cands:
            seen.add(p)
            stack.extend(cands[p].parent_ids)
    return seen
