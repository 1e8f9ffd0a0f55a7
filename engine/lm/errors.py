"""How engine.lm.client classifies and words provider errors (kept apart so the rules are easy to audit).

- ``is_retryable``: which failures are worth another attempt (transient ones only);
- ``describe``: the exact error for the user, with the API key redacted and litellm's
  traceback / bug-report noise removed;
- ``missing_credentials``: credential variables a provider needs that the environment lacks;
- ``retry_after_seconds``: a provider's ``Retry-After`` hint, when it sent one;
- ``error_kind``: a short name for the kind of failure, recorded with each attempt.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # bundled price list: offline, fast


def _loaded_litellm():
    """litellm when this process has imported it, else None: an error can only be one of its
    types once it is loaded (a Python callable's errors are not), and importing it takes seconds."""
    return sys.modules.get("litellm")


def retryable_types() -> tuple[type[BaseException], ...]:
    """Errors worth another attempt: the same request may succeed a moment later."""
    litellm = _loaded_litellm()
    if litellm is None:
        return ()
    return (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError, litellm.InternalServerError,
            litellm.ServiceUnavailableError, litellm.BadGatewayError)


def is_retryable(exc: BaseException) -> bool:
    """Rate limit, timeout, connection error or any HTTP 5xx; never a 4xx."""
    litellm = _loaded_litellm()
    if litellm is not None and isinstance(exc, litellm.ContextWindowExceededError):
        return False
    if isinstance(exc, retryable_types()):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


# litellm appends a traceback and a bug-report link to some messages: the user needs neither.
_NOISE_MARKERS = ("\nTraceback (most recent call last)", "\n\nThis looks like a bug in LiteLLM")
_MAX_ERROR_CHARS = 2000


def describe(exc: BaseException, api_key: str | None) -> str:
    """The exception's type and message (litellm's own prefix kept), key redacted, noise cut."""
    text = str(exc)
    for marker in _NOISE_MARKERS:
        text = text.split(marker, 1)[0]
    text = f"{type(exc).__name__}: {text.strip()}"
    if api_key:
        text = text.replace(api_key, "***")
    return text[:_MAX_ERROR_CHARS]


def missing_credentials(model: str, api_key: str | None, api_base: str | None) -> list[str]:
    """Credential variables litellm says the provider needs and the environment lacks.

    Checked before calling because litellm reports some of them (OpenAI's) as a 500, which
    would be retried in vain. Non-secret settings it lists (e.g. OLLAMA_API_BASE, which has a
    working default) are ignored.
    """
    import litellm

    try:
        report = litellm.validate_environment(model=model, api_key=api_key, api_base=api_base)
    except Exception:  # noqa: BLE001 -- an unknown provider: let the call itself say what is wrong
        return []
    missing = report.get("missing_keys") or []
    secret = [k for k in missing if any(w in k for w in ("KEY", "SECRET", "TOKEN"))]
    return secret if secret and len(secret) == len(missing) else []


def retry_after_seconds(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        value = float(headers.get("retry-after"))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


# what an undecodable answer looks like once the OpenAI client has wrapped it
_BAD_BODY_MARKERS = ("Expecting value", "Received response", "JSONDecodeError", "Unterminated string",
                     "Extra data", "Invalid control character")


# litellm reports a refused connection to an OpenAI-compatible api_base as a 500
# (InternalServerError: "OpenAIException - Connection error."): no server answered at all
_CONNECTION_MARKER = "Connection error"


def error_kind(exc: BaseException) -> str:
    """``rate_limit`` (429), ``timeout``, ``bad_body`` (an answer that is not the JSON of a
    completion), ``server_error`` (other 5xx), ``connection``, or ``request`` (any 4xx)."""
    litellm = _loaded_litellm()
    if (litellm is not None and isinstance(exc, litellm.RateLimitError)) or getattr(exc, "status_code", None) == 429:
        return "rate_limit"
    if litellm is not None and isinstance(exc, litellm.Timeout):
        return "timeout"
    if any(m in str(exc) for m in _BAD_BODY_MARKERS):
        return "bad_body"
    if (litellm is not None and isinstance(exc, litellm.APIConnectionError)) or _CONNECTION_MARKER in str(exc):
        return "connection"
    return "server_error" if is_retryable(exc) else "request"
