"""A sandboxed worker's frames as the engine reads them: a result frame becomes an
``EvalOutcome`` (``outcome_from_frame``, trusting none of its types), and an evaluator's
``lm()`` request is answered through the engine and costed (``LMAccount``). Used by the local
pool, the Dask executor and (``LMAccount``) the in-process executor of the Python API."""

from __future__ import annotations

import math
from typing import Optional

from engine.executor import EvalOutcome, EvalTask, LMHandler

# Parameters an evaluator may pass to lm(). Anything else (api_base, api_key, base_url…) could
# point the engine's key at another server, so it is refused.
LM_PARAMS = frozenset({"temperature", "max_tokens", "top_p", "stop", "seed", "response_format",
                       "presence_penalty", "frequency_penalty", "n", "logprobs", "top_logprobs"})


class LMAccount:
    """Answers one task's ``lm()`` requests through the engine's handler and sums their cost.
    The handler returns the text, or a dict {"text", "cost_usd", "tokens_in", "tokens_out"}."""

    def __init__(self, handler: Optional[LMHandler], task: EvalTask) -> None:
        self.handler, self.task = handler, task
        self.cost, self.tokens_in, self.tokens_out = 0.0, 0, 0

    def __call__(self, frame: dict) -> dict:
        if self.handler is None:
            return {"type": "lm_error", "error": "lm() is not available: this run has no task LM ([task_lm] in the config)"}
        params = dict(frame.get("params") or {})
        refused = sorted(set(params) - LM_PARAMS)
        if refused:
            return {"type": "lm_error", "error": f"lm() does not accept {', '.join(refused)}; "
                                                 f"allowed parameters: {', '.join(sorted(LM_PARAMS))}"}
        try:
            answer = self.handler(list(frame.get("messages") or []), frame.get("model"), params, self.task)
        except Exception as exc:  # the evaluator sees the engine's refusal as LMError
            return {"type": "lm_error", "error": f"{type(exc).__name__}: {exc}"}
        if isinstance(answer, dict):
            self.cost += float(answer.get("cost_usd") or 0.0)
            self.tokens_in += int(answer.get("tokens_in") or 0)
            self.tokens_out += int(answer.get("tokens_out") or 0)
            answer = answer.get("text", "")
        return {"type": "lm_result", "text": str(answer)}


def outcome_from_frame(frame: dict, seconds: float, lm: Optional[LMAccount] = None) -> EvalOutcome:
    """Build an EvalOutcome from a worker's result frame, trusting none of its types."""
    error, score, side = frame.get("error"), frame.get("score"), frame.get("side_info")
    if not isinstance(side, dict):
        side, error = {}, error or "the worker sent a malformed result (side_info is not a dict)"
    if error is None and (not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score)):
        error = "the worker sent a malformed result (score is not a finite number)"
    out = EvalOutcome(score=0.0 if error else float(score), side_info=side,
                      error=None if error is None else str(error), seconds=seconds)
    if lm is not None:
        out.lm_cost_usd, out.lm_tokens_in, out.lm_tokens_out = lm.cost, lm.tokens_in, lm.tokens_out
    return out
