"""Budgets checked before every dispatch, so a run stops where its budget says.

Metric calls are *reserved* before an evaluation is dispatched and released if it turns out to
be cached or is never run; so concurrent proposals can never together exceed
``max_metric_calls``. A proposal may also reserve a *block* of metric calls up front
(``reserve_block``); the evaluations then dispatched from the thread ``drawing_from`` that
block use it first, so a proposal is only started when the calls to test and validate it are
there, and what it does not use goes back at the end.

Dollars cannot be reserved exactly (an LM call's cost is known only afterwards): ``may_call_lm``
reserves 1.5 × the cost of the most expensive call *of the same purpose* seen so far (a task LM
call from an evaluator may cost a hundredth of a reflection: one price for both would let the
first reflections through on the task calls' price), and the ``add_cost`` of the same thread
settles that reservation with the real cost. So concurrent LM calls together stay under
``max_cost_usd`` unless calls grow by more than half at once. Until a purpose's first call is
priced, only one call of that purpose at a time may be in flight when a dollar cap is set, and
it reserves the largest estimate known for any purpose. The wall-clock budget
counts only time the run was active; nothing starts that the time left cannot finish, judged by
the durations observed in this session (``note_duration``: a step, or an asynchronous
proposal), and the work in flight at the limit is cut (``engine.interrupt``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from engine.config import BudgetConfig


# An LM call is assumed to cost up to this multiple of the most expensive call so far (prompts
# grow as candidates and feedback grow): concurrent calls then stay under the dollar cap.
LM_COST_MARGIN = 1.5
# The next unit of work is assumed to take up to this multiple of the recent ones' mean: units of
# equal work vary by a few percent (more on a busy machine), and a run whose time budget is close
# to a whole number of units otherwise started the last one and had it cut at the limit.
TIME_MARGIN = 1.2
# With a free reflection LM (the built-in local model) a step starts when half of one fits in the
# time left: a step cut at the limit costs nothing but CPU time, time left unused is lost for sure,
# and one step can take twice another (a retried reflection is a second whole call). Runs of 240 s
# with ~100 s steps otherwise stopped with 87-125 s unused (docs/benchmarks-real-lm.md).
FREE_LM_MIN_SHARE = 0.5


class Block:
    """Metric calls reserved for one piece of work: ``left`` unused, ``drawn`` dispatched."""

    def __init__(self, budget: "Budget", calls: int) -> None:
        self.budget, self.left, self.drawn = budget, calls, 0


class Budget:
    def __init__(self, cfg: BudgetConfig, metric_calls: int, cost_usd: float, seconds_before: float) -> None:
        self.cfg = cfg
        self._lock = threading.Condition()
        self.metric_calls = metric_calls  # charged so far, from the database
        self.reserved = 0  # dispatched but not settled, plus the unused part of every block
        self.cost_usd = cost_usd
        self._max_cost: dict[str, float] = {}  # purpose -> the most expensive settled call
        self._lm_reserved: dict[int, tuple[str, float]] = {}  # thread id -> (purpose, dollars reserved)
        self._blocks: dict[int, Block] = {}  # thread id -> the block its evaluations draw from
        self._started = time.monotonic()
        self._seconds_before = seconds_before
        self._durations: list[float] = []  # observed seconds of the units of work started
        self._unit = "step"

    def update_limits(self, cfg: BudgetConfig) -> None:
        with self._lock:
            self.cfg = cfg
            self._lock.notify_all()

    @property
    def seconds(self) -> float:
        return self._seconds_before + time.monotonic() - self._started

    def out_of_time(self) -> bool:
        return self.cfg.max_seconds is not None and self.seconds >= self.cfg.max_seconds

    def note_duration(self, seconds: float, unit: str = "step") -> None:
        """The observed duration of one unit of work the schedule starts (a synchronous
        ``step``, an asynchronous ``proposal``)."""
        with self._lock:
            self._durations.append(seconds)
            self._unit = unit

    def expected_duration(self) -> Optional[float]:
        """The mean of the last five observed durations; None before the first."""
        with self._lock:
            recent = self._durations[-5:]
        return sum(recent) / len(recent) if recent else None

    def time_share_left(self) -> Optional[float]:
        """How many units of work the time left can pay, as a share of the mean of the last five
        observed durations with ``TIME_MARGIN`` on top; None without a time cap or before the
        first unit. The mean, not the slowest: time left unused is lost for sure, a unit cut at
        the limit only maybe (a local-model run of 1x1 steps, sized by its slowest step, stopped
        with 87 s of its 240 s unused)."""
        cap = self.cfg.max_seconds
        with self._lock:
            recent = self._durations[-5:]
        if cap is None or not recent:
            return None
        return max(0.0, cap - self.seconds) / (sum(recent) / len(recent) * TIME_MARGIN)

    def time_too_short(self, min_share: float = 1.0) -> Optional[str]:
        """Why the time left cannot pay ``min_share`` of another unit of work, or None. A
        synchronous step may be shrunk to the slots the time left pays (``min_share`` is then
        one slot's share of a step): a run whose steps took a minute otherwise stopped with a
        third of its time unused."""
        share = self.time_share_left()
        if share is None or share >= min_share:
            return None
        expected = self.expected_duration()
        what = self._unit if min_share >= 1 else f"{self._unit}, not even one proposal of it"
        return (f"time budget: {max(0.0, self.cfg.max_seconds - self.seconds):.0f} s of {self.cfg.max_seconds:.0f} s "
                f"left, too few for another {what} (a {self._unit} takes about {expected * TIME_MARGIN:.0f} s: "
                f"the mean of the last five, {expected:.1f} s, and a margin)")

    # -- metric calls ----------------------------------------------------------------------

    def remaining_metric_calls(self) -> Optional[int]:
        """Metric calls neither charged nor reserved (None when there is no cap)."""
        with self._lock:
            cap = self.cfg.max_metric_calls
            return None if cap is None else cap - self.metric_calls - self.reserved

    def affords_metric_calls(self, calls: int) -> bool:
        """Whether this thread could dispatch ``calls`` more metric calls now: what is left of
        its block and what nobody has reserved."""
        with self._lock:
            cap = self.cfg.max_metric_calls
            if cap is None:
                return True
            block = self._blocks.get(threading.get_ident())
            return (block.left if block else 0) + cap - self.metric_calls - self.reserved >= calls

    def reserve_metric_call(self) -> bool:
        with self._lock:
            block = self._blocks.get(threading.get_ident())
            if block is not None and block.left > 0:
                if self._out_of_time_or_money():
                    return False
                block.left -= 1  # already counted in ``reserved``
                block.drawn += 1
                return True
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

    def reserve_block(self, calls: int, at_least: Optional[int] = None, keep_free: int = 0) -> Optional["Block"]:
        """Reserve ``calls`` metric calls (or, if fewer are left, all that are left as long as
        that is ``at_least``) for work that one thread will do, leaving ``keep_free`` calls
        unreserved for work that draws from no block; None when not available."""
        with self._lock:
            cap = self.cfg.max_metric_calls
            n = calls if cap is None else min(calls, cap - self.metric_calls - self.reserved - keep_free)
            if n < (calls if at_least is None else at_least) or self._out_of_time_or_money():
                return None
            self.reserved += n
            return Block(self, n)

    @contextmanager
    def drawing_from(self, block: "Block") -> Iterator["Block"]:
        """Evaluations dispatched from this thread draw from ``block`` first; what is left of
        it is released on exit."""
        me = threading.get_ident()
        with self._lock:
            self._blocks[me] = block
        try:
            yield block
        finally:
            with self._lock:
                self._blocks.pop(me, None)
                self.reserved -= block.left
                block.left = 0

    # -- dollars -----------------------------------------------------------------------------

    @property
    def max_call_cost(self) -> float:
        """The most expensive LM call settled so far, of any purpose."""
        return max(self._max_cost.values(), default=0.0)

    def may_call_lm(self, purpose: str = "reflection") -> bool:
        """Reserve this thread's next LM call (for ``purpose``: reflection, merge, task, …)
        against the dollar and time budgets (False: refuse it). The same thread's ``add_cost``
        settles the reservation."""
        with self._lock:
            me = threading.get_ident()
            if self.cfg.max_cost_usd is not None:
                # the price of this purpose is unknown until one call has been settled: one at a time until then
                while purpose not in self._max_cost and self._unpriced_in_flight(purpose, me):
                    self._lock.wait(timeout=1.0)
            estimate = self._max_cost.get(purpose, self.max_call_cost) * LM_COST_MARGIN
            if self._out_of_time_or_money(extra=estimate):
                return False
            self._lm_reserved[me] = (purpose, estimate)
            return True

    def _unpriced_in_flight(self, purpose: str, me: int) -> bool:
        return any(p == purpose for t, (p, _) in self._lm_reserved.items() if t != me)

    def affordable_lm_calls(self) -> Optional[int]:
        """How many more reflection-LM calls the dollar budget allows at their current estimate,
        counting the calls in flight (None: no dollar cap, or no reflection priced yet)."""
        with self._lock:
            if self.cfg.max_cost_usd is None or "reflection" not in self._max_cost:
                return None
            left = self.cfg.max_cost_usd - self.cost_usd - self._reserved_dollars()
            estimate = self._max_cost["reflection"] * LM_COST_MARGIN
            return max(0, int(left // estimate)) if estimate > 0 else None

    def add_cost(self, usd: float, purpose: str = "reflection") -> None:
        """Settle this thread's reservation (its purpose wins over ``purpose``) with the real cost."""
        with self._lock:
            reserved = self._lm_reserved.pop(threading.get_ident(), None)
            purpose = reserved[0] if reserved else purpose
            self.cost_usd += usd
            self._max_cost[purpose] = max(self._max_cost.get(purpose, 0.0), usd)
            self._lock.notify_all()

    def _reserved_dollars(self) -> float:
        return sum(d for _, d in self._lm_reserved.values())

    def _out_of_time_or_money(self, extra: float = 0.0) -> bool:
        if self.cfg.max_cost_usd is not None:
            if self.cost_usd + self._reserved_dollars() + extra > self.cfg.max_cost_usd:
                return True
        return self.out_of_time()

    # -- stopping ----------------------------------------------------------------------------

    def overshoot(self) -> tuple[int, float]:
        """(metric calls, dollars) spent beyond the caps, for the run's record."""
        with self._lock:
            mc, usd = self.cfg.max_metric_calls, self.cfg.max_cost_usd
            return (max(0, self.metric_calls - mc) if mc is not None else 0,
                    max(0.0, self.cost_usd - usd) if usd is not None else 0.0)

    def _calls_spent(self, min_step_calls: int) -> bool:
        c = self.cfg
        return c.max_metric_calls is not None and self.metric_calls + min_step_calls > c.max_metric_calls

    def _money_spent(self) -> bool:
        c = self.cfg
        return c.max_cost_usd is not None and self.cost_usd + self.max_call_cost * LM_COST_MARGIN > c.max_cost_usd

    def out_of_room(self, min_step_calls: int) -> bool:
        """The metric calls or the dollars are spent (``exhausted`` says so in words)."""
        return self._calls_spent(min_step_calls) or self._money_spent()

    def exhausted(self, best: Optional[float], steps_done: int, min_step_calls: int,
                  min_time_share: float = 1.0) -> Optional[str]:
        """Why the run must stop now, or None. ``min_step_calls`` is the fewest metric calls a
        useful step needs (a parent and a child on a minibatch); ``min_time_share`` the smallest
        share of a unit of work worth starting (``time_too_short``)."""
        c = self.cfg
        if c.stop_at_score is not None and best is not None and best >= c.stop_at_score:
            return f"reached stop_at_score {c.stop_at_score} (best {best:.4g})"
        if self._calls_spent(min_step_calls):
            return (f"metric-call budget spent ({self.metric_calls} of {c.max_metric_calls}; a proposal needs up to "
                    f"{min_step_calls} for its minibatch tests)")
        if self._money_spent():
            return (f"cost budget spent (${self.cost_usd:.4f} of ${c.max_cost_usd}; one more LM call may cost up to "
                    f"${self.max_call_cost * LM_COST_MARGIN:.4f})")
        if self.out_of_time():
            return f"time budget spent ({self.seconds:.0f} s of {c.max_seconds:.0f} s)"
        too_short = self.time_too_short(min_time_share)
        if too_short:
            return too_short
        if c.max_steps is not None and steps_done >= c.max_steps:
            return f"step budget spent ({steps_done} of {c.max_steps})"
        return None
