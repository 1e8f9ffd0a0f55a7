"""The prompt path of the new-run form, without Streamlit: its part of the draft, the
``[prompt_evaluator]`` table it becomes, and back (a loaded TOML, a duplicated run). Its task LM
is one of the form's LMs (``ui.lm_form``).

The assertions live in the draft as rows of the table the page shows ({"type", "value",
"weight"}, every value as text); ``assertion_config`` turns a row into what the config expects
(a whole number for ``max_length``, JSON text for ``json_schema``) and leaves the checking to it,
so a wrong value is reported by the config's own ``prompt_evaluator.assert.N.value: reason``.
"""

from __future__ import annotations

import json
from typing import Any

from engine.prompt_evaluator import TYPES
from ui import keys as K

KINDS = ("code", "prompt")
STARTER = [{"type": "icontains", "value": "{label}", "weight": 1.0}]
# which widget a "field: reason" line of the prompt path belongs next to
FIELD_KEYS = {"prompt_evaluator": K.NEW_PROMPT_ASSERTS, "prompt_evaluator.assert": K.NEW_PROMPT_ASSERTS,
              "prompt_evaluator.user": K.NEW_PROMPT_USER, "prompt_evaluator.system": K.NEW_PROMPT_SYSTEM}
LABELS = {K.NEW_PROMPT_ASSERTS: "assertions", K.NEW_PROMPT_USER: "user message", K.NEW_PROMPT_SYSTEM: "system message"}


def defaults() -> dict:
    return {K.NEW_EVAL_KIND: KINDS[0], K.NEW_PROMPT_SYSTEM: "{candidate}", K.NEW_PROMPT_USER: "",
            K.NEW_PROMPT_ASSERTS: [dict(r) for r in STARTER]}


def is_prompt(draft: dict) -> bool:
    return draft.get(K.NEW_EVAL_KIND) == "prompt"


def assertion_config(row: dict) -> dict:
    """One table row as a ``[[prompt_evaluator.assert]]`` table."""
    kind = str(row.get("type") or "").strip()
    raw = row.get("value")
    text = "" if raw is None or (isinstance(raw, float) and raw != raw) else str(raw)  # an emptied cell is NaN
    out: dict[str, Any] = {"type": kind}
    if kind == "max_length" and text.strip().isdigit():
        out["value"] = int(text.strip())
    elif text.strip() or kind != "is_json":
        out["value"] = text if text.strip() else None
    weight = row.get("weight")
    out["weight"] = 1.0 if weight is None or weight != weight else float(weight)
    threshold = row.get("threshold")
    if threshold is not None and threshold == threshold and float(threshold) != 1.0:  # NaN: an emptied cell
        out["threshold"] = float(threshold)
    name = row.get("name")
    if isinstance(name, str) and name.strip():
        out["name"] = name.strip()
    return {k: v for k, v in out.items() if v is not None}


def config_part(draft: dict) -> dict:
    """The ``prompt_evaluator`` entry of the config a prompt draft describes."""
    rows = [r for r in draft.get(K.NEW_PROMPT_ASSERTS) or [] if str(r.get("type") or "").strip()]
    system = draft.get(K.NEW_PROMPT_SYSTEM)
    pe: dict[str, Any] = {"user": draft.get(K.NEW_PROMPT_USER) or "", "assert": [assertion_config(r) for r in rows]}
    if system is not None and system.strip():
        pe["system"] = system
    return {"prompt_evaluator": pe}


def draft_part(cfg: dict) -> dict:
    """The prompt path's draft entries for a config that has a ``prompt_evaluator``."""
    pe = cfg["prompt_evaluator"]
    rows = []
    for a in pe.get("assert") or pe.get("assertions") or []:
        value = a.get("value")
        text = json.dumps(value) if isinstance(value, (dict, list)) else ("" if value is None else str(value))
        rows.append({"type": a.get("type", ""), "value": text, "weight": float(a.get("weight", 1.0)),
                     "threshold": float(a.get("threshold", 1.0)), "name": a.get("name") or ""})
    return {K.NEW_EVAL_KIND: "prompt", K.NEW_PROMPT_SYSTEM: pe.get("system") or "{candidate}",
            K.NEW_PROMPT_USER: pe.get("user", ""), K.NEW_PROMPT_ASSERTS: rows}


def placeholders_hint(rows: list) -> str:
    """What the templates may name, from the dataset's first row."""
    fields = sorted(rows[0]) if rows and isinstance(rows[0], dict) else []
    names = ", ".join("{" + f + "}" for f in fields)
    return f"Columns: {', '.join(fields)}. Use them as {names} in the user message and in assertion values." if fields \
        else "The examples have no named columns: a prompt evaluator needs JSON objects or CSV rows."


ASSERTION_HELP = ("equals / contains / icontains / not_contains: text (placeholders allowed) · regex: a pattern · "
                  "is_json: no value · json_schema: a JSON schema · max_length: characters · python: an expression "
                  "over output and example · llm_rubric: what the judge (below; the reflection LM by default) checks. " +
                  "Types: " + ", ".join(TYPES))
