"""What every part of a running optimization shares: one object, built once per run."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

from storage import repo
from storage.db import Database
from storage.models import Candidate, Example
from storage.states import CandidateStatus

from engine.budget import Budget
from engine.config import LMConfig, RunConfig
from engine.evaluation import EvaluationService, Timeline
from engine.interrupt import INTERRUPTED, Interrupt
from engine.lm.journal import RunJournal
from engine.lm.protocol import LM
from engine.state import PoolState

if TYPE_CHECKING:
    from engine.schedules.claim_order import SlotTurns


class FailureStreak:
    """The run's count of reflection / merge / seed LM calls that failed in a row (shared by
    every thread of a run; a success resets it)."""

    def __init__(self) -> None:
        self._lock, self._count = threading.Lock(), 0

    def record(self, failed: bool) -> None:
        with self._lock:
            self._count = self._count + 1 if failed else 0

    @property
    def count(self) -> int:
        with self._lock:
            return self._count


@dataclass
class RunContext:
    db: Database
    run_id: str
    cfg: RunConfig
    lm: LM  # engine.lm.client.LMClient
    evals: EvaluationService
    state: PoolState
    budget: Budget
    timeline: Timeline
    examples: dict[str, Example]
    train_keys: list[str]
    val_keys: list[str]
    test_keys: list[str]
    single_text: bool
    components: list[str]
    step_index: int = 0
    stop_event: threading.Event = field(default_factory=threading.Event)
    lm_failures: FailureStreak = field(default_factory=FailureStreak)
    interrupt: Interrupt = field(default_factory=Interrupt)  # shared by at_step copies
    # the turns in which a proposal claims its text (a synchronous step's slot order,
    # engine.schedules.claim_order.SlotTurns); None: claim at once
    claim_turn: Optional["SlotTurns"] = None
    # one writer of the run's best at a time (validation passes end in several threads), shared by at_step copies
    best_lock: threading.Lock = field(default_factory=threading.Lock)

    def at_step(self, index: int) -> "RunContext":
        """This context for work recorded under step ``index`` (a proposal of the asynchronous
        schedule); everything else, the LM failure streak included, is shared."""
        return replace(self, step_index=index)

    def call_lm(self, cfg: LMConfig, messages: list[dict], purpose: str, candidate_id: Optional[str],
                sample_index: int = 0, temperature: Optional[float] = None, example_key: Optional[str] = None,
                charge: bool = True):
        """One LM call, each attempt recorded (tokens, cost, latency, cache, error) and, unless
        ``charge`` is False (the held-out test pass), charged to the budget; the id returned is
        the row of the last attempt."""
        t0 = time.monotonic()
        journal = RunJournal(self.db, run_id=self.run_id, purpose=purpose, candidate_id=candidate_id,
                             example_key=example_key, step=self.step_index, model=cfg.model, messages=messages)
        res = self.lm.complete(cfg, messages, sample_index=sample_index, temperature=temperature, journal=journal,
                               cancel=self.interrupt)
        self.timeline.add("lm", t0, time.monotonic(), candidate_id, purpose=purpose)
        call_id = journal.ids[-1] if journal.ids else journal.record_unsent(res)  # each attempt has its row
        if charge:
            self.budget.add_cost(res.cost_usd, purpose)
        if purpose in ("reflection", "merge", "seed") and res.error_kind != INTERRUPTED:
            self.lm_failures.record(bool(res.error))
        if purpose == "reflection" and res.ok and not res.cached:  # what a second look may spend
            self.evals.pace.note_lm(time.monotonic() - t0)
        return res, call_id

    def prompt_char_budget(self, cfg: LMConfig) -> Optional[int]:
        """Characters a prompt may take so that prompt + answer fit the model's context window
        (about 3 characters a token, on the safe side); None when the window is unknown."""
        fn = getattr(self.lm, "context_window", None)
        window = fn(cfg) if fn else None
        return None if not window else max(2000, int((window - cfg.max_tokens) * 3))

    @property
    def consecutive_lm_failures(self) -> int:
        return self.lm_failures.count

    def record_best(self) -> None:
        """Write the pool's best (fully validated, not vetoed) to the run row the moment it may
        have changed — a validation pass ended, a command was applied — so that the studio, the
        CLI and the export name it at once, not when the step ends."""
        with self.best_lock:
            best_id, best_mean = self.state.best()
            repo.set_run_fields(self.db, self.run_id, best_candidate_id=best_id, best_val_mean=best_mean)

    def save(self, cand: Candidate) -> Candidate:
        """Save ``cand``'s fields (not its status: ``set_status``) and keep the pool's copy."""
        return self._keep(repo.save_candidate(self.db, cand))

    def set_status(self, cand: Candidate, to: CandidateStatus, reason: Optional[str], *, with_row: bool = True,
                   **fields: Any) -> Candidate:
        """Move ``cand`` to status ``to`` through ``repo.set_candidate_status`` (the move is
        checked there); with ``with_row`` its working copy is saved in the same transaction."""
        saved = repo.set_candidate_status(self.db, cand.id, to, reason, row=cand if with_row else None, **fields)
        return self._keep(saved)

    def _keep(self, saved: Candidate) -> Candidate:
        with self.state.lock:
            self.state.candidates[saved.id] = saved
        return saved
