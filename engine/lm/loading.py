"""litellm for the LM client, imported at its first use, and the models that never need it.

Importing litellm costs seconds of CPU. A run whose every LM call goes to a Python callable of
the caller's (``python/…``, ``engine.api.callable_lm``) never imports it; any other call sets it
up once (``setup_litellm``): the bundled price list, no banners, the built-in ``local`` provider
and the test hook's providers (``engine.lm.providers``).
"""

from __future__ import annotations

import os
import threading

from engine.lm.providers import load_plugins, register_builtin_providers

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # bundled price list: offline, fast

CALLABLE_PROVIDER = "python"  # a Python callable of the caller's (engine.api.callable_lm), called directly
_setup_lock = threading.RLock()  # RLock: a plugin loaded during the set-up may use litellm itself
_litellm_module = None


def setup_litellm():
    """Import litellm and set it up, once: seconds of CPU that a run whose every LM is a Python
    callable never pays. The test hook's providers (engine.lm.providers) load with it."""
    global _litellm_module
    with _setup_lock:
        if _litellm_module is None:
            import litellm as module

            module.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stderr
            _litellm_module = module
            register_builtin_providers()
            load_plugins()  # the test hook: every process that calls an LM model sets litellm up here
    return _litellm_module


class _Litellm:
    """``litellm``, imported (and set up) at the first attribute read."""

    def __getattr__(self, name: str):
        return getattr(setup_litellm(), name)


litellm = _Litellm()


def is_callable_model(model: str) -> bool:
    return model.split("/", 1)[0] == CALLABLE_PROVIDER

