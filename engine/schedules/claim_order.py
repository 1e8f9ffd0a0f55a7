"""Claims in slot order: a synchronous step's proposals for one parent take their texts in a
fixed order, not in the order their LM answers arrive.

Two proposals for the same parent can be answered with the same text (siblings, or slots of a
4×1 step that all drew the seed). The text goes to whoever claims it first
(``PoolState.claim``); the other is told it repeats and retries with a different prompt. Left to
the race, which slot that is depends on LM timing, so two runs with one seed diverged (in one
benchmark task, a 4×1 run ended at 0.45 or at 0.91 on the same seed).

So the claims of one parent's slots go in turns, first answers before retries: (attempt 0,
slot 0), (attempt 0, slot 1), …, then (attempt 1, slot 0), (attempt 1, slot 1), …. A claim waits
only for the turns before its own, and a slot gives up a turn as soon as it knows it will not
claim there (its answer had no fence or was unchanged, it claimed earlier, it failed). Nothing
else waits: LM calls and retries are sent the moment they are needed, and a slot's minibatch
test starts as soon as its text is claimed. (It used to wait for every earlier slot's whole
proposal, minibatch test included, so the tests of a 4×1 step on the seed ran one after another
and a retry waited for the earlier slots' retries: rounds.)
"""

from __future__ import annotations

import threading

from engine.interrupt import Interrupt

ATTEMPTS = 2  # a reflection's first answer and its one retry (engine.search.proposal._reflect)


class ClaimOrder:
    def __init__(self, slots: list[tuple[str, tuple[int, int]]], interrupt: Interrupt) -> None:
        """``slots``: (parent id, slot) in the step's order."""
        self._cond = threading.Condition()
        self._interrupt = interrupt
        by_parent: dict[str, list[tuple[int, int]]] = {}
        for parent_id, slot in slots:
            by_parent.setdefault(parent_id, []).append(slot)
        # parent id -> its turns (attempt, slot) not yet taken or given up, in claim order
        self._open = {pid: [(a, s) for a in range(ATTEMPTS) for s in own] for pid, own in by_parent.items()}

    def wait(self, parent_id: str, slot: tuple[int, int], attempt: int = 0) -> None:
        """Until every turn before (``attempt``, ``slot``) of ``parent_id`` is taken or given up
        (or the step is interrupted: then the order no longer matters)."""
        with self._cond:
            turns = self._open[parent_id]
            while turns and turns[0] != (attempt, slot) and (attempt, slot) in turns and not self._interrupt.is_set():
                self._cond.wait(0.5)

    def passed(self, parent_id: str, slot: tuple[int, int], attempt: int) -> None:
        """The slot's turn at ``attempt`` is over: it claimed there, or will not."""
        with self._cond:
            turns = self._open[parent_id]
            if (attempt, slot) in turns:
                turns.remove((attempt, slot))
                self._cond.notify_all()

    def done(self, parent_id: str, slot: tuple[int, int]) -> None:
        """The slot claims nothing more: every turn it has left is given up."""
        with self._cond:
            self._open[parent_id][:] = [t for t in self._open[parent_id] if t[1] != slot]  # in place: waiters hold it
            self._cond.notify_all()

    def turns(self, parent_id: str, slot: tuple[int, int]) -> "SlotTurns":
        return SlotTurns(self, parent_id, slot)


class SlotTurns:
    """One slot's side of a ``ClaimOrder`` (``RunContext.claim_turn``)."""

    def __init__(self, order: ClaimOrder, parent_id: str, slot: tuple[int, int]) -> None:
        self.order, self.parent_id, self.slot = order, parent_id, slot

    def wait(self, attempt: int) -> None:
        self.order.wait(self.parent_id, self.slot, attempt)

    def passed(self, attempt: int) -> None:
        self.order.passed(self.parent_id, self.slot, attempt)

    def done(self) -> None:
        self.order.done(self.parent_id, self.slot)
