"""The new-run page's evaluator section for the prompt path: the messages the task LM gets, the
assertions table, and the generated evaluator (shown, or ejected into the code editor); the task
LM's fields are ``ui.lm_section``'s. Logic lives in ``ui.prompt_form``; this module only draws widgets."""

from __future__ import annotations

from typing import Callable

import pandas as pd
import streamlit as st

from engine.prompt_evaluator import TYPES
from ui import form_checks, keys as K, prompt_form, run_form

COLUMNS = ("type", "value", "weight", "threshold", "name")


def _assertions_table(version: int) -> None:
    editor = f"{K.NEW_PROMPT_EDITOR}_{version}"
    if editor not in st.session_state or K.NEW_PROMPT_BASE not in st.session_state:
        st.session_state[K.NEW_PROMPT_BASE] = list(st.session_state.get(K.NEW_PROMPT_ASSERTS) or [])
    base = pd.DataFrame(st.session_state[K.NEW_PROMPT_BASE], columns=list(COLUMNS)).astype({"value": "string", "name": "string"})
    edited = st.data_editor(
        base, num_rows="dynamic", hide_index=True, width="stretch", key=editor,
        column_config={"type": st.column_config.SelectboxColumn("type", options=list(TYPES), required=True, width="small"),
                       "value": st.column_config.TextColumn("value", width="large", help=prompt_form.ASSERTION_HELP),
                       "weight": st.column_config.NumberColumn("weight", min_value=0.0, step=0.5, default=1.0, width="small"),
                       "threshold": st.column_config.NumberColumn(
                           "threshold", min_value=0.0, max_value=1.0, step=0.05, default=1.0, width="small",
                           help="llm_rubric / python: the score at which the assertion counts as passed"),
                       "name": st.column_config.TextColumn("name", width="small",
                                                           help="how results name it (the type when empty)")})
    rows = edited.astype(object).where(edited.notna(), None).to_dict("records")
    st.session_state[K.NEW_PROMPT_ASSERTS] = rows


def render(draft_key: str, version_key: str, errors: Callable[[str], None]) -> None:
    """The section; ``version_key`` holds the page's editor version (bumped to redraw editors)."""
    st.caption("The task LM answers each example with the prompt being tuned (the seed above) as its system message; "
               "the assertions score each answer, and the score is their weighted mean. No Python needed: this "
               "becomes an ordinary evaluator that runs in the sandbox.")
    st.text_area("System message", key=K.NEW_PROMPT_SYSTEM, height=68,
                 help="{candidate} is the prompt being tuned; with named components, {name} of each component.")
    errors(K.NEW_PROMPT_SYSTEM)
    st.text_area("User message", key=K.NEW_PROMPT_USER, height=68, placeholder="Ticket: {text}",
                 help="Built from each example's fields: {column}.")
    snapshot = {k: st.session_state.get(k) for k in (K.NEW_DATA_SOURCE, K.NEW_DATA_TEXT, K.NEW_DATA_FORMAT)}
    rows, _ = run_form.dataset_rows(snapshot, require=False)
    if rows:
        st.caption(prompt_form.placeholders_hint(rows))
    else:
        st.caption(":material/info: First give the examples under **3 · Dataset** (upload or paste a table with, say, "
                   "`text` and `label` columns): their columns become the `{placeholders}` of this message and of "
                   "the assertions. Without examples, the prompt is tuned for this one fixed message.")
    errors(K.NEW_PROMPT_USER)
    st.markdown("**Assertions** (add a row at the bottom; select rows to delete them)")
    _assertions_table(st.session_state.get(version_key, 0))
    errors(K.NEW_PROMPT_ASSERTS)
    if st.toggle("Show the generated evaluator (Python)", key=K.NEW_SHOW_SOURCE):
        cfg, problems = run_form.validate(form_checks.current_draft(draft_key))
        if cfg is None:
            st.caption("Fix the problems shown to see it.")
        else:
            st.code(cfg.evaluator, language="python")
            st.button("Eject into the code editor", key=K.NEW_EJECT, icon=":material/code:", on_click=_eject,
                      args=(cfg.evaluator, version_key), help="Switch to the code path with this source, to change anything "
                      "the assertions cannot say.")


def _eject(source: str, version_key: str) -> None:
    st.session_state[K.NEW_EVALUATOR] = source
    st.session_state[version_key] = st.session_state.get(version_key, 0) + 1  # the code editor shows it
    st.session_state[K.NEW_EVAL_KIND] = "code"
    st.session_state[K.NEW_SHOW_SOURCE] = False
