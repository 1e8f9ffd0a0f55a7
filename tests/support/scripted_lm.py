"""A scripted LM for tests and benchmarks: litellm provider ``scripted`` (test code, not product).

Importing this module registers the provider in this process. Any model string
``scripted/<anything>`` is answered by a Python function the test installs::

    from tests.support.scripted_lm import install_script
    stats = install_script(lambda messages, params: "```\\nbetter text\\n```", latency=0.05,
                           price_per_token=1e-6)
    LMClient().complete(LMConfig(model="scripted/toy"), messages)
    stats.calls, stats.max_in_flight

The function gets the chat ``messages`` and ``params`` = {"model", "temperature", "max_tokens",
"stop", "sample_index"} and returns the answer text. It may raise a litellm exception (e.g.
``litellm.RateLimitError``) to simulate a provider failure. Stop sequences are applied to its
answer as a provider would. Usage counts one token per whitespace-separated word (deterministic,
never zero for non-empty text) and costs ``price_per_token`` dollars per token in and out.

A worker *process* cannot receive a function: give it ``REFRACT_LM_PLUGINS=tests.support.scripted_lm``
(the engine's test hook, see ``engine.lm.providers``: ``python -m engine`` imports this module, which
registers the provider) and ``REFRACT_SCRIPTED_LM=package.module:function`` (optionally
``REFRACT_SCRIPTED_LATENCY`` seconds, ``REFRACT_SCRIPTED_PRICE`` dollars per token); the provider
imports the function itself on first use. ``SUBPROCESS_ENV`` holds the first variable.

A model string may end in ``@<seconds>`` (``scripted/toy@1.5``) to answer after that many seconds
instead of the installed latency: one worker process then serves tests that need different paces.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from litellm.llms.custom_llm import CustomLLM, CustomLLMError
from litellm.types.utils import ModelResponse, Usage

from engine.lm.providers import PLUGINS_ENV, register_provider

Script = Callable[[list[dict], dict], str]
ENV_SCRIPT = "REFRACT_SCRIPTED_LM"
SUBPROCESS_ENV = {PLUGINS_ENV: __name__}


@dataclass
class ScriptStats:
    """What the scripted provider saw; safe to read while calls run."""

    calls: list[tuple[list[dict], dict]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class _Installed:
    fn: Script
    latency: float
    price_per_token: float
    stats: ScriptStats


_installed: _Installed | None = None


def install_script(fn: Script, latency: float = 0.0, price_per_token: float = 0.0) -> ScriptStats:
    """Answer every ``scripted/*`` call with ``fn`` after ``latency`` seconds; returns fresh stats."""
    global _installed
    register_provider("scripted", ScriptedLLM())
    _installed = _Installed(fn=fn, latency=latency, price_per_token=price_per_token, stats=ScriptStats())
    return _installed.stats


def uninstall_script() -> None:
    global _installed
    _installed = None


def _from_environment() -> _Installed | None:
    target = os.environ.get(ENV_SCRIPT, "")
    if ":" not in target:
        return None
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    return _Installed(fn=fn, latency=float(os.environ.get("REFRACT_SCRIPTED_LATENCY", 0) or 0),
                      price_per_token=float(os.environ.get("REFRACT_SCRIPTED_PRICE", 0) or 0),
                      stats=ScriptStats())


def _current() -> _Installed:
    global _installed
    if _installed is None:
        _installed = _from_environment()
    if _installed is None:
        raise CustomLLMError(status_code=400, message=(
            "no scripted LM is installed: call tests.support.scripted_lm.install_script(fn) in this process, "
            f"or set {ENV_SCRIPT}=package.module:function for a worker process"))
    return _installed


def _words(text: str) -> int:
    return len(text.split())


def _latency(model: str, installed: float) -> float:
    _, at, seconds = model.rpartition("@")
    return float(seconds) if at else installed


def _apply_stop(text: str, stop) -> str:
    for s in ([stop] if isinstance(stop, str) else stop or []):
        if s and s in text:
            text = text[: text.index(s)]
    return text


class ScriptedLLM(CustomLLM):
    def completion(self, model, messages, api_base, custom_prompt_dict, model_response: ModelResponse,
                   print_verbose, encoding, api_key, logging_obj, optional_params: dict, *args, **kwargs):
        script = _current()
        stats = script.stats
        params = {"model": model, "temperature": optional_params.get("temperature"),
                  "max_tokens": optional_params.get("max_tokens"), "stop": optional_params.get("stop"),
                  "sample_index": optional_params.get("seed", 0)}
        with stats.lock:
            stats.calls.append((messages, params))
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            latency = _latency(model, script.latency)
            if latency:
                time.sleep(latency)
            text = _apply_stop(str(script.fn(messages, params)), params["stop"])
        finally:
            with stats.lock:
                stats.in_flight -= 1
        tokens_in = sum(_words(m["content"]) for m in messages if isinstance(m.get("content"), str))
        tokens_out = _words(text)
        model_response.choices[0].message.content = text
        model_response.usage = Usage(prompt_tokens=tokens_in, completion_tokens=tokens_out,
                                     total_tokens=tokens_in + tokens_out)
        model_response.model = f"scripted/{model}"
        model_response._hidden_params["response_cost"] = (tokens_in + tokens_out) * script.price_per_token
        return model_response


register_provider("scripted", ScriptedLLM())
