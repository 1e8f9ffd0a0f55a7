"""Registration of in-process litellm providers (``CustomLLM`` handlers).

litellm routes ``"<provider>/<model>"`` to the handler registered under ``<provider>`` in
``litellm.custom_provider_map``; it re-reads that list on every call, so a provider can be
registered at any time. The product registers one: ``local``, the offline default model on the
CPU (``engine.lm.local``).

Test hook: ``REFRACT_LM_PLUGINS`` names modules (comma-separated import paths) that a
``python -m engine`` process (or a Python process calling ``optimize_anything``) imports at start, before it reads any run; such a module registers
its providers with ``register_provider`` when imported. The test suite uses it to give worker
subprocesses its scripted LM (``tests.support.scripted_lm``); the product itself never names a
test module. The variable is read from the engine's own environment, which is trusted like
``PYTHONPATH``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from litellm.llms.custom_llm import CustomLLM

# litellm is imported inside the functions: it takes seconds to import, and commands that never
# call an LM (status, export, steering commands) should not pay for it

PLUGINS_ENV = "REFRACT_LM_PLUGINS"


def register_provider(name: str, handler: "CustomLLM") -> None:
    """Route ``name/...`` models to ``handler``; replaces an earlier handler of that name."""
    import litellm

    entries = [e for e in (litellm.custom_provider_map or []) if e.get("provider") != name]
    entries.append({"provider": name, "custom_handler": handler})
    litellm.custom_provider_map = entries


def is_in_process(model: str) -> bool:
    """Whether ``model`` is served by a provider registered in this process (they honour a seed)."""
    import litellm

    provider = model.split("/", 1)[0]
    return any(e.get("provider") == provider for e in (litellm.custom_provider_map or []))


def is_local(model: str) -> bool:
    """Whether ``model`` is the built-in offline model (``local/...``): a small model on the CPU
    that reads a few dozen tokens a second, so its prompts and answers are kept short."""
    return model.split("/", 1)[0] == "local"


def one_at_a_time(lm) -> bool:
    """Whether the LM of these settings (an ``LMConfig``) answers one request at a time: the
    local model (one runtime, requests queue) or ``max_concurrency = 1``. Concurrent requests
    to it take as long together as one after the other."""
    return is_local(lm.model) or lm.max_concurrency == 1


def register_builtin_providers() -> None:
    """Register ``local`` (cheap: nothing loads until a first call)."""
    from engine.lm.local import LocalLLM

    register_provider("local", LocalLLM())


def _plugin_names(environ: dict | None) -> list[str]:
    names = (environ if environ is not None else os.environ).get(PLUGINS_ENV, "").split(",")
    return [n.strip() for n in names if n.strip()]


def check_plugins(environ: dict | None = None) -> list[str]:
    """Check that the modules named in ``REFRACT_LM_PLUGINS`` exist, without importing them (the
    LM client imports them when it is first imported); their names. A missing one is an error
    naming the variable, raised at start (a typo must not fall back silently)."""
    names = _plugin_names(environ)
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:
            found = False
        if not found:
            raise ValueError(f"{PLUGINS_ENV}: cannot import {name!r}: no such module")
    return names


def load_plugins(environ: dict | None = None) -> list[str]:
    """Import the modules named in ``REFRACT_LM_PLUGINS``; returns their names. A module that
    cannot be imported is an error naming the variable (a typo must not fall back silently)."""
    names = _plugin_names(environ)
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"{PLUGINS_ENV}: cannot import {name!r}: {exc}") from None
        loaded.append(name)
    return loaded
