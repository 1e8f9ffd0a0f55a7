"""``optimize_anything(stop_callbacks=…)``: GEPA's stoppers, and any callable of the same shape.

GEPA calls each stopper with its ``GEPAState`` before every iteration and stops when one returns
True. Refract calls it with a ``StopState`` before every step (every proposal with the
asynchronous schedule) — with the names GEPA's own stoppers read (``i``, ``total_num_evals``,
``program_candidates``, ``program_full_scores_val_set``), so ``gepa.utils.ScoreThresholdStopper``,
``NoImprovementStopper``, ``TimeoutStopCondition``, ``FileStopper``, ``MaxMetricCallsStopper`` and
``MaxCandidateProposalsStopper`` work unchanged (``SignalStopper`` would take over the Ctrl-C that
pauses the run here: not for this API). The run then ends ``completed`` with the stopper named in
its reason.

A GEPA iteration is one proposal; a synchronous Refract step is P × K of them, so a stopper that
counts its calls (``NoImprovementStopper``) counts steps there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from storage import repo
from storage.db import Database
from storage.run_figures import running_seconds
from storage.states import CandidateStatus

from engine.config import ConfigError
from engine.state import to_evaluator


@dataclass
class StopState:
    """The run as it stands, for a stop callback."""

    i: int  # proposals made so far, minus one (GEPA's iteration index: -1 before the first)
    total_num_evals: int  # metric calls spent
    program_candidates: list  # every validated candidate, as the evaluator receives it, oldest first
    program_full_scores_val_set: list[float]  # their validation means, in the same order
    run_id: str
    steps: int
    cost_usd: float
    seconds: float  # active seconds, as the time budget counts them
    best_score: Optional[float]  # the best validation mean so far (None before the seed is validated)


def callbacks_of(stop_callbacks: Any) -> list[Callable]:
    """``stop_callbacks`` as a list (one callable, or a sequence of them, as GEPA takes it)."""
    if stop_callbacks is None:
        return []
    found = list(stop_callbacks) if isinstance(stop_callbacks, Sequence) and not isinstance(stop_callbacks, str) \
        else [stop_callbacks]
    for i, fn in enumerate(found):
        if not callable(fn):
            raise ConfigError(f"stop_callbacks[{i}]: must be callable (state) -> bool, not {type(fn).__name__}")
    return found


def stop_state(db: Database, run_id: str) -> StopState:
    run = repo.get_run(db, run_id)
    single = not isinstance(run.config.get("seed_candidate"), dict)
    done = [c for c in repo.list_candidates(db, run_id, [CandidateStatus.ACCEPTED]) if c.val_mean is not None]
    return StopState(i=run.proposals_total - 1, total_num_evals=run.metric_calls,
                     program_candidates=[to_evaluator(c.content, single) for c in done],
                     program_full_scores_val_set=[c.val_mean for c in done], run_id=run_id, steps=run.steps_done,
                     cost_usd=run.cost_usd, seconds=running_seconds(run, search_only=True), best_score=run.best_val_mean)


def name_of(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class StopCheck:
    """The optimizer's extra stopping rule: why the run stops now by one of ``callbacks``, or None.
    A callback that raises stops the run too (its error in the reason); ``error`` keeps the
    exception, which ``optimize_anything`` raises once the run is settled."""

    def __init__(self, db: Database, run_id: str, callbacks: list[Callable]) -> None:
        self.db, self.run_id, self.callbacks = db, run_id, callbacks
        self.error: Optional[BaseException] = None
        self.extra: Optional[Callable[[], Optional[str]]] = None  # a reason of the caller's session, asked first

    def __call__(self) -> Optional[str]:
        why = self.extra() if self.extra is not None else None
        if why or not self.callbacks:
            return why
        state = stop_state(self.db, self.run_id)
        for i, fn in enumerate(self.callbacks):
            try:
                stop = fn(state)
            except Exception as exc:  # noqa: BLE001 -- the caller's code: any error stops the run and is raised to them
                self.error = exc
                return f"stop_callbacks[{i}] ({name_of(fn)}) raised {type(exc).__name__}: {exc}"
            if stop:
                return f"stop_callbacks[{i}] ({name_of(fn)}) returned True"
        return None
