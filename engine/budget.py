"""Budgets checked before every dispatch, so a run stops where its budget says.

Metric calls are *reserved* before an evaluation is dispatched and released if it turns out to
be cached or is never run; so concurrent proposals can never together exceed
``max_metric_calls``. Dollars cannot be reserved exactly (an LM call's cost is known only
afterwards), so an LM call is refused when the spend plus the largest call seen so far would
exceed ``max_cost_usd``. The wall-clock budget counts only time the run was active.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from engine.config import BudgetConfig


class Budget:
    def __init__(self, cfg: BudgetConfig, metric_calls: int, cost_usd: float, seconds_before: float) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self.metric_calls = metric_calls  # charged so far, from the database
        self.reserved = 0
        self.cost_usd = cost_usd
        self.max_call_cost = 0.0
        self._started = time.monotonic()
        self._seconds_before = seconds_before

    def update_limits(self, cfg: BudgetConfig) -> None:
        with self._lock:
            self.cfg = cfg

    @property
    def seconds(self) -> float:
        return self._seconds_before + time.monotonic() - self._started

    def reserve_metric_call(self) -> bool:
        with self._lock:
            cap = self.cfg.max_metric_calls
            if cap is not None and self.metric_calls + self.reserved >= cap:
                return False
            if self._out_of_time_or_money():
                return False
            self.reserved += 1
            return True

    def settle_metric_call(self, charged: bool) -> None:
        with self._lock:
            self.reserved -= 1
            if charged:
                self.metric_calls += 1

    def may_call_lm(self) -> bool:
        with self._lock:
            return not self._out_of_time_or_money(extra=self.max_call_cost)

    def add_cost(self, usd: float) -> None:
        with self._lock:
            self.cost_usd += usd
            self.max_call_cost = max(self.max_call_cost, usd)

    def _out_of_time_or_money(self, extra: float = 0.0) -> bool:
        if self.cfg.max_cost_usd is not None and self.cost_usd + extra > self.cfg.max_cost_usd:
            return True
        return self.cfg.max_seconds is not None and self.seconds >= self.cfg.max_seconds

    def exhausted(self, best: Optional[float], steps_done: int, min_step_calls: int) -> Optional[str]:
        """Why the run must stop now, or None. ``min_step_calls`` is the fewest metric calls a
        useful step needs (a parent and a child on a minibatch)."""
        c = self.cfg
        if c.stop_at_score is not None and best is not None and best >= c.stop_at_score:
            return f"reached stop_at_score {c.stop_at_score} (best {best:.4g})"
        if c.max_metric_calls is not None and self.metric_calls + min_step_calls > c.max_metric_calls:
            return f"metric-call budget spent ({self.metric_calls} of {c.max_metric_calls})"
        if c.max_cost_usd is not None and self.cost_usd >= c.max_cost_usd:
            return f"cost budget spent (${self.cost_usd:.4f} of ${c.max_cost_usd})"
        if c.max_seconds is not None and self.seconds >= c.max_seconds:
            return f"time budget spent ({self.seconds:.0f} s of {c.max_seconds:.0f} s)"
        if c.max_steps is not None and steps_done >= c.max_steps:
            return f"step budget spent ({steps_done} of {c.max_steps})"
        return None
