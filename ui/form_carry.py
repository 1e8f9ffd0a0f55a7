"""Settings a config holds that the new-run form has no field for.

The form edits the common settings (batch shape, budgets, the reflection LM's model …). A
built-in example or a duplicated run can hold others — ``max_score`` (early-stopped
validation), the search seed, the reflection LM's ``max_tokens``, the task LM's temperature,
the evaluator's time limit. Dropping them changed what a run started from the form did against
the same config run from the command line; so a draft carries them, unchanged, and the form
lists them. Only values other than the default are carried: a default needs no carrying.
"""

from __future__ import annotations

import json
from typing import Any

from engine.config import BudgetConfig, DataLimits, ExecutorConfig, LMConfig, SearchConfig
from engine.config_sections import ReviewConfig

SECTIONS = {"search": SearchConfig, "budget": BudgetConfig, "reflection_lm": LMConfig, "task_lm": LMConfig,
            "judge_lm": LMConfig, "executor": ExecutorConfig, "limits": DataLimits, "review": ReviewConfig}
# what the form's own fields write (ui.run_form.config_from_draft, ui.prompt_form): never carried
EDITED = {
    "search": {"parents_per_step", "proposals_per_parent", "minibatch_size", "selection", "accept", "merge",
               "merge_siblings", "schedule"},
    "budget": {"max_metric_calls", "max_cost_usd", "max_seconds", "stop_at_score"},
    "reflection_lm": {"model", "api_base", "api_key_env", "temperature"},
    "task_lm": {"model", "api_base", "api_key_env"},
    "judge_lm": {"model", "api_base", "api_key_env"},
    "executor": {"workers"},
}
_MISSING = object()


def carried(cfg: dict) -> dict[str, dict[str, Any]]:
    """Per section, the settings of ``cfg`` the form does not edit and that differ from the default."""
    out: dict[str, dict[str, Any]] = {}
    for section, model in SECTIONS.items():
        given = cfg.get(section) or {}
        defaults = model().model_dump()
        keep = {k: v for k, v in given.items()
                if k not in EDITED.get(section, ()) and v != defaults.get(k, _MISSING)}
        if keep:
            out[section] = keep
    return out


def apply(cfg: dict, carry: dict[str, dict[str, Any]]) -> None:
    """Put the carried settings back into ``cfg`` (the form's own values win). A task LM or a
    judge is carried only when the form's config has one: without it, it is the reflection LM."""
    for section, values in (carry or {}).items():
        if section in ("task_lm", "judge_lm") and section not in cfg:
            continue
        cfg[section] = {**values, **(cfg.get(section) or {})}


def summary(carry: dict[str, dict[str, Any]]) -> str:
    """``search: max_score = 1.0, seed = 3 · executor: timeout_seconds = 10`` ("" when nothing is carried)."""
    return " · ".join(f"{section}: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
                      for section, values in (carry or {}).items())
