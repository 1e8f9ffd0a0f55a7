"""The asynchronous schedule's re-basing (``merge_siblings``): improving children are merged
into the current best, and their merge is validated instead of each child.

An improving child joins a queue. A turn takes the queue when it is ready (see ``OntoBest``)
and merges every waiting child with the best in ONE merge over their nearest common validated
ancestor (``engine.search.sibling_merge.combine``: the line-level three-way merge, the
reflection LM only for a real conflict), so one validation pass carries several fixes, as a
synchronous step's sibling merge does, without a barrier. One turn runs at a time: a
validation pass already keeps every worker busy, and a child merged while another merge was
being validated would fork the old best instead of building on the new one.

A proposal never waits for a turn: its thread queues its child and, when the queue is not
ready or someone else holds the turn, finishes, so the next proposal starts. Whoever holds the
turn keeps taking the queue while it is ready.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from storage.models import Candidate

from engine.context import RunContext
from engine.search.lineage import ancestors
from engine.search.sibling_merge import MAX_SIBLINGS, Sibling, combine, sibling_from_minibatch, sibling_from_validation
from engine.state import deterministic_id
from engine.search.validation import reject, validate_child


QUORUM = 2  # children waiting that start a turn (see OntoBest)


class OntoBest:
    """The queue of improving children and the one turn to merge and validate them.

    A turn takes the queue once it holds ``quorum`` children, or its oldest child has waited
    ``max_wait()`` seconds, or no other proposal is still on its way to a decision (so the last
    ones are never left behind). The schedule uses ``QUORUM`` and half a proposal's measured duration: in
    an 8-seed trial on the batching benchmark's task (a loaded machine, so a hint rather than a
    measurement) a quorum of 2 reached the 1×1 quality on 5 seeds, 1 (each child validated at
    once) and 3 on 4; a child seldom waits long, as the proposals in flight finish in turn."""

    def __init__(self, quorum: int, max_wait: Callable[[], float]) -> None:
        self.quorum, self.max_wait = max(1, quorum), max_wait
        self._queue: list[tuple[str, float]] = []
        self._lock = threading.Lock()  # guards the queue and the count below
        self._undecided = 0  # proposals started whose child is not yet offered or dropped
        self._turn = threading.Lock()

    def started(self) -> None:
        """A proposal started: its child may still join the queue."""
        with self._lock:
            self._undecided += 1

    def waiting(self) -> int:
        """Children queued for a turn (each turn validates up to MAX_SIBLINGS − 1 of them as one)."""
        with self._lock:
            return len(self._queue)

    def decided(self, pctx: RunContext, child_id: Optional[str], step: int,
                made: Callable[[Candidate], None]) -> list[str]:
        """A proposal's child is decided: ``child_id`` improved on its minibatch (it joins the
        queue), or None (it did not). Then, if the queue is ready and nobody is validating,
        take turns until it is not. Returns what this call validated (merges, or children
        validated as themselves); ``made`` is called with every merge written."""
        with self._lock:
            self._undecided -= 1
            if child_id is not None:
                self._queue.append((child_id, time.monotonic()))
        validated: list[str] = []
        while self._turn.acquire(blocking=False):
            try:
                while batch := self._take(pctx.interrupt.is_set()):
                    validated += self._onto_best(pctx, batch, step, made)
            finally:
                self._turn.release()
            if not self._ready(pctx.interrupt.is_set()):  # else it became ready as the turn was given back
                break
        return validated

    def _ready(self, hurry: bool) -> bool:
        with self._lock:
            q = self._queue
            return bool(q) and (hurry or len(q) >= self.quorum or self._undecided == 0
                                or time.monotonic() - q[0][1] >= self.max_wait())

    def _take(self, hurry: bool) -> list[str]:
        if not self._ready(hurry):
            return []
        with self._lock:
            batch, self._queue = self._queue[: MAX_SIBLINGS - 1], self._queue[MAX_SIBLINGS - 1:]
        return [cid for cid, _ in batch]

    def _onto_best(self, pctx: RunContext, batch: list[str], step: int,
                   made: Callable[[Candidate], None]) -> list[str]:
        """Validate, for the children in ``batch``, their merge with the best, or (when the merge
        is not possible or lost a gain) each child in turn, alone with the best; returns what was
        validated. Each merge is written over the best as it is once the pass before it ended:
        the children of a failed merge are merged and validated one by one, not merged first
        (over a best that the first one's pass may replace) and validated after."""
        sibs = [s for s in (sibling_from_minibatch(pctx, c) for c in batch) if s is not None]
        group = with_best(pctx, sibs)
        if group is None:  # each child builds on the best already, or has no common base with it
            return _validated(pctx, [s.cand.id for s in sibs])
        siblings, best_id = group
        if len(siblings) < 2:
            return _validated(pctx, [s.cand.id for s in sibs])
        merge_id = deterministic_id(pctx.run_id, step, *sorted(s.cand.id for s in siblings), "merge")
        chosen = combine(pctx, siblings, merge_id, step)
        merged = pctx.state.candidates.get(merge_id)
        if merged is not None:
            made(merged)
        children = [s.cand.id for s in sibs]
        if chosen is None:
            if len(children) > 1:  # one of them lost its gain in the merge: each alone, then
                return [c for cid in children for c in self._onto_best(pctx, [cid], step, made)]
            return _validated(pctx, children)
        for cid in children:
            if cid == chosen:
                continue
            if chosen == best_id:
                reject(pctx, cid, f"improved on its minibatch; the best, {best_id}, already holds its changes")
            else:
                reject(pctx, cid, f"improved on its minibatch; re-based onto the best {best_id} as the merge "
                                  f"{chosen}, which was validated instead")
        return [] if chosen == best_id else _validated(pctx, [chosen])


def _validated(pctx: RunContext, ids: list[str]) -> list[str]:
    for cid in ids:
        validate_child(pctx, cid)
    return ids


def with_best(pctx: RunContext, sibs: list[Sibling]) -> Optional[tuple[list[Sibling], Optional[str]]]:
    """The children ``sibs`` and the current best as versions over their nearest common validated
    ancestor, ready to combine, and the best's id (the best itself is not one of the versions
    when it is that ancestor: every child builds on it). None when there is nothing to merge: a lone child building on the
    best, no common ancestor, or the best's lineage holding a child's."""
    state, cands = pctx.state, pctx.state.candidates
    best_id, _ = state.best()
    if best_id is None or not sibs:
        return None
    with state.lock:
        lines = {s.cand.id: ancestors(cands, s.cand.id) | {s.cand.id} for s in sibs}
        theirs = ancestors(cands, best_id) | {best_id}
        if any(c in theirs for c in lines):
            return None
        common = set.intersection(theirs, *lines.values()) & state.full
        if not common:
            return None
        base_id = max(sorted(common), key=lambda c: len(ancestors(cands, c)))  # the nearest
    # each child's gains stay those over its own parent; the merge is written over the common base
    children = [Sibling(s.cand, cands[base_id], s.scores, s.parent_results) for s in sibs]
    if base_id == best_id:
        return (children, best_id) if len(children) > 1 else None
    best = sibling_from_validation(pctx, best_id, base_id)
    if best is None:
        return None
    return [best] + children, best_id
