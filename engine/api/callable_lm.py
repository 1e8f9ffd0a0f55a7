"""``optimize_anything(reflection_lm=fn)``: a Python callable as the reflection LM, as GEPA takes it.

GEPA's ``LanguageModel`` is ``fn(prompt) -> str``. Here the callable gets a model string
(``python/<name>-<hash>``) that the engine's LM client (``engine.lm.client``) calls directly,
without litellm: every call is recorded, timed and shown in the studio like any model's, and
never answered from the LM cache (the function is asked every time, as GEPA asks it: it may be
a model of its own, or count its calls). The callable gets what GEPA gives it: the reflection prompt as one string (the
messages' texts, blank-line separated), or, when the prompt carries images (side information
holding ``Image``s), a message list ``[{"role": "user", "content": [text part, image parts…]}]``
in OpenAI's format. It returns the answer. It may be called from several threads at once (a
step's K reflections); its cost is unknown, so it is recorded as $0, and its tokens are estimated
at four characters each.

The model string carries a hash of the callable's source: a resumed run finds its function by it.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import threading
from types import SimpleNamespace
from typing import Any, Callable

PROVIDER = "python"

_lock = threading.Lock()
_callables: dict[str, Callable] = {}


class CallableLMError(Exception):
    """The callable is missing, or answered something other than a string."""

    status_code = 400  # a request error: not retried


def model_for(fn: Callable) -> str:
    """Register the callable ``fn`` and return the model string that reaches it."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(fn, "__name__", None) or type(fn).__name__).strip("_")[:60] or "fn"
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = repr(fn)  # a builtin or a callable object defined in a REPL: its repr
    model = f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:10]}"
    with _lock:
        _callables[f"{PROVIDER}/{model}"] = fn
    return f"{PROVIDER}/{model}"


def prompt_for(messages: list[dict]) -> Any:
    """What the callable is given: one string, or GEPA's multimodal message list when a message
    holds image parts."""
    texts, images = [], []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p["text"] for p in content if p.get("type") == "text" and p.get("text"))
            images.extend(p for p in content if p.get("type") == "image_url")
    text = "\n\n".join(t for t in texts if t)
    return [{"role": "user", "content": [{"type": "text", "text": text}, *images]}] if images else text


def estimate_tokens(messages: Any) -> int:
    """Four characters a token, images not counted: the callable's tokenizer is unknown."""
    prompt = messages if isinstance(messages, str) else prompt_for(messages)
    text = prompt if isinstance(prompt, str) else prompt[0]["content"][0]["text"]
    return math.ceil(len(text) / 4)


def complete(model: str, messages: list[dict]) -> SimpleNamespace:
    """Call the callable registered as ``model``; its answer shaped as a chat completion."""
    with _lock:
        fn = _callables.get(model)
    if fn is None:  # a run resumed in a process where the callable was not given again
        raise CallableLMError(f"no Python callable is registered as {model} in this process: pass reflection_lm= again")
    answer = fn(prompt_for(messages))
    if not isinstance(answer, str):
        raise CallableLMError(f"reflection_lm returned {type(answer).__name__}, not str")
    usage = SimpleNamespace(prompt_tokens=estimate_tokens(messages), completion_tokens=math.ceil(len(answer) / 4))
    return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=answer))], usage=usage,
                           model=model, _hidden_params={"response_cost": 0.0})
