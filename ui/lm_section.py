"""The new-run page's LM fields: the reflection LM, and the task LM and the judge, each "the same
as the reflection LM" or with a model, API base and key variable of its own; each with its own
*Test connection* (an engine job). Logic lives in ``ui.lm_form``; this module only draws widgets."""

from __future__ import annotations

from typing import Callable

import streamlit as st

from engine.config import LOCAL_MODEL
from ui import identity, jobs, keys as K, lm_form

TEXTS = {  # section: (title, what it does)
    "task_lm": ("Task LM", "answers each example: the model whose prompt is tuned (lm() in a Python evaluator calls it too)"),
    "judge_lm": ("Judge", "grades the llm_rubric assertions"),
}
RESULTS = {"task_lm": K.NEW_TASK_LM_RESULT, "judge_lm": K.NEW_JUDGE_LM_RESULT}
BUTTONS = {"task_lm": K.NEW_TEST_TASK_LM, "judge_lm": K.NEW_TEST_JUDGE_LM}
KEY_HELP = "The NAME of the environment variable holding the key — never the key itself."


def reflection(errors: Callable[[str], None], default_model: str, default_reason: str) -> None:
    """The reflection LM: model, API base, key variable, temperature, and its connection test."""
    l1, l2, l3 = st.columns([3, 3, 2])
    l1.text_input("Model (litellm string)", key=K.NEW_MODEL, help="Default: the local model when no API key is set.")
    if st.session_state.get(K.NEW_MODEL) == default_model == LOCAL_MODEL:
        st.info(default_reason[:1].upper() + default_reason[1:] + ". It needs no network, but it is slow and much "
                "weaker than a hosted model.", icon=":material/computer:")
    l2.text_input("API base (optional)", key=K.NEW_API_BASE, placeholder="http://127.0.0.1:8000/v1")
    l3.text_input("Key variable (optional)", key=K.NEW_API_KEY_ENV, placeholder="OPENAI_API_KEY", help=KEY_HELP)
    for k in lm_form.REFLECTION:
        errors(k)
    st.slider("Temperature", 0.0, 2.0, step=0.1, key=K.NEW_TEMPERATURE)
    if st.button("Test connection", key=K.NEW_TEST_LM, icon=":material/network_check:",
                 disabled=bool(identity.refusal_note("check_lm"))):
        jobs.start_check(*lm_form.settings_of(st.session_state, "reflection_lm"))
    jobs.show_check()


def own_lm(section: str, errors: Callable[[str], None]) -> None:
    """The task LM or the judge: the reflection LM's settings, or its own."""
    title, does = TEXTS[section]
    same_key, model_key, base_key, env_key = lm_form.OWN[section]
    # set again before drawing: a widget shown again after a run without it (the judge after the code
    # path, the fields after "the same") came back at its default in the browser, not at this value
    for key in lm_form.OWN[section]:
        st.session_state[key] = st.session_state.get(key, key == same_key or "")
    t1, t2 = st.columns([5, 2], vertical_alignment="bottom")
    same = t1.toggle(f"{title}: the same as the reflection LM (model, API base and key variable)", key=same_key,
                     help=f"The {title.lower()} {does}. Off: give it its own model, API base and key variable.")
    if t2.button("Test connection", key=BUTTONS[section], icon=":material/network_check:",
                 disabled=bool(identity.refusal_note("check_lm"))):
        jobs.start_check(*lm_form.settings_of(st.session_state, section), result_key=RESULTS[section])
    if not same:
        c1, c2, c3 = st.columns([3, 3, 2])
        c1.text_input(f"{title} model (litellm string)", key=model_key, placeholder="openai/gpt-4.1-mini")
        c2.text_input(f"{title} API base (optional)", key=base_key, placeholder="http://127.0.0.1:8000/v1")
        c3.text_input(f"{title} key variable (optional)", key=env_key, placeholder="OPENAI_API_KEY", help=KEY_HELP)
    for k in (model_key, base_key, env_key):
        errors(k)
    jobs.show_check(RESULTS[section], field=f"{section}.model")
