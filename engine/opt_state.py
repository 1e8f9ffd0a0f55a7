"""What an evaluator's ``opt_state`` holds: GEPA's ``best_example_evals``.

For each example, the best ``k`` evaluations made so far in this engine process (any candidate),
best first, as ``{"score", "side_info"}`` — what GEPA's optimize_anything adapter keeps. Like
GEPA's, it lives in memory: a resumed run starts it again from its next evaluations.
"""

from __future__ import annotations

import threading
from typing import Optional


class BestEvals:
    def __init__(self, k: int) -> None:
        self.k = k
        self._by_example: dict[str, list[dict]] = {}
        self._lock = threading.Lock()

    def get(self, example_key: str) -> Optional[list[dict]]:
        """A copy of the example's best evaluations (None when opt_state is not used)."""
        if self.k <= 0:
            return None
        with self._lock:
            return list(self._by_example.get(example_key, []))

    def add(self, example_key: str, score: float, side_info: dict) -> None:
        if self.k <= 0:
            return
        with self._lock:
            kept = self._by_example.setdefault(example_key, [])
            kept.append({"score": score, "side_info": side_info})
            kept.sort(key=lambda e: -e["score"])  # stable: among equal scores the earlier first
            del kept[self.k:]
