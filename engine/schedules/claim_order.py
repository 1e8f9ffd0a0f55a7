"""Claims in slot order: a synchronous step's proposals for one parent take their texts in the
order of their slots, not in the order their LM answers arrive.

Two proposals for the same parent can be answered with the same text (siblings, or slots of a
4×1 step that all drew the seed). The text goes to whoever claims it first
(``PoolState.claim``); the other is told it repeats and retries with a different prompt. Left to
the race, which slot that is depends on LM timing, so two runs with one seed diverged (in one
benchmark task, a 4×1 run ended at 0.45 or at 0.91 on the same seed). Here a slot claims only
once every earlier slot of the same parent has finished its proposal, retry included; LM calls
still run side by side, so the cost is the wait for an earlier slot's answer (or its retry), not
a serial step.
"""

from __future__ import annotations

import threading

from engine.interrupt import Interrupt


class ClaimOrder:
    def __init__(self, slots: list[tuple[str, tuple[int, int]]], interrupt: Interrupt) -> None:
        """``slots``: (parent id, slot) in the step's order."""
        self._cond = threading.Condition()
        self._interrupt = interrupt
        self._open: dict[str, list[tuple[int, int]]] = {}  # parent id -> its slots not yet done, in order
        for parent_id, slot in slots:
            self._open.setdefault(parent_id, []).append(slot)

    def wait(self, parent_id: str, slot: tuple[int, int]) -> None:
        """Until every earlier slot of ``parent_id`` is done (or the step is interrupted: then
        the order no longer matters)."""
        with self._cond:
            while self._open[parent_id][0] != slot and not self._interrupt.is_set():
                self._cond.wait(0.5)

    def done(self, parent_id: str, slot: tuple[int, int]) -> None:
        with self._cond:
            self._open[parent_id].remove(slot)
            self._cond.notify_all()
