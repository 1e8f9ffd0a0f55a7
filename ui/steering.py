"""Steering a run from its dashboard (issue 5): pause / resume / step / stop, budgets (and
continuing a finished run), one-click vetoes of degenerate frontier members, the intervention
log and, per step, why each parent was chosen and which commands were applied before it.

Every control sends through ``ui.interventions`` (``engine.commands.send_command``, the CLI's
code path) as the signed-in person (the sidebar name in local mode), whose role the command layer
checks; its outcome is shown right next to it. The live
parts are fragments refreshing every second from short-TTL cached reads, so two browsers on
one run see each other's commands within two seconds.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd
import streamlit as st

from storage.run_figures import running_seconds
from storage.states import RunStatus
from ui import data, identity, interventions as iv, keys, paging, submission
from ui.errors import shows_storage_errors
from ui.render import fmt_seconds, md
from ui.identity import current_actor
from ui.sidebar import current_user, engine_alive
from ui.step_links import PAGE_STEPS

LIVE_S = 0.5  # steering is seen by everyone within 2 s (worst case: one period + the cache TTL + a render)
LOG_S = 2.0  # the dashboard's command log: its pending commands are also shown by the controls above it
FINISHED_S = 5.0  # a run that has ended only changes when someone continues it
VERB = {"pause": "Pause", "resume": "Resume", "step": "Step once", "stop": "Stop"}
HELP = {
    "pause": "Pause now: the step in flight is cut within seconds (finished work is kept, LM requests in flight are "
             "abandoned and their cost counted); Resume starts the next step.",
    "resume": "Go on stepping until a budget binds.",
    "step": "Run exactly one more step, then pause again (for teaching, or to watch one step closely).",
    "stop": "End the run now: the step in flight is cut within seconds (it can be continued later with a new "
            "budget). A queued run that no worker has started is cancelled at once.",
}


def live_period(status: str, period: float = LIVE_S) -> float:
    """How often a steering fragment refreshes: ``period`` while the run can be steered, every
    FINISHED_S once it has ended. Each refresh is a redraw in the server and the browser: a
    finished run's dashboard kept at 0.5 s took half a core in the browser on a 2-core machine
    (docs/benchmarks-studio-cpu.md), for a run that could no longer change."""
    return period if status in iv.ACTIVE else FINISHED_S


def redraw_when_it_ends_or_continues(run_id: str, status: str, where: str) -> None:
    """A whole-page rerun when the run has just ended or been continued (by anyone), so that
    the page's fragments take the refresh period of the new status. Fragments of one page pass
    the same ``where``: the first to see the change redraws the page, the others then agree."""
    key = f"_steer_status_{where}_{run_id}"
    prev = st.session_state.get(key)
    st.session_state[key] = status
    if prev is not None and (prev in iv.ACTIVE) != (status in iv.ACTIVE):
        st.rerun()


def show_outcome(key: str, log: pd.DataFrame | None = None) -> None:
    """The last outcome this session got for a control, right where the control is; with the
    run's command ``log``, as it stands now (applied or rejected, once the engine got to it)."""
    out = st.session_state.get(key)
    if out is not None and log is not None:
        out = iv.settled(out, log)
    if out is not None:
        (st.success if out.ok else st.error)(out.message, icon=":material/check:" if out.ok else ":material/block:")


def _ago(ts) -> str:
    if ts is None or pd.isna(ts):
        return ""
    ts = ts.to_pydatetime() if hasattr(ts, "to_pydatetime") else ts
    return fmt_seconds((datetime.now(timezone.utc) - ts).total_seconds()) + " ago"


def pending_lines(log: pd.DataFrame) -> list[str]:
    """'pause by ana 3s ago — why' for each pending command, oldest first."""
    if log.empty:
        return []
    rows = log[log["status"] == "pending"].sort_values("id")
    return [f"{md(r.kind)} {md(iv.describe_payload(r.kind, r.payload))} by {md(r.author or 'someone')} {_ago(r.created_at)}"
            + (f" — {md(r.reason)}" if r.reason else "") for r in rows.itertuples(index=False)]


def pending_note(log: pd.DataFrame) -> None:
    lines = pending_lines(log)
    if not lines:
        return
    where = ("the engine applies them at the next step boundary" if engine_alive() else
             "no engine worker is running: they stay pending and are applied when one starts")
    st.info(f"**{len(lines)} command(s) pending** — {where}:  \n" + "  \n".join(lines), icon=":material/schedule:")


# ---------------------------------------------------------------- run controls


def run_controls(run_id: str) -> None:
    """Pause / resume / step / stop (live), then the budget editor."""
    run = data.run_overview(data.db_url(), run_id)
    st.fragment(_live_controls, run_every=live_period(run["status"] if run else ""))(run_id)
    if run is not None:
        _budget_editor(run)


@shows_storage_errors
def _live_controls(run_id: str) -> None:
    run, log = data.controls_snapshot(run_id)
    if run is None:
        return
    author, steer = current_user(), identity.may("pause")
    status = run["status"]
    finished = status in iv.FINISHED
    redraw_when_it_ends_or_continues(run_id, status, "dashboard")  # the controls are on the dashboard
    enabled = {"pause": status in (RunStatus.QUEUED, RunStatus.RUNNING), "resume": status == RunStatus.PAUSED,
               "step": status in iv.ACTIVE, "stop": status in iv.ACTIVE}
    icons = {"pause": ":material/pause:", "resume": ":material/play_arrow:", "step": ":material/skip_next:",
             "stop": ":material/stop:"}
    left, right = st.columns([8, 1], vertical_alignment="bottom")
    # forms, cleared in the browser on submit: the fragment's periodic reruns never carry a
    # half-typed or already-sent reason back to the server
    with left.form(f"steer_run_{run_id}", clear_on_submit=True, border=False, enter_to_submit=False):
        cols = st.columns([1, 1, 1.25, 3.75], vertical_alignment="bottom")  # "Step once" whole at 1400 px
        slot = f"run:{run_id}"
        for col, kind, key in zip(cols, ("pause", "resume", "step"), (keys.RUN_PAUSE, keys.RUN_RESUME, keys.RUN_STEP)):
            col.form_submit_button(VERB[kind], key=submission.widget_key(key, slot), icon=icons[kind],
                                   disabled=not enabled[kind] or not steer, width="stretch", help=HELP[kind],
                                   on_click=_send_run_command,
                                   args=(run_id, kind, keys.RUN_REASON, slot, submission.token(slot)))
        cols[3].text_input("Why (recorded in the command log)", key=keys.RUN_REASON, placeholder="optional")
    # Stop asks first, in the page itself: a popover in this fragment, redrawn every half second,
    # at times did not open at all and at times stayed open after the run had stopped
    asking = st.session_state.get(STOP_ASKED) == run_id and enabled["stop"] and steer
    right.button(VERB["stop"], key=keys.RUN_STOP, icon=icons["stop"], width="stretch", help=HELP["stop"],
                 disabled=not enabled["stop"] or not steer or asking, on_click=_ask_stop, args=(run_id,))
    if asking:
        _stop_confirmation(run_id)
    if not author:
        st.caption(iv.NO_NAME)
    elif not steer:
        st.caption(identity.refusal_note("pause"))
    elif finished:
        st.caption(f"This run is {md(status)}. To go on, continue it with a new budget (below).")
    show_outcome(keys.RUN_OUTCOME.format(run=run_id), log)
    pending_note(log)


STOP_ASKED = "_steer_stop_asked"  # the run whose Stop was clicked once: its confirmation is shown


def _ask_stop(run_id: str) -> None:
    st.session_state[STOP_ASKED] = run_id


def _cancel_stop() -> None:
    st.session_state.pop(STOP_ASKED, None)


def _stop_confirmation(run_id: str) -> None:
    with st.container(border=True):
        with st.form(f"steer_stop_{run_id}", clear_on_submit=True, border=False, enter_to_submit=False):
            c1, c2, c3 = st.columns([5, 1.4, 1], vertical_alignment="bottom")
            c1.text_input("Why stop it? The step in flight is cut; the run can be continued later with a new budget.",
                          key=keys.RUN_STOP_REASON, placeholder="optional")
            slot = f"stop:{run_id}"
            c2.form_submit_button("Yes, stop it", key=submission.widget_key(keys.RUN_STOP_CONFIRM, slot), type="primary",
                                  width="stretch", on_click=_send_run_command,
                                  args=(run_id, "stop", keys.RUN_STOP_REASON, slot, submission.token(slot)))
            c3.form_submit_button("Cancel", key=keys.RUN_STOP_CANCEL, width="stretch",
                                  on_click=_cancel_stop)


def _send_run_command(run_id: str, kind: str, reason_key: str, slot: str, token: str) -> None:
    out = iv.send(data.get_db(), run_id, kind, {}, current_actor(), st.session_state.get(reason_key, ""), token)
    if out.command_ids:
        submission.renew(slot)
    if kind == "stop":
        st.session_state.pop(STOP_ASKED, None)
    st.session_state[keys.RUN_OUTCOME.format(run=run_id)] = out
    if out.ok:
        data.forget_steering()


@st.fragment
@shows_storage_errors
def _budget_editor(run: dict) -> None:
    finished = run["status"] in iv.FINISHED
    title = "Continue this run with a new budget" if finished else "Change the budget of this run"
    with st.expander(title, icon=":material/tune:", expanded=False):
        current = (run.get("config") or {}).get("budget") or {}
        budget_inputs(run, iv.suggested_budget(run) if finished else current)
        label = "Continue the run" if finished else "Apply the new budget"
        slot = f"budget:{run['id']}"
        st.button(label, key=submission.widget_key(keys.RUN_BUDGET_SEND, slot),
                  icon=":material/play_arrow:" if finished else ":material/tune:", disabled=not identity.may("budget"),
                  on_click=_send_budget, args=(run, slot, submission.token(slot)))
        show_outcome(keys.RUN_OUTCOME.format(run=run["id"]) + "_budget")


def _send_budget(run: dict, slot: str, token: str) -> None:
    """Button callback: the new budget (and a resume when the run is finished)."""
    values = {n: st.session_state.get(keys.RUN_BUDGET_FIELD.format(run=run["id"], name=n)) for n in iv.BUDGET_FIELDS}
    payload = iv.budget_payload(values)
    if run["status"] in iv.FINISHED:
        out = iv.continue_run(data.get_db(), run, payload, current_actor(), client_token=token)
    else:
        out = iv.send(data.get_db(), run["id"], "budget", payload, current_actor(), "budget changed", token)
        late = iv.budget_problems(run, payload)
        if out.ok and late:
            out = iv.Outcome(True, out.message + " Note: " + " ".join(late), out.command_ids)
    if out.command_ids:
        submission.renew(slot)
    st.session_state[keys.RUN_OUTCOME.format(run=run["id"]) + "_budget"] = out
    data.forget_steering()


def budget_inputs(run: dict, start: dict) -> dict:
    """Number inputs for the five budget limits (0 = no limit); returns their values."""
    rid = run["id"]
    spec = [("max_metric_calls", "Max metric calls", 1, f"used so far: {run.get('metric_calls', 0):,}"),
            ("max_cost_usd", "Max dollars", 0.5, f"spent so far: ${run.get('cost_usd', 0.0):.4f}"),
            ("max_seconds", "Max seconds", 60, f"searched so far: {fmt_seconds(running_seconds(run, search_only=True))}"),
            ("max_steps", "Max steps", 1, f"steps done: {run.get('steps_done', 0)}"),
            ("stop_at_score", "Stop at score", 0.05, "0: never stop early")]
    cols = st.columns(len(spec))
    values = {}
    for col, (name, label, step, help_) in zip(cols, spec):
        value = start.get(name) or 0
        is_int = name in ("max_metric_calls", "max_steps", "max_seconds")
        values[name] = col.number_input(label, min_value=0 if is_int else 0.0, value=int(value) if is_int else float(value),
                                        step=step if is_int else float(step), help=f"0: no limit · {help_}",
                                        key=keys.RUN_BUDGET_FIELD.format(run=rid, name=name))
    return values


# ---------------------------------------------------------------- frontier: degenerate members


def degenerate_members(run_id: str, weak: pd.DataFrame, finished: bool) -> None:
    """Degenerate frontier members (Analyze's definition, ``engine.analyze.degenerate``; ``weak``:
    ``data.degenerate_of``), each with a one-click veto."""
    if weak.empty:
        return
    st.warning(f"**{len(weak)} degenerate frontier member(s)**: they hold the best score on some validation "
               "example only by answering alike (the same score everywhere, e.g. a hedge) or while scoring below "
               "the seed on average (e.g. a candidate that rejects everything is best on every negative example). "
               "They keep being sampled as parents unless vetoed.", icon=":material/warning:")
    for r in weak.head(8).itertuples(index=False):
        c1, c2 = st.columns([5, 2], vertical_alignment="center")
        c1.markdown(f"`{r.id}` · {r.why} · mean {r.val_mean:.3f} vs seed {r.seed_mean:.3f}")
        key, slot = keys.DEGENERATE_VETO.format(cand=r.id), f"degenerate:{r.id}"
        c2.button("Veto", key=submission.widget_key(key, slot), icon=":material/block:",
                  disabled=finished or not identity.may("veto"), on_click=_veto_degenerate,
                  args=(run_id, r.id, f"degenerate frontier member: {r.why} (mean {r.val_mean:.3f}, seed "
                        f"{r.seed_mean:.3f})", key, slot, submission.token(slot)),
                  help="Never choose it as a parent again (it stays visible, greyed, with its lineage).")
        show_outcome("_out_" + key)


def _veto_degenerate(run_id: str, cand_id: str, reason: str, key: str, slot: str, token: str) -> None:
    out = iv.send(data.get_db(), run_id, "veto", {"candidate_id": cand_id}, current_actor(), reason, token)
    if out.command_ids:
        submission.renew(slot)
    st.session_state["_out_" + key] = out
    data.forget_steering()


# ---------------------------------------------------------------- the log and the steps


def command_log(run_id: str, status: str) -> None:
    """Every command of the run (who, when, what, why, status, result, step), newest first,
    then each step's parents with why they were chosen and the commands applied before it."""
    st.fragment(_command_log, run_every=live_period(status, LOG_S))(run_id)


@shows_storage_errors
def _command_log(run_id: str) -> None:
    log, run, steps = data.log_snapshot(run_id)
    pending_note(log)
    rows = iv.log_rows(log)
    if rows.empty:
        st.caption("No commands yet: pins, vetoes, edits, feedback, pauses and budget changes appear here.")
    else:
        st.dataframe(rows.style.apply(_status_style, axis=1), hide_index=True, width="stretch",
                     height=min(400, 38 + 35 * len(rows)),
                     column_config={"when": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                                    "why": st.column_config.TextColumn(width="medium"),
                                    "result": st.column_config.TextColumn(width="large")})
    if run is None:
        return
    st.markdown("**Steps** — the parents each step chose and why, and the commands applied before it")
    newest, note = paging.page(steps.sort_values("index", ascending=False) if not steps.empty else steps,
                               PAGE_STEPS, keys.LOG_STEPS_PAGE, "steps")
    table = iv.step_rows(newest, log)
    if table.empty:
        st.caption("No step has run yet.")
        return
    if note:
        st.caption(f"Newest first{note}.")
    st.dataframe(table, hide_index=True, width="stretch", height=min(360, 38 + 35 * len(table)),
                 column_config={"parents (why chosen)": st.column_config.TextColumn(width="large"),
                                "seconds": st.column_config.NumberColumn(format="%.1f"),
                                "predicted ×": st.column_config.NumberColumn(format="%.2f×"),
                                "measured ×": st.column_config.NumberColumn(format="%.2f×")})


def _status_style(row: pd.Series) -> list[str]:
    colour = {"pending": "color: #b45309", "rejected": "color: #b91c1c"}.get(row["status"], "")
    return [colour if c == "status" else "" for c in row.index]
