"""Which LM a new run uses when the user did not choose one.

Rule: ``REFRACT_LM_MODEL`` if set; otherwise the first provider whose API key is present in the
environment (table below); otherwise the local model on the CPU, which needs no key and no
network. ``default_model_reason()`` says which rule applied, in words a user can act on.
Only the *names* of variables are looked at and returned, never their values.
"""

from __future__ import annotations

import os

from engine.config import LOCAL_MODEL, LMConfig

# (environment variable holding the key, model used when it is the first one set)
PROVIDER_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("OPENAI_API_KEY", "openai/gpt-4.1-mini"),
    ("ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5"),
    ("GEMINI_API_KEY", "gemini/gemini-2.5-flash"),
    ("MISTRAL_API_KEY", "mistral/mistral-small-latest"),
    ("DEEPSEEK_API_KEY", "deepseek/deepseek-chat"),
)
OVERRIDE_ENV = "REFRACT_LM_MODEL"


def _choice() -> tuple[str, str | None, str]:
    override = os.environ.get(OVERRIDE_ENV, "").strip()
    if override:
        return override, None, f"{OVERRIDE_ENV} is set: using {override}"
    for env, model in PROVIDER_DEFAULTS:
        if os.environ.get(env, "").strip():
            return model, env, f"{env} is set: using {model}"
    names = ", ".join(env for env, _ in PROVIDER_DEFAULTS)
    return LOCAL_MODEL, None, (
        f"no provider API key found in the environment ({names}): using the local model "
        f"{LOCAL_MODEL} on the CPU (no network needed; set one of those variables or "
        f"{OVERRIDE_ENV} to use another model)"
    )


def default_model() -> str:
    """The litellm model string a new run uses by default."""
    return _choice()[0]


def default_model_reason() -> str:
    """One sentence saying which model is the default and why."""
    return _choice()[2]


def default_lm_config(**overrides) -> LMConfig:
    """An ``LMConfig`` for the default model (``api_key_env`` names the key variable found);
    keyword arguments override fields, e.g. ``default_lm_config(temperature=0.3)``."""
    from engine.lm.keys import bases_for

    model, env, _ = _choice()
    fields = {"model": model, "api_key_env": env}
    tied = bases_for(env) if env else None
    if tied and len(tied) == 1:  # the deployment ties that key to one server: send it there
        fields["api_base"] = tied[0]
    if model == LOCAL_MODEL:
        fields["max_concurrency"] = 1  # one CPU model: requests queue anyway, say so in the config
    fields.update(overrides)
    return LMConfig(**fields)
