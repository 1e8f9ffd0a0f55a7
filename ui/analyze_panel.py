"""The run dashboard's Analyze panel: what is wrong with the run and what to do.

Three layers, as ``engine.analyze`` computes them: the findings (refreshed live while the run
goes, re-computed only when the run has changed), each with its evidence as links and its
actions as one-click commands (the same ``engine.commands`` path as every control); and the
written diagnosis, which the page never writes itself: a click queues an ``analyze`` job that the
engine worker runs with the run's reflection LM, and the draft is shown with the findings each
item cites.
"""

from __future__ import annotations

import re

import streamlit as st

from engine.analyze import analyze
from engine.analyze.diagnosis import CITE, TITLE_END, parse
from engine.analyze.report_text import action_command
from engine.branch import branch_run
from engine.worker.jobs import ANALYZE
from storage import analyze_queries
from storage.states import ACTIVE, FINISHED
from ui import data, identity, interventions as iv, keys as K, nav, submission
from ui.errors import shows_storage_errors
from ui.jobs import request_into, show_job
from ui.render import md
from ui.steering import show_outcome
from ui.step_links import explain_url

REFRESH_S = 5.0
# metric calls above which the findings are computed when asked, not with the page: they read every
# evaluation of the run (0.6-0.8 s at 2,000 candidates and 214,000 of them, docs/benchmarks-analyze.md,
# again at each validation pass of a live run; seconds at 2.5 M)
ON_DEMAND_ABOVE = 100_000
ICON = {"severe": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}
SHOWN_LINKS = 6


@st.cache_data(ttl=data.HEAVY_TTL, show_spinner=False, max_entries=32)
def findings(url: str, run_id: str, token: str) -> list[dict]:
    """The run's findings as plain dicts, re-computed when ``token`` changes (``step_token``)."""
    return [f.to_dict() for f in analyze(data._db(url), run_id)]


def step_token(run: dict) -> str:
    """Changes when a step ends, a command is applied, the frontier or the status changes: the
    findings are re-computed then, not at every metric call (an analysis of a 2,000-candidate run
    reads every validation score, ``docs/benchmarks-analyze.md``)."""
    return ":".join(str(run.get(k)) for k in ("steps_done", "frontier_version", "status", "best_candidate_id",
                                                "commands_done"))


def show(run_id: str, status: str) -> None:
    """The panel: findings (a fragment, live while the run goes), then the written diagnosis."""
    st.subheader("Analyze", help="What is wrong with this run and what to do, computed from its own records (steps, "
                 "proposals and their reasons, evaluations, LM calls, commands, the frontier and the runtime model). "
                 "No LM is involved until you ask for a written diagnosis.")
    st.fragment(_findings, run_every=REFRESH_S if status in ACTIVE else None)(run_id)
    _diagnosis(run_id)


@shows_storage_errors
def _findings(run_id: str) -> None:
    url = data.db_url()
    run = data.run_overview(url, run_id)
    if run is None:
        return
    token = step_token(run)
    if (run.get("metric_calls") or 0) > ON_DEMAND_ABOVE:
        token = _asked(run, token)
        if token is None:
            return
    found = findings(url, run_id, token)
    _settled_actions(url, run_id, found)
    if not found:
        st.success("Nothing to report: no finding about this run.", icon=":material/check_circle:")
        return
    counts = {s: sum(f["severity"] == s for f in found) for s in ("severe", "warning", "info")}
    st.caption(f"{len(found)} finding(s): " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
               + " · most severe first, causes before symptoms")
    for f in found:
        with st.container(border=True, key=K.ANALYZE_FINDING.format(finding=f["id"])):
            st.markdown(f"{ICON[f['severity']]} **{f['id']} · {f['severity']}** — {md(f['title'], limit=600)}")
            if f["detail"]:
                st.caption(md(f["detail"], limit=1000))
            links = _evidence(run_id, f["evidence"])
            if links:
                st.markdown(links)
            for i, action in enumerate(f["actions"]):
                _action(run, f, i, action)


def _asked(run: dict, now: str) -> str | None:
    """For a big run: the token of the run as it was when this session asked for its findings
    (they stay as they were then, and a button offers to compute them again once the run moved
    on), or None while nothing was asked (a button asks)."""
    key = K.ANALYZE_ASKED.format(run=run["id"])
    asked = st.session_state.get(key)
    if asked is None or asked != now:
        label = "Analyze this run" if asked is None else "Analyze again"
        note = (f"This run has {run['metric_calls']:,} evaluations: its findings read every one of them (seconds at "
                "this size), so they are computed when asked, not with the page." if asked is None else
                "These findings are of the run as it was when asked; it has moved on since.")
        c1, c2 = st.columns([1, 4], vertical_alignment="center")
        if c1.button(label, key=K.ANALYZE_ASK, icon=":material/troubleshoot:"):
            st.session_state[key] = asked = now
        c2.caption(note)
    return asked


def _settled_actions(url: str, run_id: str, found: list[dict]) -> None:
    """What became of this session's clicks whose finding is gone: a veto the engine applied
    removes its finding (and the button with its note) often before the page shows the note, so
    it is said here, as the command log has it now ("veto applied (command 7): …")."""
    shown = {K.ANALYZE_ACTION.format(finding=f["kind"], i=i) for f in found for i in range(len(f["actions"]))}
    gone = [key for key in st.session_state.get(_CLICKED.format(run=run_id), []) if key not in shown]
    if gone:
        log = data.command_log(url, run_id)
        for key in gone:
            show_outcome("_out_" + key, log)


_CLICKED = "_analyze_clicked_{run}"  # the action keys this session clicked on a run, oldest first


def _evidence(run_id: str, ev: dict) -> str:
    """The evidence as one markdown line: candidates and steps as links, examples, counts."""
    parts = []
    cands = [c for c in ev.get("candidates", []) if c]
    if cands:
        shown = [f"[`{c}`]({nav.url('candidate', run_id, c)})" for c in cands[:SHOWN_LINKS]]
        parts.append("candidates " + ", ".join(shown) + (f" … ({len(cands)})" if len(cands) > SHOWN_LINKS else ""))
    steps = ev.get("steps", [])
    if steps:
        shown = [f"[{s}]({explain_url(run_id, s)})" for s in steps[:SHOWN_LINKS]]
        parts.append("steps " + ", ".join(shown) + (f" … ({len(steps)})" if len(steps) > SHOWN_LINKS else ""))
    examples = ev.get("examples", [])
    if examples:
        parts.append("examples " + ", ".join(md(str(x)) for x in examples[:SHOWN_LINKS])
                     + (f" … ({len(examples)})" if len(examples) > SHOWN_LINKS else ""))
    counts = ev.get("counts") or {}
    if counts:
        parts.append(" · ".join(f"{k.replace('_', ' ').replace('lm ', 'LM ')} {v}" for k, v in counts.items()))
    return " · ".join(parts)


def _action(run: dict, finding: dict, i: int, action: dict) -> None:
    """One action's button: a command (veto, pin, feedback, budget), or a branch."""
    run_id, kind = run["id"], action["kind"]
    key, slot = K.ANALYZE_ACTION.format(finding=finding["kind"], i=i), f"analyze:{finding['kind']}:{i}"
    command = action_command(run_id, kind, action["payload"], action["reason"])
    finished = run["status"] in FINISHED
    if kind == "branch":
        _branch(run, action, key, command)
        return
    note = "continues the run with this budget" if kind == "budget" and finished else "sent as a command"
    disabled = (finished and kind != "budget") or not identity.may(kind)
    c1, c2 = st.columns([2, 5], vertical_alignment="center")
    c1.button(action["label"], key=submission.widget_key(key, slot), icon=":material/bolt:", disabled=disabled,
              on_click=_send, args=(run, kind, action["payload"], action["reason"], key, slot, submission.token(slot)),
              help=f"One click, {note} (recorded with who and why). The same on the command line: `{command}`"
              + (" · a finished run takes no steering commands" if finished and kind != "budget" else ""))
    if kind == "feedback":
        c2.caption(f"“{md(action['payload']['text'])}”")
    show_outcome("_out_" + key)


def _send(run: dict, kind: str, payload: dict, reason: str, key: str, slot: str, token: str) -> None:
    db, actor = data.get_db(), identity.current_actor()
    if kind == "budget" and run["status"] in FINISHED:
        out = iv.continue_run(db, run, {**iv.suggested_budget(run), **payload}, actor, client_token=token)
    else:
        out = iv.send(db, run["id"], kind, payload, actor, reason, token)
    if out.command_ids:
        submission.renew(slot)
    st.session_state["_out_" + key] = out
    clicked = st.session_state.setdefault(_CLICKED.format(run=run["id"]), [])
    if key not in clicked:
        clicked.append(key)
    data.forget_steering()


def _branch(run: dict, action: dict, key: str, command: str) -> None:
    """A new run from the best (or the candidate named) with the suggested settings, queued at once."""
    st.button(action["label"], key=key, icon=":material/call_split:", disabled=not identity.may("create_run"),
              on_click=_send_branch, args=(run["id"], action, key),
              help=f"One click: a new run from the best candidate with {action['payload']['settings']}, queued for "
                   f"the engine (the base run is unchanged). The same on the command line: `{command}`")
    made = st.session_state.get("_out_" + key)
    if isinstance(made, str):
        nav.link("dashboard", f"Branch {made} queued: open its dashboard", run=made, icon=":material/call_split:")
    else:
        show_outcome("_out_" + key)


def _send_branch(run_id: str, action: dict, key: str) -> None:
    payload, actor = action["payload"], identity.current_actor()
    try:
        ids = [payload["candidate_id"]] if payload.get("candidate_id") else None
        made = branch_run(data.get_db(), run_id, ids, payload.get("settings") or {}, owner=actor.name if actor else "",
                          actor=actor, roles=identity.role_map())
    except Exception as exc:  # noqa: BLE001 -- a refusal or a setting that does not validate, shown at the button
        st.session_state["_out_" + key] = iv.Outcome(False, str(exc))
        return
    st.session_state["_out_" + key] = made


# ---------------------------------------------------------------- layer 2: the written diagnosis


def _diagnosis(run_id: str) -> None:
    job_key = K.ANALYZE_JOB.format(run=run_id)
    left, right = st.columns([2, 5], vertical_alignment="center")
    left.button("Write a diagnosis", key=K.ANALYZE_DIAGNOSE, icon=":material/edit_note:",
                disabled=bool(identity.refusal_note(ANALYZE)), on_click=request_into,
                args=(ANALYZE, {"run_id": run_id}, job_key),
                help=identity.refusal_note(ANALYZE) or "The run's reflection LM reads the findings above (and the "
                "objective, nothing else) and writes the two or three things most worth doing, citing the findings. "
                "The engine worker runs it; the call is recorded on the run as an LM call of purpose analysis.")
    right.caption("A draft by the run's reflection LM: nothing in it is applied by itself.")
    if st.session_state.get(job_key):
        show_job(job_key, "Written diagnosis", "waiting for the engine worker to ask the run's reflection LM…",
                 lambda job: _draft(job["result"] or {}))
        return
    last = analyze_queries.last_diagnosis(data.get_db(), run_id)
    if last is not None:
        with st.container(border=True):
            st.markdown(f"**Last written diagnosis** · {md(last['model'])} · {last['started_at']:%Y-%m-%d %H:%M} UTC")
            _draft(recorded(last))


def recorded(call: dict) -> dict:
    """A recorded diagnosis with the findings its prompt listed (they may have changed since)."""
    prompt = next((m["content"] for m in call["messages"] if m["role"] == "user"), "")
    titles = {m.group(1): m.group(3).split(TITLE_END)[0]
              for m in re.finditer(r"^\[(F\d+)\] \((\w+)\) (.*)$", prompt, re.M)}
    return {"items": parse(call["answer"], titles), "findings": [{"id": i, "title": t} for i, t in titles.items()],
            "text": call["answer"], "error": None}


def _draft(result: dict) -> None:
    if result.get("error"):
        st.error(f"No usable diagnosis: {md(result['error'])}. Ask again, or read the findings above.",
                 icon=":material/error:")
        return
    if not result.get("items"):
        st.caption("The reflection LM's answer held no advice to show.")
        return
    titles = {f["id"]: f["title"] for f in result.get("findings", [])}
    for n, item in enumerate(result.get("items", []), 1):
        # the citations in bold, the rest escaped (the answer is the LM's text, never Markdown of its own)
        pieces = CITE.split(item["text"])
        text = "".join(f"**[{p}]**" if i % 2 else md(p, limit=1000) for i, p in enumerate(pieces))
        st.markdown(f"{n}. {text}")
        if item["cites"]:
            st.caption(" · ".join(f"{c}: {md(titles.get(c, ''))}" for c in item["cites"]))
        else:
            st.caption(":orange[cites no finding: check it yourself before acting on it]")
        if item["unknown"]:
            st.caption(f":orange[cites {', '.join(item['unknown'])}, which is no finding]")
