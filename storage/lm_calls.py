"""The LM calls of a run, attempt by attempt (see ``storage.models.LMCall``).

Contract (as in ``storage.repo``): each function is one transaction; the run's totals
(``lm_calls``, ``lm_calls_failed``, ``lm_calls_interrupted``, ``cost_usd``, ``tokens_*``) change
in the same transaction as the rows, through ``repo._bump``, so they always equal the rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, update
from sqlmodel import select

from storage.db import Database
from storage.models import LMCall
from storage.repo import _bump, dollars_column
from storage.states import LMCallStatus


def start_lm_call(db: Database, call: LMCall) -> int:
    """Insert an attempt as ``started`` before its request is sent (so a crash leaves a trace)
    and count it in the run's ``lm_calls``. ``finish_lm_call`` completes it."""
    call.status = LMCallStatus.STARTED.value
    with db.write() as s:
        s.add(call)
        s.flush()
        if call.run_id:
            _bump(s, call.run_id, {"lm_calls": 1})
        return call.id


def finish_lm_call(db: Database, call_id: int, status: LMCallStatus, **fields: Any) -> None:
    """Complete an attempt (``done`` or ``failed``) with its answer, tokens, cost, error.
    The run's totals change by the difference to what the row held, so finishing a row that a
    resumed run had already marked ``interrupted`` (its worker was only slow) replaces the
    estimate instead of adding to it."""
    with db.write() as s:
        call = s.get(LMCall, call_id)
        before = (call.cost_usd, call.tokens_in, call.tokens_out, call.status)
        for name, value in fields.items():
            setattr(call, name, value)
        call.status = LMCallStatus(status).value
        s.add(call)
        if call.run_id:
            _bump(s, call.run_id, {dollars_column(call.purpose): call.cost_usd - before[0], "tokens_in": call.tokens_in - before[1],
                                   "tokens_out": call.tokens_out - before[2],
                                   "lm_calls_failed": int(status == LMCallStatus.FAILED),
                                   "lm_calls_interrupted": -int(before[3] == LMCallStatus.INTERRUPTED)})


def started_lm_calls(db: Database, run_id: str) -> list[LMCall]:
    """Attempts of a run still marked ``started``: in flight, or cut off by a crash."""
    with db.read() as s:
        return list(s.exec(select(LMCall).where(LMCall.run_id == run_id, LMCall.status == LMCallStatus.STARTED.value)))


def mark_lm_call_interrupted(db: Database, call_id: int, tokens_in: int, cost_usd: float) -> bool:
    """A ``started`` attempt whose worker died: ``interrupted``, with the prompt tokens and the
    dollars estimated from the request, added to the run's totals. False if it was not
    ``started`` any more."""
    with db.write() as s:
        res = s.exec(update(LMCall).where(LMCall.id == call_id, LMCall.status == LMCallStatus.STARTED.value)
                     .values(status=LMCallStatus.INTERRUPTED.value, error_kind="crash", tokens_in=tokens_in, cost_usd=cost_usd,
                             error="the engine worker stopped (killed or crashed) while this request was in flight; "
                                   "tokens unknown, cost estimated from the prompt"))
        if res.rowcount != 1:
            return False
        call = s.get(LMCall, call_id)
        if call.run_id:
            _bump(s, call.run_id, {"lm_calls_interrupted": 1, "tokens_in": tokens_in, dollars_column(call.purpose): cost_usd})
        return True


def mark_lm_answer_unusable(db: Database, call_id: int, kind: str, error: str) -> None:
    """A ``done`` answer the engine could not use (``kind``, e.g. no_fence): stored ``failed`` with
    ``error`` saying why, so that it is found like any failed call (by status, in the export, on
    the candidate page), and counted as a failed LM call of the run; the answer, its tokens and
    its cost stay as they were."""
    with db.write() as s:
        res = s.exec(update(LMCall).where(LMCall.id == call_id, LMCall.error_kind == None)  # noqa: E711
                     .values(error_kind=kind, status=LMCallStatus.FAILED.value, error=error))
        call = s.get(LMCall, call_id)
        if res.rowcount == 1 and call is not None and call.run_id:
            _bump(s, call.run_id, {"lm_calls_failed": 1})


def lm_failure_kinds(db: Database, run_id: str) -> dict[str, int]:
    """How many of a run's LM attempts failed, by ``error_kind`` (interrupted ones as ``crash``)."""
    with db.read() as s:
        rows = s.exec(select(LMCall.error_kind, func.count()).where(LMCall.run_id == run_id, LMCall.error_kind != None)  # noqa: E711
                      .group_by(LMCall.error_kind))
        return {kind: n for kind, n in rows}
