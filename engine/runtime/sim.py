"""The runtime model for a whole run: a small discrete-event simulation of the schedule.

Closed forms (``engine.runtime.model``) describe one step; a run also has a budget's tail
(steps trimmed, fewer proposals in flight), asynchronous proposals that queue behind each other's
evaluations, and merges. So the wall-clock of a run is predicted by replaying the engine's
schedule with fixed latencies: the LM takes ``L`` (a synchronous step's reflections, when LM
latencies vary (``lm_spread``), the expected slowest of them: the step waits for it; an
asynchronous proposal waits for its own, ``L`` on average), each metric call ``T`` on one of ``W``
workers (minibatch tests ahead of every queued validation call: the engine's throttle keeps at
most 2·W validation calls queued or running, so there a minibatch test waits behind up to that many;
replayed the engine's way, the errors moved both ways on the batching benchmark), proposals pass
their minibatch test in the measured proportion ``a`` (spread evenly, no randomness), merges keep
every child's gain on their test, and are then validated, in the proportion ``merge_pass`` (the
others are never validated) and need an LM call (a real conflict) in the proportion ``merge_lm`` —
a three-way merge takes no time — tested on the share ``merge_test`` of their siblings' examples;
a proposal's first answer is asked again (one more LM call) in the proportion ``retry``.
Engine overhead (database writes, prompt building) is one measured figure per step (per
proposal, asynchronously), ``overhead``; 0 unless measured.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Callable, Optional

from engine.runtime.model import slowest_lm

MAX_SIBLINGS = 4  # as engine.search.sibling_merge
QUORUM = 2  # as engine.schedules.onto_best: children waiting that start a turn


class _Pattern:
    """``a`` of the calls return True, evenly spread: deterministic 'acceptance'."""

    def __init__(self, a: float) -> None:
        self.a, self.n = a, 0

    def __call__(self) -> bool:
        self.n += 1
        return int(self.n * self.a + 1e-9) > int((self.n - 1) * self.a + 1e-9)


class Gains:
    """Improvements that reached the best candidate, counted as the schedule replays, and the
    time the ``target``-th arrived (time to quality in the model's unit: one improvement).
    A validated improving child adds one; a sibling merge that is accepted adds one per sibling it
    combined; siblings that are not merged add, between them, what the best of them brings
    (``best_of``: only one of them can be the best, and the step validates the most promising
    first); an asynchronous child validated against a best that moved on adds one only when it is
    merged into the best (``merge``) and the merge keeps its gain (``merge_pass``); a child
    validated on top of a best that another validation replaced while it ran forks off the new
    best and adds nothing (only one of them can be the best)."""

    def __init__(self, target: int) -> None:
        self.target, self.count, self.reached_at = target, 0, None

    def add(self, n: float, now: float) -> None:
        self.count += n
        if self.reached_at is None and self.count >= self.target - 1e-9:
            self.reached_at = now


def best_of(lat, n: int) -> float:
    """Improvements the best of ``n`` improving children brings the best (``Latencies.best_of``)."""
    return lat.best_of[min(n, len(lat.best_of)) - 1] if lat.best_of and n > 0 else 1.0


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


def simulate_sync(p: int, k: int, accept: str, top_k: int, merge: bool, lat, budget: int,
                  gains: Optional[Gains] = None) -> tuple[float, int]:
    """(seconds, metric calls) of a synchronous run of P×K steps until the budget is spent;
    ``gains`` counts the improvements as they reach the best."""
    sim, m, v = _Sim(lat.workers, lat.eval), lat.minibatch, lat.n_val
    gains = gains or Gains(0)
    improves, merges_pass, merge_lm = _Pattern(lat.accept), _Pattern(lat.merge_pass), _Pattern(lat.merge_lm)
    retried = _Pattern(lat.retry)
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
        # each slot as engine.schedules.synchronous runs it: its parent's minibatch, its own
        # reflection, its child's test; the step's barrier waits for the last slot
        left = [slots]

        def slot_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                children(slots)

        # every slot's child is tested as its reflection ends; the last ends here, or one LM call later
        # for a slot whose first answer was unusable and asked again
        wait = slowest_lm(lat, slots)

        def reflect(n: int) -> None:
            for _ in range(n):
                sim.at(wait + lat.overhead + (lat.lm if retried() else 0.0), lambda: sim.evals(m, False, slot_done))

        for first in range(0, slots, k):
            n = min(k, slots - first)
            sim.evals(round(m * lat.parent_eval_share), False, lambda n=n: reflect(n))

    def children(slots: int) -> None:
        n = sum(improves() for _ in range(slots))
        if merge and n >= 2:
            s = min(n, MAX_SIBLINGS)
            tested = round(s * m * lat.merge_test)
            spent[0] += tested
            kept = merges_pass()
            alone = best_of(lat, n)
            sim.at(lat.lm if merge_lm() else 0.0,
                   lambda: sim.evals(tested, False, lambda: validate(1, s) if kept else validate(min(n, limit), alone)))
        else:
            validate(min(n, limit), best_of(lat, n))

    def validate(n: int, gained: float = 1.0) -> None:
        if n == 0:
            step()
            return
        calls = min(v, budget - spent[0])
        spent[0] += calls

        def passed() -> None:
            gains.add(gained, sim.now)
            validate(n - 1, 0)  # the siblings validated after the first add no improvement to the best

        sim.evals(calls, True, passed)

    sim.evals(v, True, step)
    return sim.run(), spent[0]


def simulate_async(c: int, merge: bool, lat, budget: int, gains: Optional[Gains] = None) -> tuple[float, int]:
    """(seconds, metric calls) of an asynchronous run with ``c`` in flight until the budget is
    spent; ``gains`` counts the improvements as they reach the best."""
    run = _AsyncRun(c, merge, lat, budget, gains or Gains(0))
    run.sim.evals(lat.n_val, True, run.fill)  # the seed's validation pass
    return run.sim.run(), run.spent


class _AsyncRun:
    """The asynchronous schedule replayed: proposals start while the budget allows. Without
    ``merge`` an improving child is validated at once, and adds to the best only if no other
    validation replaced the best while it ran. With ``merge`` (``engine.schedules.onto_best``)
    improving children queue; one turn at a time takes the queue once two wait (or the oldest
    waited half a proposal, or no other proposal is on its way) and validates one candidate:
    the child alone when it built on the best, else its merge with the best and the others
    queued — the merge's test (each child's m calls; the best's examples are the pass's own),
    an LM call for a real conflict — adding one improvement per child when it is kept (one that
    is not kept is not validated: its children go one by one). The
    proposal that took the turn holds its slot until the queue is no longer ready."""

    def __init__(self, c: int, merge: bool, lat, budget: int, gains: Gains) -> None:
        self.c, self.merge, self.lat, self.budget, self.gains = c, merge, lat, budget, gains
        self.sim, self.m, self.v = _Sim(lat.workers, lat.eval), lat.minibatch, lat.n_val
        self.improves, self.merge_lm, self.merge_kept = _Pattern(lat.accept), _Pattern(lat.merge_lm), _Pattern(lat.merge_pass)
        self.retried = _Pattern(lat.retry)
        self.spent, self.flight, self.version = self.v, 0, 0
        self.queue: list[tuple[float, int]] = []  # (queued at, best version the proposal started from)
        self.undecided, self.turn = 0, False
        self.quorum = min(QUORUM, c)
        self.proposal_seconds = 2 * self.m * lat.eval + lat.lm + lat.overhead  # half of it: a child's longest wait

    def fill(self) -> None:
        while self.flight < self.c and self.budget - self.spent >= 2 * self.m + self.keep():
            self.propose()

    def keep(self) -> int:
        """Metric calls a new proposal leaves free (engine.schedules.asynchronous.room_to_keep):
        a validation pass, and one per turn the queued children will take."""
        if not self.flight:
            return 0
        return self.v * (1 + -(-len(self.queue) // (MAX_SIBLINGS - 1)))

    def propose(self) -> None:
        self.flight += 1
        self.undecided += 1
        self.spent += 2 * self.m
        start, lm = self.version, self.lat.lm * (2 if self.retried() else 1)  # an unusable answer: asked again
        self.sim.evals(round(self.m * self.lat.parent_eval_share), False,
                       lambda: self.sim.at(lm + self.lat.overhead,
                                           lambda: self.sim.evals(self.m, False, lambda: self.tested(start))))

    def tested(self, start: int) -> None:
        self.undecided -= 1
        improved = self.improves()
        if not self.merge:
            return self.validate(self.version == start, start) if improved else self.done()
        if improved:
            self.queue.append((self.sim.now, start))
        if self.turn or not self.ready():
            return self.done()
        self.turn = True
        self.take()

    def ready(self) -> bool:
        q = self.queue
        return bool(q) and (len(q) >= self.quorum or self.undecided == 0
                            or self.sim.now - q[0][0] >= self.proposal_seconds / 2)

    def take(self) -> None:
        """The turn: the queue's first MAX_SIBLINGS − 1 children, merged and validated."""
        if not self.ready():
            self.turn = False
            return self.done()
        batch, self.queue = self.queue[: MAX_SIBLINGS - 1], self.queue[MAX_SIBLINGS - 1:]
        self.onto_best(batch, self.take)

    def onto_best(self, batch: list[tuple[float, int]], then: Callable[[], None]) -> None:
        """``batch`` merged with the best and validated, as ``engine.schedules.onto_best`` does it. A
        merge that loses a gain on its test (1 − ``merge_pass``: the engine's "accepted" merges are
        the validated ones) is never validated: its children go one by one instead, each merged
        with the best, or validated alone once that fails too (a fork: no gain). Not told apart: a
        merge that fails because it repeats a version (the engine validates that version in its
        place, or nothing when it is the best), counted among the failures by ``merge_pass``."""
        if len(batch) == 1 and batch[0][1] == self.version:  # built on the best: validated alone
            return self.validate(True, then=then)
        calls = max(0, min(round(len(batch) * self.m * self.lat.merge_test), self.budget - self.spent))
        self.spent += calls
        lm, kept = self.lat.lm if self.merge_lm() else 0.0, self.merge_kept()

        def tested() -> None:
            if kept or len(batch) == 1:
                return self.validate(kept, n=len(batch), then=then)

            def each(i: int) -> None:
                return then() if i == len(batch) else self.onto_best(batch[i:i + 1], lambda: each(i + 1))

            each(0)

        self.sim.at(lm, lambda: self.sim.evals(calls, False, tested))

    def validate(self, gains: bool, over: Optional[int] = None, n: int = 1,
                 then: Optional[Callable[[], None]] = None) -> None:
        """One validation pass adding ``n`` improvements when ``gains``; without ``merge``, a child of
        the best at version ``over`` adds its gain only if that is still the best when the pass ends."""
        calls = max(0, min(self.v, self.budget - self.spent))
        self.spent += calls

        def passed() -> None:
            self.version += 1
            self.gains.add(n if gains and (over is None or self.version - 1 == over) else 0, self.sim.now)
            (then or self.done)()

        self.sim.evals(calls, True, passed)

    def done(self) -> None:
        self.flight -= 1
        self.fill()
