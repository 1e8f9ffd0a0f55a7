"""Steering one candidate from its page (issue 5): pin / veto (live state and pending commands),
edit into a new human candidate (per component, diff preview, reason; continuing a finished
run), inject a new candidate, feedback for the reflection LM, and the comment thread.

Live parts are fragments refreshing every second; editors sit in fragments without
``run_every``, so typing is never interrupted and a keystroke reruns only the editor.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import data, identity, interventions as iv, keys, submission
from ui.errors import shows_storage_errors
from ui.render import md, status_badge
from ui.identity import current_actor
from ui.sidebar import current_user
from ui.steering import LIVE_S, budget_inputs, live_period, redraw_when_it_ends_or_continues, show_outcome

APPLIED_MARK = {"pending": ":orange-badge[pending]", "applied": ":green-badge[applied]",
                "rejected": ":red-badge[rejected]"}


def _finished_note(run: dict) -> None:
    st.caption(f"This run is {md(run['status'])}: pins, vetoes and feedback steer a running search. Continue it "
               "with a new budget on the dashboard, or edit this candidate below (which offers to continue it).")


# ---------------------------------------------------------------- header: state, pin, veto


def live_state(run: dict, cand_id: str) -> None:
    """Badges (status, origin, best, frontier, pinned, vetoed), pin / veto buttons, and the
    commands about this candidate — refreshed every LIVE_S while the run can be steered, so
    another person's pin shows here, and a veto takes the frontier and best badges away."""
    st.fragment(_live_state, run_every=live_period(run["status"]))(run["id"], cand_id)


def _standing(run_id: str, cand_id: str) -> tuple[bool, str | None]:
    """(is it the run's best, what it holds on the frontier) as the run stands now: read in the
    live fragment, not once with the page (a veto applied since would leave them standing)."""
    url = data.db_url()
    run = data.run_overview(url, run_id)
    if run is None:
        return False, None
    front = data.frontier_of(url, run)  # read again when the frontier moves, not at every metric call
    return run.get("best_candidate_id") == cand_id, front.best_on_text(cand_id) if cand_id in front.members else None


@shows_storage_errors
def _live_state(run_id: str, cand_id: str) -> None:
    live = data.candidate_snapshot(run_id, cand_id)
    if live is None:
        st.error("This candidate is no longer in the database.")
        return
    run = {"id": run_id, "status": live["run_status"]}
    redraw_when_it_ends_or_continues(run_id, run["status"], f"candidate_{cand_id}")
    c = live["candidate"]
    is_best, on_frontier = _standing(run_id, cand_id)
    marks = [status_badge(c["status"]), f":violet-badge[{md(c['origin'])}]"]
    if is_best and not c["vetoed"]:
        marks.append(":orange-badge[best]")
    if on_frontier and not c["vetoed"]:  # a vetoed candidate is left out of the frontier
        marks.append(f":blue-badge[frontier · {on_frontier}]")
    if c["pinned"]:
        marks.append(":red-badge[:material/push_pin: pinned]")
    if c["vetoed"]:
        marks.append(":gray-badge[:material/block: vetoed — never chosen as a parent]")
    st.markdown(" ".join(marks))

    author, steer = current_user(), identity.may("pin")
    finished = run["status"] in iv.FINISHED
    # a form, cleared in the browser on submit: the fragment's periodic reruns never carry a
    # half-typed or already-sent reason back to the server
    with st.form(f"steer_flags_{cand_id}", clear_on_submit=True, border=False, enter_to_submit=False):
        b1, b2, b3 = st.columns([1, 1, 4], vertical_alignment="bottom")
        slot = f"flags:{cand_id}"
        tok = submission.token(slot)
        b1.form_submit_button("Unpin" if c["pinned"] else "Pin", key=submission.widget_key(keys.CAND_PIN, slot),
                              icon=":material/push_pin:", width="stretch", disabled=finished or not steer,
                              on_click=_send_flag, args=(run_id, cand_id, "unpin" if c["pinned"] else "pin", slot, tok),
                              help="A pinned candidate stays eligible as a parent whatever the frontier says, is "
                                   "chosen at least every few steps, and never disappears from the views.")
        b2.form_submit_button("Un-veto" if c["vetoed"] else "Veto", key=submission.widget_key(keys.CAND_VETO, slot),
                              icon=":material/block:", width="stretch", disabled=finished or not steer,
                              on_click=_send_flag, args=(run_id, cand_id, "unveto" if c["vetoed"] else "veto", slot, tok),
                              help="A vetoed candidate is never chosen as a parent or merge source and is left out of "
                                   "'best' and of the frontier; it stays visible, greyed, with its lineage.")
        b3.text_input("Why (recorded with the command)", key=keys.CAND_REASON, placeholder="optional")
    if not author:
        st.caption(iv.NO_NAME)
    elif not steer:
        st.caption(identity.refusal_note("pin"))
    elif finished:
        _finished_note(run)
    show_outcome(keys.CAND_OUTCOME.format(cand=cand_id), pd.DataFrame(live["commands"], columns=["id", "kind", "status", "result"]))
    _commands_about(live["commands"])


def _send_flag(run_id: str, cand_id: str, kind: str, slot: str, token: str) -> None:
    """Button callback: pin / unpin / veto / unveto; a refusal (e.g. the last eligible parent)
    is shown next to the buttons."""
    out = iv.send(data.get_db(), run_id, kind, {"candidate_id": cand_id}, current_actor(),
                  st.session_state.get(keys.CAND_REASON, ""), token)
    if out.command_ids:
        submission.renew(slot)
    st.session_state[keys.CAND_OUTCOME.format(cand=cand_id)] = out
    if out.ok:
        data.forget_steering()


def _commands_about(commands: list[dict]) -> None:
    if not commands:
        return
    lines = []
    for cmd in commands[-6:][::-1]:
        line = (f"{APPLIED_MARK.get(cmd['status'], md(cmd['status']))} **{md(cmd['kind'])}** by "
                f"{md(cmd['author'] or 'someone')} · {cmd['created_at']:%H:%M:%S}")
        if cmd["reason"]:
            line += f" — {md(cmd['reason'])}"
        if cmd["status"] != "pending" and cmd["result"]:
            line += f" → {md(cmd['result'], 160)}" + (f" (before step {cmd['applied_step']})"
                                                       if cmd["applied_step"] is not None else "")
        lines.append(line)
    st.caption("Commands about this candidate (newest first):  \n" + "  \n".join(lines))


# ---------------------------------------------------------------- edit


def _edit_keys(cand_id: str, content: dict) -> dict[str, str]:
    return {name: keys.EDIT_TEXT.format(cand=cand_id, i=i) for i, name in enumerate(content)}


def _reset_edit(cand_id: str, content: dict) -> None:
    for name, key in _edit_keys(cand_id, content).items():
        st.session_state[key] = content[name]
    st.session_state[keys.EDIT_REASON.format(cand=cand_id)] = ""
    st.session_state.pop("_edit_problems_" + cand_id, None)


def _send_edit(run: dict, cand_id: str, content: dict, budget_fields: dict | None, slot: str, token: str) -> None:
    """Button callback: check the edit at its fields, then queue it (after a budget and a resume
    when the run is finished). On success the editor goes back to the candidate's text."""
    ss = st.session_state
    edited = {name: ss.get(key, content[name]) for name, key in _edit_keys(cand_id, content).items()}
    reason = ss.get(keys.EDIT_REASON.format(cand=cand_id), "")
    problems = iv.check_edit(content, edited)
    if not reason.strip():
        problems["reason"] = "Say why you edit it: the reason is recorded on the new candidate."
    ss["_edit_problems_" + cand_id] = problems
    out_key = keys.EDIT_OUTCOME.format(cand=cand_id)
    if problems:
        ss.pop(out_key, None)
        return
    payload = {"candidate_id": cand_id, "content": iv.content_payload(edited)}
    if budget_fields is not None:
        budget = iv.budget_payload({name: ss.get(key) for name, key in budget_fields.items()})
        out = iv.continue_run(data.get_db(), run, budget, current_actor(), then=("edit", payload, reason),
                              client_token=token)
    else:
        out = iv.send(data.get_db(), run["id"], "edit", payload, current_actor(), reason, token)
    if out.command_ids:
        submission.renew(slot)
    ss[out_key] = out
    data.forget_steering()
    if out.ok:
        _reset_edit(cand_id, content)


@st.fragment
@shows_storage_errors
def edit_panel(run: dict, cand: dict) -> None:
    """Edit this candidate into a new ``human`` candidate (parent = this one), component by
    component, with a diff preview and a required reason. On a finished run the send button
    becomes "continue the run with a new budget and apply the edit"."""
    cand_id, content = cand["id"], cand["content"] or {}
    # keyed: a live refresh that adds a line above (a "pinned" badge) must not fold it shut mid-edit
    with st.expander("Edit into a new candidate", icon=":material/edit:", key=f"steer_edit_open_{cand_id}"):
        field_keys = _edit_keys(cand_id, content)
        for name, key in field_keys.items():
            st.session_state.setdefault(key, content[name])
        problems = st.session_state.get("_edit_problems_" + cand_id, {})
        for name, key in field_keys.items():
            label = "New text" if len(content) == 1 else f"Component {name}"
            edited = st.text_area(label, key=key, height=min(400, 80 + 18 * content[name].count("\n")))
            if name in problems:
                st.error(problems[name], icon=":material/error:")
            if edited != content[name] and edited.strip():
                st.caption("Diff preview")
                st.code(iv.diff_text(content[name], edited, name) or "(whitespace only)", language="diff",
                        wrap_lines=True)
        if iv.ALL in problems:
            st.error(problems[iv.ALL], icon=":material/error:")
        st.text_input("Reason (recorded on the new candidate)", key=keys.EDIT_REASON.format(cand=cand_id),
                      placeholder="e.g. keep the JSON format; the LM keeps dropping it")
        if "reason" in problems:
            st.error(problems["reason"], icon=":material/error:")
        finished = run["status"] in iv.FINISHED
        budget_fields = None
        if finished:
            st.info(f"This run is {md(run['status'])}. A running engine evaluates the edit: continue the run with "
                    "this budget and the edit is applied first.", icon=":material/info:")
            budget_inputs(run, iv.suggested_budget(run))
            budget_fields = {n: keys.RUN_BUDGET_FIELD.format(run=run["id"], name=n) for n in iv.BUDGET_FIELDS}
        a1, a2, _ = st.columns([2, 1, 3])
        slot = f"edit:{cand_id}"
        a1.button("Continue the run and apply the edit" if finished else "Send the edit", type="primary",
                  key=submission.widget_key(keys.EDIT_CONTINUE if finished else keys.EDIT_SEND, slot),
                  icon=":material/send:", disabled=not identity.may("edit"), width="stretch", on_click=_send_edit,
                  args=(run, cand_id, content, budget_fields, slot, submission.token(slot)))
        a2.button("Reset", key=keys.EDIT_RESET, on_click=_reset_edit, args=(cand_id, content), width="stretch")
        if not current_user():
            st.caption(iv.NO_NAME)
        elif not identity.may("edit"):
            st.caption(identity.refusal_note("edit"))
        out_key = keys.EDIT_OUTCOME.format(cand=cand_id)
        show_outcome(out_key)
        if st.session_state.get(out_key) is not None and st.session_state[out_key].ok:
            st.caption("The new candidate appears in the candidate list and the lineage once the engine has "
                       "evaluated it on the validation set.")


# ---------------------------------------------------------------- inject


def _send_inject(rid: str, components: list[str], slot: str, token: str) -> None:
    """Button callback: every component must have text; the texts stay in the editor until the
    engine has the command (then the editor is emptied)."""
    ss = st.session_state
    text_keys = {name: keys.INJECT_TEXT.format(run=rid, i=i) for i, name in enumerate(components)}
    texts = {name: ss.get(key, "") for name, key in text_keys.items()}
    problems = iv.check_edit({}, texts, need_change=False)
    ss["_inject_problems_" + rid] = problems
    if problems:
        ss.pop(keys.INJECT_OUTCOME.format(run=rid), None)
        return
    out = iv.send(data.get_db(), rid, "inject", {"content": iv.content_payload(texts)}, current_actor(),
                  ss.get(keys.INJECT_REASON.format(run=rid), ""), token)
    if out.command_ids:
        submission.renew(slot)
    ss[keys.INJECT_OUTCOME.format(run=rid)] = out
    data.forget_steering()
    if out.ok:
        for key in text_keys.values():
            ss[key] = ""
        ss[keys.INJECT_REASON.format(run=rid)] = ""


@st.fragment
@shows_storage_errors
def inject_panel(run: dict, components: list[str]) -> None:
    """A wholly new candidate (no parent), evaluated and entered like any other."""
    rid = run["id"]
    with st.expander("Inject a new candidate", icon=":material/add_box:"):
        problems = st.session_state.get("_inject_problems_" + rid, {})
        for i, name in enumerate(components):
            st.text_area("Text" if len(components) == 1 else f"Component {name}",
                         key=keys.INJECT_TEXT.format(run=rid, i=i), height=120)
            if name in problems:
                st.error(problems[name], icon=":material/error:")
        st.text_input("Reason", key=keys.INJECT_REASON.format(run=rid), placeholder="optional")
        finished = run["status"] in iv.FINISHED
        if finished:
            _finished_note(run)
        slot = f"inject:{rid}"
        st.button("Inject", key=submission.widget_key(keys.INJECT_SEND, slot), icon=":material/send:",
                  disabled=finished or not identity.may("inject"), on_click=_send_inject,
                  args=(rid, components, slot, submission.token(slot)))
        show_outcome(keys.INJECT_OUTCOME.format(run=rid))


# ---------------------------------------------------------------- feedback and comments


def _send_feedback(rid: str, cand_id: str, slot: str, token: str) -> None:
    ss = st.session_state
    text = ss.get(keys.FEEDBACK_TEXT.format(cand=cand_id), "")
    out = iv.send(data.get_db(), rid, "feedback", {"candidate_id": cand_id, "text": text}, current_actor(),
                  client_token=token)
    if out.command_ids:
        submission.renew(slot)
    ss[keys.FEEDBACK_OUTCOME.format(cand=cand_id)] = out
    if out.ok:
        data.forget_steering()


@st.fragment
@shows_storage_errors
def feedback_box(run: dict, cand_id: str) -> None:
    finished = run["status"] in iv.FINISHED
    with st.form(f"steer_feedback_form_{cand_id}", clear_on_submit=True, border=False, enter_to_submit=False):
        st.text_area("Feedback for the reflection LM", key=keys.FEEDBACK_TEXT.format(cand=cand_id), height=80,
                     placeholder="e.g. too verbose; keep the JSON format",
                     help="Included, marked as human feedback, in the prompt of the next reflections on this candidate.")
        slot = f"feedback:{cand_id}"
        st.form_submit_button("Send feedback", key=submission.widget_key(keys.FEEDBACK_SEND, slot),
                              icon=":material/forum:", disabled=finished or not identity.may("feedback"), on_click=_send_feedback,
                              args=(run["id"], cand_id, slot, submission.token(slot)))
    if finished:
        _finished_note(run)
    show_outcome(keys.FEEDBACK_OUTCOME.format(cand=cand_id))


def comment_thread(run: dict, cand_id: str) -> None:
    """Comments and applied feedback, oldest first, plus feedback still waiting for the engine:
    every second while the run can be steered (within 2 s, at half the cost of the state above)."""
    st.fragment(_comment_thread, run_every=live_period(run["status"], 2 * LIVE_S))(run["id"], cand_id)


@shows_storage_errors
def _comment_thread(run_id: str, cand_id: str) -> None:
    live = data.candidate_live(data.db_url(), run_id, cand_id)
    if live is None:
        return
    shown = 0
    for cm in live["comments"]:
        kind = "feedback for the reflection LM" if cm["kind"] == "feedback" else "comment"
        with st.container(border=True):
            st.caption(f"**{md(cm['author'] or 'someone')}** · {kind} · {cm['created_at']:%Y-%m-%d %H:%M:%S} UTC")
            st.text(cm["text"])
        shown += 1
    for cmd in live["commands"]:
        if cmd["kind"] == "feedback" and cmd["status"] == "pending":
            with st.container(border=True):
                st.caption(f"**{md(cmd['author'] or 'someone')}** · feedback, pending: the engine attaches it at the "
                           f"next step boundary · {cmd['created_at']:%H:%M:%S}")
                st.text((cmd["payload"] or {}).get("text", ""))
            shown += 1
    if not shown:
        st.caption("No comments yet.")


def _post_comment(rid: str, cand_id: str) -> None:
    ss = st.session_state
    out = iv.comment(data.get_db(), rid, cand_id, current_actor(), ss.get(keys.COMMENT_TEXT.format(cand=cand_id), ""))
    ss[keys.COMMENT_OUTCOME.format(cand=cand_id)] = out
    if out.ok:
        data.forget_steering()


@st.fragment
@shows_storage_errors
def comment_box(run_id: str, cand_id: str) -> None:
    with st.form(f"steer_comment_form_{cand_id}", clear_on_submit=True, border=False, enter_to_submit=False):
        st.text_area("Add a comment", key=keys.COMMENT_TEXT.format(cand=cand_id), height=80,
                     placeholder="for your colleagues (the reflection LM does not read comments)")
        st.form_submit_button("Post comment", key=keys.COMMENT_SEND, icon=":material/chat:", disabled=not identity.may("comment"),
                              on_click=_post_comment, args=(run_id, cand_id))
    if not current_user():
        st.caption(iv.NO_NAME)
    show_outcome(keys.COMMENT_OUTCOME.format(cand=cand_id))
