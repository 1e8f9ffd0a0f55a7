"""The recorded evaluations of a run's recent candidates, kept in memory.

A candidate's evaluation on an example never changes once recorded (unique per candidate and
example), yet the engine asked the database for the same ones again and again: a step read its
parents' minibatch results when it planned its slots, when it drew each slot's minibatch and
again in each slot, and the merge read its siblings' results once more. In a 4-wide step those
reads stood between the step's start and its reflections, and between the children's tests and
the merge (on a busy 2-core machine a read took 1 to 13 ms). ``KnownResults`` answers them for
the candidates it saw last; anything else is read from the database as before.

Bounded: candidates are dropped least recently used first once more than ``limit`` results are
kept (a run's side information can be large).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

LIMIT = 20_000  # results kept over all candidates


class KnownResults:
    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._by_candidate: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
        self._size = 0

    def get(self, candidate_id: str, keys: list[str]) -> dict[str, Any]:
        """The results of ``candidate_id`` known here, of those on ``keys``."""
        with self._lock:
            mine = self._by_candidate.get(candidate_id)
            if not mine:
                return {}
            self._by_candidate.move_to_end(candidate_id)
            return {k: mine[k] for k in keys if k in mine}

    def add(self, candidate_id: str, results: dict[str, Any]) -> None:
        """Results as the database holds them (for a pair recorded twice, the first row)."""
        if not results:
            return
        with self._lock:
            mine = self._by_candidate.setdefault(candidate_id, {})
            self._by_candidate.move_to_end(candidate_id)
            self._size += sum(1 for k in results if k not in mine)
            mine.update(results)
            while self._size > self._limit and len(self._by_candidate) > 1:
                _, dropped = self._by_candidate.popitem(last=False)
                self._size -= len(dropped)
