"""How proposals are grouped into steps: the interface both schedules keep.

A *schedule* runs proposals until the gate says stop. The synchronous schedule
(``engine.schedules.synchronous.SyncSchedule``) runs P×K proposals at once and waits for all of them; the
asynchronous one (``engine.schedules.asynchronous.AsyncSchedule``) keeps C = P×K in flight with no barrier
and groups every C proposals started into a step. Either way each finished step is closed by
``close_step`` (timings, worker utilisation, speed-ups: one computation for both), which saves
the Step row and returns one ``StepRecord``; the optimizer's one post-step path (run totals,
system-aware merge, step-mode pause, the ``on_step`` hook) reads only that record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Protocol

from storage import repo
from storage.models import Step, utcnow

from engine.context import RunContext
from engine.runtime.model import Latencies, latencies_of_events, shape_of, sync_step

LOST = "lost"  # not a run status: another worker took the lease, so the run is left as it is


class Decision(NamedTuple):
    """Why a schedule stops: the status to end the run with (a RunStatus, or LOST) and why.
    ``room_spent``: the metric calls or dollars ran out, so the reason's counts are stale
    once the work in flight has finished."""

    status: str
    reason: str
    room_spent: bool = False


@dataclass(frozen=True)
class StepRecord:
    """What one finished step did, in either schedule (the Step row holds the same facts)."""

    index: int
    parent_ids: list[str]
    proposal_ids: list[str]
    accepted_ids: list[str]  # validated in this step
    metric_calls: int
    cost_usd: float
    seconds: float
    worker_utilisation: Optional[float]
    predicted_speedup: Optional[float]
    measured_speedup: Optional[float]

    @property
    def idle(self) -> bool:
        """It paid no metric call and validated nothing (every proposal failed before a test)."""
        return self.metric_calls == 0 and not self.accepted_ids


Gate = Callable[[], tuple[Optional[Decision], list[int]]]  # (decision or None, applied command ids)
AfterStep = Callable[[StepRecord], None]


class Schedule(Protocol):
    def run(self, gate: Gate, after_step: AfterStep) -> Decision:
        """Run steps until ``gate()`` returns a decision (it applies pending commands first) or
        the schedule itself sees no progress; call ``after_step`` for each step closed, in
        order. Returns the decision the run ends with."""
        ...


# predicted speed-up of a step from the measured latencies and the 1×1 proposal time
Predict = Callable[[Latencies, float], float]


def close_step(ctx: RunContext, row: Step, *, events: list[dict], proposals: int, seconds: float,
               busy_seconds: float, since_previous: float, predict: Predict) -> StepRecord:
    """Finish ``row`` (its ids, metric calls and cost already set): timing, the workers'
    utilisation, predicted and measured speed-up over as many sequential 1×1 proposals; save it.
    ``since_previous`` is the time this step added to the run (the measured speed-up's divisor)."""
    row.ended_at, row.seconds, row.events = utcnow(), seconds, events
    workers = ctx.evals.executor.workers
    row.worker_utilisation = min(1.0, busy_seconds / (workers * seconds)) if seconds > 0 else None
    row.predicted_speedup, row.measured_speedup = _speedups(ctx, events, proposals, since_previous, predict)
    repo.save_step(ctx.db, row)
    return StepRecord(row.index, list(row.parent_ids), list(row.proposal_ids), list(row.accepted_ids),
                      row.metric_calls, row.cost_usd, row.seconds, row.worker_utilisation, row.predicted_speedup,
                      row.measured_speedup)


def _speedups(ctx: RunContext, events: list[dict], k: int, wall: float,
              predict: Predict) -> tuple[Optional[float], Optional[float]]:
    """Both use the runtime model's 1×1 proposal time at the latencies measured in this step:
    the prediction as ``predict`` says, the measurement k × that time / ``wall``."""
    run = repo.get_run(ctx.db, ctx.run_id)
    lat = latencies_of_events(events, run.proposals_improved / run.proposals_total if run.proposals_total else None,
                              ctx.cfg.search.minibatch_size, len(ctx.val_keys), ctx.evals.executor.workers)
    if lat is None or k == 0:
        return None, None
    t1, _ = sync_step(type(shape_of(ctx.cfg.search))(), lat)
    return predict(lat, t1), (k * t1 / wall if wall > 0 else None)
