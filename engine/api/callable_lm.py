"""``optimize_anything(reflection_lm=fn)``: a Python callable as the reflection LM, as GEPA takes it.

GEPA's ``LanguageModel`` is ``fn(prompt) -> str``. Here the callable is served to the engine as a
litellm provider of this process (``python/<name>-<hash>``), so every call goes through the same
client as any model: recorded, retried, timed, cached on disk, shown in the studio. The callable
gets the reflection prompt as one string (the messages' texts, blank-line separated: what GEPA's
default prompt renderer hands it) and returns the answer. It may be called from several threads at
once (a step's K reflections); its cost is unknown, so it is recorded as $0, and tokens are
counted with litellm's default tokenizer.

The model string carries a hash of the callable's source, so an edited function does not get the
old one's cached answers; the same script run again does, as with any model.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
from typing import Callable

from litellm.llms.custom_llm import CustomLLM, CustomLLMError
from litellm.types.utils import ModelResponse, Usage

from engine.lm.providers import register_provider

PROVIDER = "python"

_lock = threading.Lock()
_callables: dict[str, Callable] = {}


def model_for(fn: Callable) -> str:
    """Register the callable ``fn`` and return the model string that reaches it."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(fn, "__name__", None) or type(fn).__name__).strip("_")[:60] or "fn"
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = repr(fn)  # a builtin or a callable object defined in a REPL: its repr
    model = f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:10]}"
    with _lock:
        _callables[model] = fn
    register_provider(PROVIDER, CallableLLM())
    return f"{PROVIDER}/{model}"


def prompt_text(messages: list[dict]) -> str:
    """The conversation as one string (a retry adds the model's answer and what was wrong with it)."""
    return "\n\n".join(m["content"] for m in messages if isinstance(m.get("content"), str) and m["content"])


class CallableLLM(CustomLLM):
    def completion(self, model, messages, api_base, custom_prompt_dict, model_response: ModelResponse,
                   print_verbose, encoding, api_key, logging_obj, optional_params: dict, *args, **kwargs):
        import litellm

        with _lock:
            fn = _callables.get(model)
        if fn is None:  # a run resumed in a process where the callable was not given again
            raise CustomLLMError(status_code=400, message=f"no Python callable is registered as {PROVIDER}/{model} in "
                                                          "this process: pass reflection_lm= again")
        prompt = prompt_text(messages)
        answer = fn(prompt)
        if not isinstance(answer, str):
            raise CustomLLMError(status_code=400, message=f"reflection_lm returned {type(answer).__name__}, not str")
        tokens_in = litellm.token_counter(text=prompt)
        tokens_out = litellm.token_counter(text=answer)
        model_response.choices[0].message.content = answer
        model_response.usage = Usage(prompt_tokens=tokens_in, completion_tokens=tokens_out,
                                     total_tokens=tokens_in + tokens_out)
        model_response.model = f"{PROVIDER}/{model}"
        model_response._hidden_params["response_cost"] = 0.0
        return model_response
