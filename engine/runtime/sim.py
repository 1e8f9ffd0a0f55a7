"""The runtime model for a whole run: a small discrete-event simulation of the schedule.

Closed forms (``engine.runtime.model``) describe one step; a run also has a budget's tail
(steps trimmed, fewer proposals in flight), asynchronous proposals that queue behind each other's
evaluations, and merges. So the wall-clock of a run is predicted by replaying the engine's
schedule with fixed latencies: the LM takes ``L``, each metric call ``T`` on one of ``W``
workers (minibatch tests ahead of validation passes, as the engine's validation throttle
makes them), proposals pass their minibatch test in the measured proportion ``a`` (spread
evenly, no randomness) and merges keep every gain in the proportion ``merge_pass``.
Engine overhead (database writes, prompt building) is not modelled: the measurement includes it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Callable

MAX_SIBLINGS = 4  # as engine.search.sibling_merge


class _Pattern:
    """``a`` of the calls return True, evenly spread: deterministic 'acceptance'."""

    def __init__(self, a: float) -> None:
        self.a, self.n = a, 0

    def __call__(self) -> bool:
        self.n += 1
        return int(self.n * self.a + 1e-9) > int((self.n - 1) * self.a + 1e-9)


class _Sim:
    def __init__(self, workers: int, t_eval: float) -> None:
        self.now, self.t = 0.0, t_eval
        self._events: list = []
        self._seq = itertools.count()
        self._idle = workers
        self._queues = (deque(), deque())  # minibatch tests, validation passes

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now + delay, next(self._seq), fn))

    def evals(self, n: int, low: bool, done: Callable[[], None]) -> None:
        """Queue ``n`` metric calls; ``done()`` when the last finishes."""
        if n <= 0:
            self.at(0.0, done)
            return
        left = [n]

        def one() -> None:
            left[0] -= 1
            if left[0] == 0:
                done()

        self._queues[1 if low else 0].extend([one] * n)
        self._pump()

    def _pump(self) -> None:
        while self._idle and (self._queues[0] or self._queues[1]):
            cb = (self._queues[0] or self._queues[1]).popleft()
            self._idle -= 1

            def finished(cb=cb) -> None:
                self._idle += 1
                cb()
                self._pump()

            self.at(self.t, finished)

    def run(self) -> float:
        while self._events:
            self.now, _, fn = heapq.heappop(self._events)
            fn()
        return self.now


def simulate_sync(p: int, k: int, accept: str, top_k: int, merge: bool, lat, budget: int) -> tuple[float, int]:
    """(seconds, metric calls) of a synchronous run of P×K steps until the budget is spent."""
    sim, m, v = _Sim(lat.workers, lat.eval), lat.minibatch, lat.n_val
    improves, merges_pass = _Pattern(lat.accept), _Pattern(lat.merge_pass)
    spent = [v]
    limit = {"all": p * k, "best": 1, "top_k": top_k}.get(accept, p * k)

    def step() -> None:
        left = budget - spent[0]
        if left < 2 * m:
            return
        costs = [m + (round(m * lat.parent_eval_share) if s % k == 0 else 0) for s in range(p * k)]
        for room in (left - v, left):  # as engine.schedules.synchronous.plan_slots: room for a validation pass, else the tail
            slots, cost = 0, 0
            while slots < len(costs) and cost + costs[slots] <= room:
                cost += costs[slots]
                slots += 1
            if slots:
                break
        spent[0] += cost
        parents = -(-slots // k)
        sim.evals(round(parents * m * lat.parent_eval_share), False,
                  lambda: sim.at(lat.lm, lambda: sim.evals(slots * m, False, lambda: children(slots))))

    def children(slots: int) -> None:
        n = sum(improves() for _ in range(slots))
        if merge and n >= 2:
            s = min(n, MAX_SIBLINGS)
            spent[0] += s * m
            sim.at(lat.lm, lambda: sim.evals(s * m, False, lambda: validate(1 if merges_pass() else min(n, limit))))
        else:
            validate(min(n, limit))

    def validate(n: int) -> None:
        if n == 0:
            step()
            return
        calls = min(v, budget - spent[0])
        spent[0] += calls
        sim.evals(calls, True, lambda: validate(n - 1))

    sim.evals(v, True, step)
    return sim.run(), spent[0]


def simulate_async(c: int, merge: bool, lat, budget: int) -> tuple[float, int]:
    """(seconds, metric calls) of an asynchronous run with ``c`` in flight until the budget is spent."""
    sim, m, v = _Sim(lat.workers, lat.eval), lat.minibatch, lat.n_val
    improves, merges_pass = _Pattern(lat.accept), _Pattern(lat.merge_pass)
    st = {"spent": v, "flight": 0, "waiting": 0, "combining": False}

    def fill() -> None:
        while st["flight"] < c:
            left = budget - st["spent"]
            lone = st["waiting"] == 1 and st["flight"] == 0
            if merge and not st["combining"] and (st["waiting"] >= 2 or lone):
                combine()
            elif left >= 2 * m + (v if st["flight"] else 0):
                propose()
            else:
                return

    def propose() -> None:
        st["flight"] += 1
        st["spent"] += 2 * m
        sim.evals(round(m * lat.parent_eval_share), False,
                  lambda: sim.at(lat.lm, lambda: sim.evals(m, False, tested)))

    def tested() -> None:
        if improves():
            if merge:
                st["waiting"] += 1
            else:
                return validate(done)
        done()

    def validate(then: Callable[[], None]) -> None:
        calls = max(0, min(v, budget - st["spent"]))
        st["spent"] += calls
        sim.evals(calls, True, then)

    def combine() -> None:
        n = min(st["waiting"], MAX_SIBLINGS)
        st["waiting"] -= n
        st["flight"] += 1
        st["combining"] = True

        def after_test() -> None:
            merges_pass()
            validate(combined)

        if n >= 2:
            st["spent"] += n * m
            sim.at(lat.lm, lambda: sim.evals(n * m, False, after_test))
        else:
            validate(combined)

    def combined() -> None:
        st["combining"] = False
        done()

    def done() -> None:
        st["flight"] -= 1
        fill()

    sim.evals(v, True, fill)
    return sim.run(), st["spent"]
