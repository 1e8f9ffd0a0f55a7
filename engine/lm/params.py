"""Extra LM parameters a run may pass to litellm (``[reflection_lm.kwargs]``), by allow-list.

GEPA forwards ``reflection_lm_kwargs`` to ``litellm.completion`` unchecked. Here only sampling
and reasoning parameters pass: anything that could send the request (and the key) elsewhere —
``api_base``, ``base_url``, ``api_key``, ``custom_llm_provider``, headers — is refused, so
``api_base`` stays the one place that chooses the server.
"""

from __future__ import annotations

from typing import Any

ALLOWED = frozenset({
    "reasoning_effort", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "thinking", "verbosity",
})
OWN_FIELDS = {"temperature", "max_tokens", "timeout", "num_retries"}


def check_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kwargs unchanged, or ValueError naming the first refused key and why."""
    for key, value in kwargs.items():
        if key in OWN_FIELDS:
            raise ValueError(f"{key!r} has its own field: set {key.replace('timeout', 'timeout_seconds')} = … "
                             "beside model, not in kwargs")
        if key not in ALLOWED:
            raise ValueError(f"{key!r} is not passed to the LM (it could redirect the request or the key); "
                             f"allowed: {', '.join(sorted(ALLOWED))}; use api_base to choose the server")
        if not isinstance(value, (str, int, float, bool, dict)):
            raise ValueError(f"{key!r} must be a string, number, boolean or table, not {type(value).__name__}")
    return kwargs


def evaluator_lm(cfg, model, params: dict):
    """(LMConfig, purpose) that answers an evaluator's ``lm(model=…, **params)`` in run ``cfg``:
    the task LM (``[task_lm]``, else the reflection LM), or with ``model="judge"`` the judge
    (``[judge_lm]``, else the reflection LM). The engine's key pays for these calls, so an
    evaluator may not name another model (RuntimeError); of ``params`` only temperature and
    max_tokens change the call."""
    lm_cfg, purpose = cfg.task_lm or cfg.reflection_lm, "task"
    if model == "judge":
        lm_cfg, purpose = cfg.judge_lm or cfg.reflection_lm, "judge"
    elif model and model != lm_cfg.model:
        raise RuntimeError(f"lm(model={model!r}) is refused: evaluators may only call the run's task model "
                           f"{lm_cfg.model!r} (or model=\"judge\"); set [task_lm] model in the run config to change it")
    allowed = {k: v for k, v in (params or {}).items() if k in ("temperature", "max_tokens")}
    return (lm_cfg.model_copy(update=allowed) if allowed else lm_cfg), purpose
