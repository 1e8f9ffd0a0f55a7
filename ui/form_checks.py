"""Checks of the new-run form that are not the config's own: budgets out of range (refused by
name, never clamped), errors that follow the form after a refused attempt, field labels for the
summary by the Start button, and the dataset preview table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ui import keys as K

GENERAL = "_general"  # where errors about the config as a whole go (top of the form)
# Characters a paste box takes (the browser's maxlength, set by ui.paste_limit): Chromium inserts a
# pasted multi-line text in time that grows with the square of its size — 50,000 characters took
# 1.6 s, 200,000 took 26 s, 12,000 JSONL rows (1.1 MB) never finished (docs/benchmarks-large-dataset.md)
PASTE_LIMIT = 50_000
PASTE_CUT = (f"the paste box takes {PASTE_LIMIT:,} characters, and the text filled it: the rest of what was pasted "
             "was not taken. Upload the file instead (\"upload a file\", up to 10,000 rows), or paste fewer rows")


def paste_cut(text: str) -> bool:
    """The text fills a paste box exactly: the browser cut a longer paste there (a text loaded
    another way — an upload, an example, a duplicated run — may be longer, and is whole)."""
    return len(text) == PASTE_LIMIT
# budget fields: (config name, largest value accepted, whole numbers only); 0 means no limit
BUDGET_LIMITS = {K.NEW_MAX_CALLS: ("max_metric_calls", 10_000_000, True), K.NEW_MAX_COST: ("max_cost_usd", 100_000, False),
                 K.NEW_MAX_SECONDS: ("max_seconds", 31_536_000, True), K.NEW_STOP_SCORE: ("stop_at_score", 1e9, False)}


def budget(d: dict) -> tuple[dict, list[str]]:
    """The budget of a draft and the values out of range, as "budget.field: reason" lines
    (never clamped or read as "no limit": what was typed is what is refused)."""
    budget: dict[str, Any] = {}
    problems = []
    for key, (name, top, whole) in BUDGET_LIMITS.items():
        try:
            value = float(d.get(key) or 0)
        except (TypeError, ValueError):
            problems.append(f"budget.{name}: {d.get(key)!r} is not a number")
            continue
        if not (0 <= value <= top) or (whole and value != int(value)):
            kind = "a whole number" if whole else "a number"
            problems.append(f"budget.{name}: {value:,g} is out of range; give 0 (no limit) or {kind} up to {top:,.0f}")
        elif value:
            budget[name] = int(value) if name == "max_metric_calls" else value
    budget.setdefault("max_metric_calls", None)  # 0 = no limit (the config's own default is 500)
    return budget, problems


LABELS = {K.NEW_NAME: "run name", K.NEW_OBJECTIVE: "objective", K.NEW_BACKGROUND: "background",
          K.NEW_KIND: "artifact kind", K.NEW_SEED_MODE: "seed", K.NEW_EVALUATOR: "evaluator",
          K.NEW_DATA_SOURCE: "dataset", K.NEW_P: "parents per step", K.NEW_K: "proposals per parent",
          K.NEW_MINIBATCH: "minibatch size", K.NEW_SELECTION: "parent selection", K.NEW_ACCEPT: "validation passes",
          K.NEW_MAX_CALLS: "max metric calls", K.NEW_MAX_COST: "max dollars", K.NEW_MAX_SECONDS: "max seconds",
          K.NEW_STOP_SCORE: "stop at score", K.NEW_MODEL: "model", K.NEW_API_BASE: "API base",
          K.NEW_API_KEY_ENV: "key variable", K.NEW_TEMPERATURE: "temperature", K.NEW_WORKERS: "workers",
          GENERAL: "the config (top of the form)"}


def field_label(key: str) -> str:
    """The name of a form field as its label says it (for the summary by the Start button)."""
    from ui.lm_form import LABELS as LM_LABELS
    from ui.prompt_form import LABELS as PROMPT_LABELS

    return LABELS.get(key) or LM_LABELS.get(key) or PROMPT_LABELS.get(key, key)


def preview_table(rows: list, limit: int = 20):
    """The first rows of a dataset as the preview shows them, numbered from 1 as given (the
    evaluator try labels its rows with the same numbers)."""
    head = rows[:limit]
    table = pd.json_normalize(head) if head and isinstance(head[0], dict) else pd.DataFrame({"example": head})
    table = table.astype(str)
    table.insert(0, "row", range(1, len(head) + 1))
    return table


def current_draft(draft_key: str) -> dict:
    """The draft (kept under ``draft_key``) with what the widgets hold now: read before they are
    drawn, it is what the person just typed."""
    import streamlit as st

    draft = st.session_state[draft_key]
    for key in list(draft):
        if key == K.NEW_COMPONENTS:
            draft[key] = [{"name": st.session_state.get(K.NEW_COMP_NAME.format(i=i), c["name"]),
                           "text": st.session_state.get(K.NEW_COMP_TEXT.format(i=i), c["text"])}
                          for i, c in enumerate(draft[key])]
        elif key in st.session_state:
            draft[key] = st.session_state[key]
    return draft


def revalidate(draft_key: str, validate) -> None:
    """After a refused attempt the messages follow the form: a fixed field loses its message
    as soon as it is fixed, not at the next Validate. ``validate(draft) -> (config, errors)``."""
    import streamlit as st

    shown = st.session_state.get(K.NEW_ERRORS)
    if not shown or set(shown) == {GENERAL}:
        return
    general = shown.get(GENERAL, [])  # template / TOML problems are not the fields' to clear
    cfg, errors = validate(current_draft(draft_key))
    # what Start found beyond the config's own checks (an LM that did not answer, a failed try):
    # kept while the config is the one it was about, gone as soon as anything changes
    held = st.session_state.get(K.NEW_HELD_ERRORS)
    if held and cfg is not None and cfg.stored() == held["config"]:
        errors = {**held["errors"], **errors}
    st.session_state[K.NEW_ERRORS] = {**errors, **({GENERAL: general} if general else {})}
