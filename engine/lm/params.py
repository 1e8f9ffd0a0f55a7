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
