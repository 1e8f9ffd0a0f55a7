"""Recording a run's LM calls attempt by attempt (``engine.lm.client.AttemptJournal`` for a run).

Each request gets its ``LMCall`` row *before* it is sent (status ``started``) and is completed
when it ends (``done`` or ``failed``, with its error kind), so a retried call leaves one row
per attempt and a call cut off by a crash leaves a ``started`` row. ``recover_interrupted``
turns those into ``interrupted`` rows, costed from the request, when the run resumes.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from storage import lm_calls, repo
from storage.db import Database
from storage.models import LMCall, utcnow
from storage.states import LMCallStatus

from engine.interrupt import INTERRUPTED

log = logging.getLogger("refract.lm")

# error_kind (engine.lm.errors.error_kind, plus no_fence and crash) -> how the CLI and the studio name it
KIND_LABELS = {"rate_limit": "429", "server_error": "5xx", "timeout": "timeout", "bad_body": "bad body",
               "connection": "connection", "request": "refused request", "no_fence": "no fenced block",
               "crash": "interrupted by a crash", INTERRUPTED: "cut by a pause, a stop, the time limit or a stopping worker"}


class RunJournal:
    """The attempts of one LM call of a run; ``ids`` are their rows, in order."""

    def __init__(self, db: Database, **fields: Any) -> None:
        self.db, self.fields = db, fields  # run_id, purpose, candidate_id, example_key, step, model, messages
        self.ids: list[int] = []

    def begin(self, attempt: int) -> None:
        self.ids.append(lm_calls.start_lm_call(self.db, LMCall(**self.fields, attempt=attempt, started_at=utcnow())))

    def end(self, attempt: int, result) -> None:
        lm_calls.finish_lm_call(self.db, self.ids[-1], call_status(result), answer=result.text or "",
                            tokens_in=result.tokens_in, tokens_out=result.tokens_out, cost_usd=result.cost_usd,
                            seconds=result.seconds, error=result.error, error_kind=result.error_kind)

    def record_unsent(self, result) -> int:
        """The row of a call that sent no request (a cache hit, or refused before sending)."""
        return repo.record_lm_call(self.db, LMCall(**self.fields, answer=result.text or "", tokens_in=result.tokens_in,
                                                   tokens_out=result.tokens_out, cost_usd=result.cost_usd,
                                                   seconds=result.seconds, cached=result.cached, error=result.error,
                                                   status=call_status(result).value,
                                                   error_kind=result.error_kind, started_at=utcnow()))


def call_status(result) -> LMCallStatus:
    # a pause or a stop is not an LM failure: such an attempt is "interrupted", costed, not failed
    return (LMCallStatus.INTERRUPTED if result.error_kind == INTERRUPTED else
            LMCallStatus.FAILED if result.error else LMCallStatus.DONE)


def estimated_prompt_cost(model: str, messages: list) -> tuple[int, float]:
    """(prompt tokens, dollars) of a request by litellm's token counter and price list; the
    answer it may have been billed for is unknown. (0, 0.0) when the model is not priced."""
    from engine.lm.client import is_callable_model, litellm

    if is_callable_model(model):  # a Python callable: no price, and litellm need not be imported for it
        return 0, 0.0
    try:
        tokens = int(litellm.token_counter(model=model, messages=messages))
    except Exception:  # noqa: BLE001 -- a message shape the counter does not know
        return 0, 0.0
    try:
        prompt_usd, _ = litellm.cost_per_token(model=model, prompt_tokens=tokens, completion_tokens=0)
    except Exception:  # noqa: BLE001 -- an unpriced model (local, self-hosted)
        return tokens, 0.0
    return tokens, float(prompt_usd)


def recover_interrupted(db: Database, run_id: str) -> int:
    """Mark the run's ``started`` attempts ``interrupted`` with their estimated prompt cost.
    Call only when no worker runs the run (a resuming worker, before its first call).
    Returns how many there were."""
    n = 0
    for call in lm_calls.started_lm_calls(db, run_id):
        tokens, usd = estimated_prompt_cost(call.model, call.messages)
        if lm_calls.mark_lm_call_interrupted(db, call.id, tokens, usd):
            n += 1
    if n:
        log.warning("run %s: %d LM call(s) were in flight when its last worker stopped; recorded as interrupted", run_id, n)
    return n


def lm_failure_summary(calls: int, failed: int, interrupted: int, kinds: Optional[dict[str, int]]) -> str:
    """One sentence on a run's LM failures (its ``lm_calls*`` totals and the failures by
    kind), '' when there were none: ``31 of 104 LM calls failed (429 ×12, timeout ×9 …); 2 of
    104 LM calls were interrupted by a crash …``."""
    kinds = {k: n for k, n in (kinds or {}).items() if k not in ("crash", INTERRUPTED) and n}
    parts = []
    if failed:
        parts.append(f"{failed} of {calls} LM calls failed" + (f" ({describe_kinds(kinds)})" if kinds else ""))
    if interrupted:
        parts.append(f"{interrupted} of {calls} LM calls were interrupted by a crash (cost estimated from their prompts)")
    return "; ".join(parts)


def run_lm_failures(db: Database, run) -> str:
    """``lm_failure_summary`` of a run row."""
    return lm_failure_summary(run.lm_calls, run.lm_calls_failed, run.lm_calls_interrupted,
                              lm_calls.lm_failure_kinds(db, run.id))


def describe_kinds(kinds: dict[str, int]) -> str:
    """``{"rate_limit": 12, "timeout": 9}`` as ``429 ×12, timeout ×9`` (most frequent first)."""
    ordered = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{KIND_LABELS.get(k, k)} ×{n}" for k, n in ordered)
