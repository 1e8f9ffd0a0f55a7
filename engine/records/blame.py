"""Provenance ("blame") of a candidate's text: for every line, the candidate that introduced it.

A line of a candidate is inherited when it matches a line of one of its parents (the same
component, aligned by ``difflib.SequenceMatcher`` so that moved or repeated lines keep their
place); it then carries that parent line's provenance. A line no parent has was written by the
candidate itself: by its reflection, its merge, a person's edit, or the seed. Parents are tried
in their stored order, so a line that two merged parents share is credited to the first.

Contract: ``blame`` reads the run through ``storage.explain_queries`` only; it raises
``NotFound`` for an unknown run or a candidate of another run, and ``ValueError`` for a run
with no candidate to blame. The result is a list of ``Line`` dicts in component order, then
line order (line numbers count from 1).
"""

from __future__ import annotations

import difflib
from typing import Optional, TypedDict

from storage.db import Database
from storage.errors import NotFound
from storage.explain_queries import run_lineage


class Line(TypedDict):
    component: str
    line_no: int
    text: str
    candidate_id: str  # who introduced the line
    step: int  # the step that candidate was made in
    origin: str  # seed | reflection | merge | human: how that candidate was written


def blame(db: Database, run_id: str, candidate_id: Optional[str] = None) -> list[Line]:
    """The provenance of every line of ``candidate_id`` (the run's best candidate by default)."""
    lineage = run_lineage(db, run_id)
    if lineage is None:
        raise NotFound(f"run {run_id!r} not found (see `python -m engine status` for the runs)")
    cands = lineage["candidates"]
    target = candidate_id or lineage["best_candidate_id"]
    if target is None:
        raise ValueError(f"run {run_id} has no validated candidate yet; name one: "
                         f"`python -m engine blame {run_id} CANDIDATE`")
    if target not in cands:
        raise NotFound(f"candidate {target!r} is not in run {run_id}")
    return blame_in(cands, target)


def blame_in(cands: dict[str, dict], target: str) -> list[Line]:
    """``blame`` over candidates already read ({id: {content, parent_ids, step, origin}})."""
    memo: dict[str, dict[str, list[Line]]] = {}
    for cid in _ancestors_first(cands, target):
        memo[cid] = _own_lines(cands[cid], [memo[p] for p in cands[cid]["parent_ids"] if p in memo])
    return [line for component in memo[target].values() for line in component]


def _ancestors_first(cands: dict[str, dict], target: str) -> list[str]:
    """``target`` and its ancestors, every parent before its children (no recursion: lineages
    can be thousands of candidates deep)."""
    order, seen, stack = [], set(), [(target, False)]
    while stack:
        cid, expanded = stack.pop()
        if expanded:
            order.append(cid)
            continue
        if cid in seen or cid not in cands:
            continue
        seen.add(cid)
        stack.append((cid, True))
        stack.extend((p, False) for p in reversed(cands[cid]["parent_ids"] or []) if p not in seen)
    return order


def _own_lines(cand: dict, parents: list[dict[str, list[Line]]]) -> dict[str, list[Line]]:
    out: dict[str, list[Line]] = {}
    for component, text in (cand["content"] or {}).items():
        lines = str(text).splitlines()
        found: list[Optional[Line]] = [None] * len(lines)
        for parent in parents:
            old = parent.get(component, [])
            matcher = difflib.SequenceMatcher(None, [ln["text"] for ln in old], lines, autojunk=False)
            for block in matcher.get_matching_blocks():
                for j in range(block.size):
                    if found[block.b + j] is None:
                        found[block.b + j] = old[block.a + j]
        out[component] = [
            Line(component=component, line_no=n + 1, text=line,
                 candidate_id=(src or {}).get("candidate_id", cand["id"]), step=(src or {}).get("step", cand["step"]),
                 origin=(src or {}).get("origin", cand["origin"]))
            for n, (line, src) in enumerate(zip(lines, found))]
    return out


def format_text(lines: list[Line]) -> str:
    """Blame as text, one line per line of the candidate: who wrote it, then the line."""
    out, component = [], None
    for ln in lines:
        if ln["component"] != component:
            component = ln["component"]
            out.append(f"== {component}")
        out.append(f"{ln['candidate_id']:<14} step {ln['step']:>3} {ln['origin']:<10} {ln['line_no']:>4} | {ln['text']}")
    return "\n".join(out)
