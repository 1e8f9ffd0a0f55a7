"""Changing a paused run's LM settings from its dashboard: the ``lm`` command
(``engine.commands``), which the engine applies once each changed LM has answered one short
request — so "fix the LM settings, then resume" can be done where it is said. An editor's; the
outcome follows the command (pending, then applied or refused with the LM's answer)."""

from __future__ import annotations

import streamlit as st

from engine.commands import LM_SECTIONS, LM_SETTINGS
from ui import data, identity, interventions as iv, keys, submission
from ui.identity import current_actor
from ui.errors import shows_storage_errors
from ui.steering import LOG_S, show_outcome

TITLES = {"reflection_lm": "Reflection LM", "task_lm": "Task LM (the evaluator's lm())", "judge_lm": "Judge (llm_rubric)"}
LABELS = {"model": "Model (litellm string)", "api_base": "API base (optional)", "api_key_env": "Key variable (optional)"}


def editor(run_id: str) -> None:
    """The editor, shown while the run is paused (a running step keeps the settings it started
    with); a fragment, so that it appears when the run pauses, and its outcome follows the command."""
    st.fragment(_editor, run_every=LOG_S)(run_id)


@shows_storage_errors
def _editor(run_id: str) -> None:
    run = data.run_overview(data.db_url(), run_id)
    if run is None or run["status"] != "paused":
        return
    cfg = run.get("config") or {}
    sections = [s for s in LM_SECTIONS if s == "reflection_lm" or cfg.get(s)]
    with st.expander("Change the LM settings of this paused run", icon=":material/settings_ethernet:",
                     expanded="LM" in (run.get("status_reason") or "")):
        st.caption("The engine asks each changed LM one short question before it takes the new settings; then "
                   "**Resume** the run above.")
        # a form: the fragment's refreshes never carry a half-typed address back to the server
        with st.form(f"steer_lm_{run_id}", border=False, enter_to_submit=False):
            for section in sections:
                st.markdown(f"**{TITLES[section]}**")
                cols = st.columns([3, 3, 2])
                for col, name in zip(cols, LM_SETTINGS):
                    col.text_input(LABELS[name], value=(cfg.get(section) or {}).get(name) or "",
                                   key=keys.RUN_LM_FIELD.format(run=run_id, section=section, name=name))
            slot = f"lm:{run_id}"
            st.form_submit_button("Apply the new LM settings", key=submission.widget_key(keys.RUN_LM_SEND, slot),
                                  icon=":material/check:", disabled=not identity.may("lm"), on_click=_send,
                                  args=(run, sections, slot, submission.token(slot)))
        show_outcome(_outcome_key(run_id), data.command_log(data.db_url(), run_id))


def changed(run: dict, sections: list[str], values: dict) -> dict:
    """The ``lm`` payload: per section, the settings whose field differs from the stored one
    (``values``: {(section, name): text})."""
    cfg = run.get("config") or {}
    out: dict = {}
    for section in sections:
        stored = cfg.get(section) or {}
        diff = {name: (values.get((section, name)) or "").strip() for name in LM_SETTINGS
                if (values.get((section, name)) or "").strip() != (stored.get(name) or "")}
        if diff:
            out[section] = diff
    return out


def _send(run: dict, sections: list[str], slot: str, token: str) -> None:
    values = {(s, n): st.session_state.get(keys.RUN_LM_FIELD.format(run=run["id"], section=s, name=n))
              for s in sections for n in LM_SETTINGS}
    payload = changed(run, sections, values)
    if not payload:
        out = iv.Outcome(False, "Nothing changed: edit a model, an API base or a key variable first.")
    else:
        out = iv.send(data.get_db(), run["id"], "lm", payload, current_actor(), "LM settings changed", token)
    if out.command_ids:
        submission.renew(slot)
    st.session_state[_outcome_key(run["id"])] = out
    data.forget_steering()


def _outcome_key(run_id: str) -> str:
    return keys.RUN_OUTCOME.format(run=run_id) + "_lm"
