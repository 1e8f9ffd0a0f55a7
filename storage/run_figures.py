"""A run's figures that several places show, each defined once: the studio, ``python -m engine
status``, the export and the Python API all read them through these functions, so that they
agree at any moment, also while the run advances.

- **Running time** (``running_seconds``): the seconds the engine spent on the run while it was
  running — the seed, the steps, the held-out test pass — never the time it waited queued or
  paused. The engine writes the search's part (``Run.seconds``, what ``max_seconds`` counts)
  with the moment it wrote it (``seconds_at``) at every step's end, and the test passes' part
  (``test_seconds``) as they end; while the run runs, the time since ``seconds_at`` is added (at
  most until its lease lapses: a worker that died is not working on it).
- **Proposal counts** (``proposal_counts``): the parse, validity and improvement rates are over
  the proposals whose reflection LM answered, so none is ever above 100 %, and a proposal still
  waiting for its answer, or whose LM failed, is never counted as an unparsed answer.
- **The best candidate** is the engine's ``best_candidate_id`` / ``best_val_mean``: the best
  fully validated, non-vetoed candidate, written the moment a validation pass or a command
  changes it (``engine.context.RunContext.record_best``); nothing here recomputes it.

``run`` is a ``storage.models.Run`` or its dict (``storage.queries.run_overview``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

from storage.states import RunStatus


def _get(run: Any, name: str, default: Any = None) -> Any:
    value = run.get(name, default) if isinstance(run, dict) else getattr(run, name, default)
    return default if value is None else value


def _aware(ts: Optional[datetime]) -> Optional[datetime]:
    """SQLite gives naive datetimes; every time the engine writes is UTC."""
    return ts if ts is None or ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def running_seconds(run: Any, now: Optional[datetime] = None, search_only: bool = False) -> float:
    """The run's running time in seconds (see the module docstring); ``search_only``: without
    the held-out test passes, as ``max_seconds`` counts it."""
    total = float(_get(run, "seconds", 0.0)) + (0.0 if search_only else float(_get(run, "test_seconds", 0.0)))
    since = _aware(_get(run, "seconds_at"))
    if since is None or _get(run, "status") != RunStatus.RUNNING.value:
        return total
    until = now or datetime.now(timezone.utc)
    lease = _aware(_get(run, "lease_expires_at"))
    if lease is not None and lease < until:
        until = lease
    return total + max(0.0, (until - since).total_seconds())


@dataclass(frozen=True)
class ProposalCounts:
    """A run's proposals: ``total`` made, ``answered`` (their reflection LM answered), ``waiting``
    (not answered yet), and of the answered ones how many were ``parsed`` (a usable fenced
    answer), ``valid`` (passed ``validate()``) and ``improved`` (beat their parent on its
    minibatch); ``retried``: those that asked the LM once more."""

    total: int
    answered: int
    waiting: int
    parsed: int
    valid: int
    improved: int
    retried: int

    @property
    def unanswered(self) -> int:
        """Proposals whose reflection LM failed (or was cut) and never answered."""
        return max(0, self.total - self.answered - self.waiting)

    def rate(self, count: int) -> Optional[float]:
        """``count`` over the answered proposals (None before any answer)."""
        return min(1.0, count / self.answered) if self.answered else None

    def percent(self, count: int) -> str:
        rate = self.rate(count)
        return "—" if rate is None else f"{rate:.0%}"


def proposal_counts(run: Any, reflecting: int = 0) -> ProposalCounts:
    """The run's ``ProposalCounts``; ``reflecting``: its reflection calls in flight
    (``storage.queries.run_overview``'s ``proposals_reflecting``). A run recorded before the
    engine counted answers has ``proposals_answered`` 0: its answered proposals are then those
    not waiting."""
    total, parsed = int(_get(run, "proposals_total", 0)), int(_get(run, "proposals_parsed", 0))
    answered = int(_get(run, "proposals_answered", 0))
    if answered < parsed:  # recorded before answers were counted
        answered = max(parsed, total - reflecting)
    answered = min(answered, total)
    return ProposalCounts(total=total, answered=answered, waiting=max(0, min(reflecting, total - answered)),
                          parsed=min(parsed, answered), valid=min(int(_get(run, "proposals_valid", 0)), answered),
                          improved=min(int(_get(run, "proposals_improved", 0)), answered),
                          retried=int(_get(run, "proposals_retried", 0)))
