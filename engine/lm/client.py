"""All LM traffic of Refract goes through this module (built on litellm).

Contract of ``LMClient.complete``:
- never raises for provider problems: a failed call returns an ``LMResult`` whose ``error`` holds
  the exact reason (exception type and message, with the API key redacted);
- retries, with exponential back-off and jitter, only the transient errors of
  ``engine.lm.errors.retryable_types`` (rate limits, timeouts, connection errors, HTTP 5xx); bad requests,
  authentication, missing models and context-window overflows fail at once;
- at most ``cfg.max_concurrency`` calls to one model string are in flight in this process;
- answers are cached on disk by content (``storage.lm_cache``): a hit costs $0, has
  ``cached=True`` and the token counts of the original call; failures are never cached;
- a ``python/…`` model is a Python callable of the caller's (``engine.api.callable_lm``), called
  directly, without litellm (which is imported only when a call needs it), and never cached;
- API keys are read only from the environment variable named by ``cfg.api_key_env`` (or
  litellm's own defaults such as OPENAI_API_KEY) and are never returned, logged or stored;
- every request actually sent is reported to the caller's ``journal`` (``AttemptJournal``):
  ``begin`` just before it is sent, ``end`` with its own result and error kind, retries
  included, so that a caller can record each attempt as it happens;
- given a ``cancel`` (``engine.interrupt.Interrupt``), a call returns within a fraction of a
  second of it being set, with ``error_kind = "interrupted"``, the cost estimated from the
  prompt, and no retry; the request already sent is abandoned (its answer is dropped; the local
  model stops writing it: ``engine.lm.abandon``).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # bundled price list: offline, fast

from engine.config import LOCAL_MODEL, LMConfig  # noqa: E402
from engine.lm.errors import (  # noqa: E402
    describe, error_kind, is_retryable, missing_credentials, retry_after_seconds)
from engine.lm.defaults import default_lm_config, default_model, default_model_reason  # noqa: E402,F401
from engine.lm.keys import key_refusal  # noqa: E402
from engine.lm.providers import is_in_process  # noqa: E402
from engine.lm.loading import is_callable_model, litellm, setup_litellm  # noqa: E402,F401
from engine.interrupt import INTERRUPTED  # noqa: E402
from engine.lm.abandon import abandon_on  # noqa: E402
from storage.lm_cache import LMCache, cache_key  # noqa: E402

log = logging.getLogger("refract.lm")
NO_KEY = "no-key-needed"  # what a config-chosen server gets when the config names no key
_MAX_BACKOFF_SECONDS = 60.0


def warm_up() -> None:
    """Load what litellm loads on its first completion (provider modules, its default
    tokenizer): about 0.6 s that the first reflection of a worker would otherwise wait. A
    mocked completion: no provider is called, nothing is recorded or charged."""
    litellm.completion(model="openai/refract-warm-up", messages=[{"role": "user", "content": "warm up"}],
                       mock_response="ok")
    litellm.encoding  # noqa: B018  (a lazy attribute: reading it loads the tokenizer)


@dataclass
class LMResult:
    text: str
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    seconds: float
    cached: bool
    error: str | None
    error_kind: Optional[str] = None  # see engine.lm.errors.error_kind
    attempts: int = 0  # requests sent (0: a cache hit, or refused before sending)

    @property
    def ok(self) -> bool:
        return self.error is None


class AttemptJournal(Protocol):
    """Told about every request ``LMClient.complete`` sends (retries included)."""

    def begin(self, attempt: int) -> None:
        """Attempt ``attempt`` (0 first) is about to be sent."""

    def end(self, attempt: int, result: LMResult) -> None:
        """Attempt ``attempt`` ended: its own answer, or its error and ``error_kind``."""


class _InFlightLimit:
    """Counts calls in flight for one model; the limit is given per call, so configs that ask
    for different limits on the same model each get theirs (the smaller one binds)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0

    def acquire(self, limit: int, cancel=None) -> bool:
        """Take a slot; False (no slot taken) when ``cancel`` is set first."""
        with self._cond:
            while self._in_flight >= limit:
                if cancel is not None and cancel.is_set():
                    return False
                self._cond.wait(timeout=None if cancel is None else 0.2)
            self._in_flight += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()


# Process-wide, because a provider's rate limit is per account, not per LMClient.
_limits: dict[str, _InFlightLimit] = {}
_limits_lock = threading.Lock()


def _limit_for(model: str) -> _InFlightLimit:
    with _limits_lock:
        return _limits.setdefault(model, _InFlightLimit())


def _default_cache_dir() -> Path:
    from storage.db import data_dir

    return data_dir() / "lm-cache"


class LMClient:
    """One entry point for chat completions; safe to share between threads."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        backoff_base: float = 1.0,
    ) -> None:
        self.cache = LMCache(cache_dir or _default_cache_dir())
        self._sleep = sleep
        self._backoff_base = backoff_base

    def complete(
        self,
        cfg: LMConfig,
        messages: list[dict],
        *,
        sample_index: int = 0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        use_cache: bool = True,
        journal: Optional[AttemptJournal] = None,
        cancel=None,
    ) -> LMResult:
        """One chat completion; see the module docstring for the contract."""
        params = {
            "temperature": cfg.temperature if temperature is None else temperature,
            "max_tokens": cfg.max_tokens if max_tokens is None else max_tokens,
            "stop": list(stop) if stop else None,
            **cfg.kwargs,  # allow-listed at load (engine.lm.params): never the server or the key
        }
        started = time.monotonic()
        use_cache = use_cache and not is_callable_model(cfg.model)  # the caller's function answers every call, as in GEPA
        key = cache_key(model=cfg.model, api_base=cfg.api_base, messages=messages,
                        params=params, sample_index=sample_index)
        if use_cache:
            hit = self.cache.get(key)
            if hit is not None:
                return LMResult(text=hit["text"], model=cfg.model, tokens_in=hit["tokens_in"],
                                tokens_out=hit["tokens_out"], cost_usd=0.0,
                                seconds=time.monotonic() - started, cached=True, error=None)
        result = self._call_with_retries(cfg, messages, params, sample_index, journal, cancel)
        result.seconds = time.monotonic() - started
        if use_cache and result.error is None:
            self.cache.put(key, {"text": result.text, "tokens_in": result.tokens_in,
                                 "tokens_out": result.tokens_out, "cost_usd": result.cost_usd})
        log.info("lm call model=%s tokens=%d/%d cost=%.6f seconds=%.2f error=%s", cfg.model,
                 result.tokens_in, result.tokens_out, result.cost_usd, result.seconds,
                 "yes" if result.error else "no")
        return result

    def check(self, cfg: LMConfig) -> dict:
        """Test the connection: one tiny uncached call with no retries.

        Returns ``{"ok", "model", "api_base", "seconds", "answer", "error", "error_kind",
        "tokens_in", "tokens_out", "cost_usd"}``; ``error`` is the exact provider message when it
        failed, ``error_kind`` its kind (``engine.lm.errors.error_kind``).
        """
        quick = cfg.model_copy(update={"num_retries": 0})
        messages = [{"role": "user", "content": "Reply with exactly one word: ready"}]
        r = self.complete(quick, messages, temperature=0.0, max_tokens=16, use_cache=False)
        return {"ok": r.ok, "model": cfg.model, "api_base": cfg.api_base, "seconds": round(r.seconds, 3),
                "answer": r.text.strip(), "error": r.error, "error_kind": r.error_kind, "tokens_in": r.tokens_in,
                "tokens_out": r.tokens_out, "cost_usd": r.cost_usd}

    def context_window(self, cfg: LMConfig) -> int | None:
        """Tokens the model accepts in one request (prompt and answer), None when unknown.
        Known without loading the local model or calling a provider."""
        if cfg.model == LOCAL_MODEL:
            from engine.lm import local as local_lm

            return local_lm.context_window()
        if is_callable_model(cfg.model):
            return None
        try:
            info = litellm.get_model_info(cfg.model)
        except Exception:  # noqa: BLE001 -- unmapped model (self-hosted, custom): unknown
            return None
        return info.get("max_input_tokens") or info.get("max_tokens") or None

    def count_tokens(self, cfg: LMConfig, messages: list[dict]) -> int:
        """Prompt tokens of ``messages``: exact for the local model (loads it), litellm's
        tokenizer estimate for other models."""
        if cfg.model == LOCAL_MODEL:
            from engine.lm import local as local_lm

            return local_lm.count_tokens(messages)
        if is_callable_model(cfg.model):
            from engine.api.callable_lm import estimate_tokens

            return estimate_tokens(messages)
        return int(litellm.token_counter(model=cfg.model, messages=messages))

    # -- internals -------------------------------------------------------------------------

    def _call_with_retries(self, cfg: LMConfig, messages: list[dict], params: dict, sample_index: int,
                           journal: Optional[AttemptJournal], cancel=None) -> LMResult:
        if not is_callable_model(cfg.model):
            setup_litellm()  # before anything asks litellm about the model: the providers must be registered
        api_key = None
        refused = key_refusal(cfg.api_key_env, cfg.api_base)
        if refused:  # also for a run that reached the database without the config check (an import)
            return _failure(cfg, f"api_key_env: {refused}")
        if cfg.api_key_env:
            api_key = os.environ.get(cfg.api_key_env)
            if not api_key:
                return _failure(cfg, f"the environment variable {cfg.api_key_env} (api_key_env) is not set: "
                                     f"export it in the engine's environment, or choose another model")
        kwargs = {k: v for k, v in params.items() if v is not None}
        kwargs.update(model=cfg.model, messages=messages, timeout=cfg.timeout_seconds,
                      num_retries=0, max_retries=0, drop_params=True)
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if api_key:
            kwargs["api_key"] = api_key
        elif cfg.api_base:
            # A server the config chose gets only the key the config names: without one, litellm
            # would send the provider's key from the environment (OPENAI_API_KEY …) to it. Self-hosted
            # OpenAI-compatible servers usually need none, but the OpenAI client sends none without one.
            kwargs["api_key"] = NO_KEY
        missing = [] if is_callable_model(cfg.model) else missing_credentials(cfg.model, kwargs.get("api_key"),
                                                                              cfg.api_base)
        if missing:
            return _failure(cfg, f"no credentials for {cfg.model}: {', '.join(missing)} not set in the engine's "
                                 f"environment (set it, or name the variable in api_key_env)")
        if not is_callable_model(cfg.model) and is_in_process(cfg.model):
            # Our own providers honour a seed: the K proposals of one parent must differ.
            kwargs["seed"] = sample_index
        limit = _limit_for(cfg.model)
        attempt = 0
        while True:
            if (cancel is not None and cancel.is_set()) or not limit.acquire(cfg.max_concurrency, cancel):
                return _interrupted(cfg, cancel, sent=False)
            try:
                result, exc = self._attempt(cfg, kwargs, api_key, attempt, journal, cancel)
            finally:
                limit.release()
            result.attempts = attempt + 1
            if exc is None:
                return result
            if result.error_kind == INTERRUPTED or attempt >= cfg.num_retries or not is_retryable(exc):
                if attempt:
                    result.error = f"{result.error} (after {attempt + 1} attempts)"
                return result
            delay = self._backoff(attempt, exc)
            log.warning("lm call to %s failed (%s); retry %d/%d in %.1fs", cfg.model, result.error,
                        attempt + 1, cfg.num_retries, delay)
            if cancel is not None:
                if cancel.wait(delay):
                    return _interrupted(cfg, cancel, sent=False)
            else:
                self._sleep(delay)  # outside the limit: a waiting retry must not block other calls
            attempt += 1

    def _attempt(self, cfg: LMConfig, kwargs: dict, api_key: Optional[str], attempt: int,
                 journal: Optional[AttemptJournal], cancel=None) -> tuple[LMResult, Optional[BaseException]]:
        """One request, reported to the journal. (result, the exception when it failed)."""
        if journal is not None:
            journal.begin(attempt)
        t0 = time.monotonic()
        outcome = _send(kwargs) if cancel is None else _send_cancellable(kwargs, cancel)
        if outcome is None:
            result, exc = _interrupted(cfg, cancel, sent=True, messages=kwargs["messages"]), _Interrupted()
        elif isinstance(outcome, BaseException):
            exc = outcome
            result = _failure(cfg, describe(exc, api_key))
            result.error_kind = error_kind(exc)
        else:
            result, exc = _success(cfg, outcome), None
        result.seconds = time.monotonic() - t0
        if journal is not None:
            journal.end(attempt, result)
        return result, exc

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        retry_after = retry_after_seconds(exc)
        if retry_after is not None:
            return min(retry_after, _MAX_BACKOFF_SECONDS)
        base = min(self._backoff_base * (2 ** attempt), _MAX_BACKOFF_SECONDS)
        return base * random.uniform(0.5, 1.0)  # jitter: parallel callers do not retry in lockstep


class _Interrupted(Exception):
    """An attempt abandoned because its ``cancel`` was set."""


def _send(kwargs: dict):
    """litellm's response (a Python callable's answer, shaped as one), or the exception raised."""
    try:
        if is_callable_model(kwargs["model"]):
            from engine.api.callable_lm import complete

            return complete(kwargs["model"], kwargs["messages"])
        return litellm.completion(**kwargs)
    except Exception as caught:  # noqa: BLE001 -- every provider failure becomes an LMResult
        return caught


def _send_cancellable(kwargs: dict, cancel):
    """``_send`` in a thread of its own, so that the caller can stop waiting: the response or
    exception, or None when ``cancel`` was set first (the thread is abandoned; it ends when
    the provider answers, or at once for the in-process local model, which is told)."""
    box: list = []
    done, abandon = threading.Event(), threading.Event()

    def send() -> None:
        with abandon_on(abandon):
            box.append(_send(kwargs))
        done.set()

    threading.Thread(target=send, daemon=True, name="lm-request").start()
    while not done.wait(0.1):
        if cancel.is_set():
            abandon.set()
            return None
    return box[0]


def _interrupted(cfg: LMConfig, cancel, sent: bool, messages: Optional[list] = None) -> LMResult:
    """The result of a call cut off by ``cancel``: when its request was sent, the prompt's
    estimated cost (the provider may bill it; the answer is unknown)."""
    result = _failure(cfg, f"interrupted ({cancel.reason or 'the run was interrupted'})"
                           + ("; the request was abandoned, its cost estimated from the prompt" if sent else ""))
    result.error_kind = INTERRUPTED
    if sent:
        from engine.lm.journal import estimated_prompt_cost

        result.tokens_in, result.cost_usd = estimated_prompt_cost(cfg.model, messages or [])
    return result


def _success(cfg: LMConfig, response) -> LMResult:
    choice = response.choices[0]
    text = getattr(choice.message, "content", None) or ""
    usage = getattr(response, "usage", None)
    tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
    tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
    return LMResult(text=text, model=cfg.model, tokens_in=tokens_in, tokens_out=tokens_out,
                    cost_usd=_cost(response, cfg.model), seconds=0.0, cached=False, error=None)


def _failure(cfg: LMConfig, error: str) -> LMResult:
    return LMResult(text="", model=cfg.model, tokens_in=0, tokens_out=0, cost_usd=0.0,
                    seconds=0.0, cached=False, error=error)


def _cost(response, model: str) -> float:
    """Dollars from litellm's offline price map; 0 for models it does not know."""
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost")
    if isinstance(cost, (int, float)) and cost >= 0:
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=response, model=model))
    except Exception:  # noqa: BLE001 -- an unmapped model (local, self-hosted) costs nothing we know of
        return 0.0


__all__ = ["AttemptJournal", "LMClient", "LMResult", "LOCAL_MODEL", "default_lm_config", "default_model",
           "default_model_reason", "is_retryable"]
