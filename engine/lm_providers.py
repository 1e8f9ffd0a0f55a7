"""Registration of Refract's in-process litellm providers (``CustomLLM`` handlers).

litellm routes ``"<provider>/<model>"`` to the handler registered under ``<provider>`` in
``litellm.custom_provider_map``; it re-reads that list on every call, so a provider can be
registered at any time. Two providers run in this process:
- ``local``: the offline default model on the CPU (``engine.local_lm``);
- ``scripted``: answers from a Python function, for tests and benchmarks (``engine.testing_lm``).
"""

from __future__ import annotations

import litellm
from litellm.llms.custom_llm import CustomLLM

IN_PROCESS_PROVIDERS = frozenset({"local", "scripted"})


def register_provider(name: str, handler: CustomLLM) -> None:
    """Route ``name/...`` models to ``handler``; replaces an earlier handler of that name."""
    entries = [e for e in (litellm.custom_provider_map or []) if e.get("provider") != name]
    entries.append({"provider": name, "custom_handler": handler})
    litellm.custom_provider_map = entries


def register_builtin_providers() -> None:
    """Register ``local`` and ``scripted`` (cheap: nothing loads until a first call), so that a
    worker process can serve run configs that name either."""
    from engine.local_lm import LocalLLM
    from engine.testing_lm import ScriptedLLM

    register_provider("local", LocalLLM())
    register_provider("scripted", ScriptedLLM())
