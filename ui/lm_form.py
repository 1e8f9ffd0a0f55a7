"""The new-run form's LMs, without Streamlit: the reflection LM's fields, and the task LM (what
an evaluator's ``lm()`` and a prompt evaluator call) and the judge (``llm_rubric``), each either
"the same as the reflection LM" — no table in the config, so the engine uses the reflection
LM, its API base and key variable included — or a model, API base and key variable of its own.
"""

from __future__ import annotations

from typing import Any

from ui import keys as K

REFLECTION = (K.NEW_MODEL, K.NEW_API_BASE, K.NEW_API_KEY_ENV)
# section -> (the "same as the reflection LM" toggle, its model, API base and key variable fields)
OWN = {"task_lm": (K.NEW_TASK_SAME, K.NEW_TASK_MODEL, K.NEW_TASK_API_BASE, K.NEW_TASK_API_KEY_ENV),
       "judge_lm": (K.NEW_JUDGE_SAME, K.NEW_JUDGE_MODEL, K.NEW_JUDGE_API_BASE, K.NEW_JUDGE_API_KEY_ENV)}
SETTINGS = ("model", "api_base", "api_key_env")
# which widget a "field: reason" line about an LM belongs next to, and what the summary calls it
FIELD_KEYS = {"reflection_lm": K.NEW_MODEL, "reflection_lm.temperature": K.NEW_TEMPERATURE}
for _section, _keys in (("reflection_lm", REFLECTION), *((s, fields[1:]) for s, fields in OWN.items())):
    FIELD_KEYS.setdefault(_section, _keys[0])  # a line about the table as a whole: by its model
    FIELD_KEYS.update({f"{_section}.{name}": key for name, key in zip(SETTINGS, _keys)})
LABELS = {K.NEW_TASK_MODEL: "task model", K.NEW_TASK_API_BASE: "task LM's API base",
          K.NEW_TASK_API_KEY_ENV: "task LM's key variable", K.NEW_JUDGE_MODEL: "judge model",
          K.NEW_JUDGE_API_BASE: "judge's API base", K.NEW_JUDGE_API_KEY_ENV: "judge's key variable"}


def defaults(model: str) -> dict:
    out: dict[str, Any] = {K.NEW_MODEL: model, K.NEW_API_BASE: "", K.NEW_API_KEY_ENV: "", K.NEW_TEMPERATURE: 0.7}
    for same, *fields in OWN.values():
        out.update({same: True, **{f: "" for f in fields}})
    return out


def _table(d: dict, fields: tuple[str, ...]) -> dict:
    model, base, env = ((d.get(f) or "").strip() for f in fields)
    return {"model": model, **({"api_base": base} if base else {}), **({"api_key_env": env} if env else {})}


def config_part(d: dict) -> dict:
    """The ``reflection_lm`` table, and a ``task_lm`` / ``judge_lm`` table for each with its own settings."""
    out = {"reflection_lm": {**_table(d, REFLECTION), "temperature": float(d.get(K.NEW_TEMPERATURE) or 0.0)}}
    for section, (same, *fields) in OWN.items():
        if not d.get(same, True):
            out[section] = _table(d, tuple(fields))
    return out


def draft_part(cfg: dict, model_default: str) -> dict:
    """The draft's LM fields for a (stored or TOML) config."""
    lm = cfg.get("reflection_lm") or {}
    out = {K.NEW_MODEL: lm.get("model") or model_default, K.NEW_API_BASE: lm.get("api_base") or "",
           K.NEW_API_KEY_ENV: lm.get("api_key_env") or "", K.NEW_TEMPERATURE: float(lm.get("temperature", 0.7))}
    for section, (same, *fields) in OWN.items():
        table = cfg.get(section) or {}
        out[same] = not table.get("model")
        out.update({f: table.get(name) or "" for f, name in zip(fields, SETTINGS)})
    return out


def upgraded_draft(saved: dict) -> dict:
    """A draft saved before the task LM had its own toggle: its task model, when it named one
    other than the reflection LM, is kept as the task LM's own."""
    if K.NEW_TASK_SAME not in saved and K.NEW_TASK_MODEL in saved:
        task = (saved.get(K.NEW_TASK_MODEL) or "").strip()
        saved = {**saved, K.NEW_TASK_SAME: not task or task == (saved.get(K.NEW_MODEL) or "").strip()}
    return saved


def settings_of(d: dict, section: str) -> tuple[str, str, str]:
    """(model, API base, key variable) that the LM of ``section`` uses: the reflection LM's
    when it is "the same"; what its "Test connection" checks."""
    if section == "reflection_lm" or d.get(OWN[section][0], True):
        return tuple((d.get(f) or "").strip() for f in REFLECTION)  # type: ignore[return-value]
    return tuple((d.get(f) or "").strip() for f in OWN[section][1:])  # type: ignore[return-value]
