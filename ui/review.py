"""Team review in the studio: approving a candidate, the approved candidate on the dashboard, the
report download and the run's activity feed.

Approval goes through ``ui.interventions.send`` (``engine.commands.send_command``: the role is
checked there, the command recorded with who and why); the report is
``engine.records.report.build_report``, built only when someone clicks download.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from storage import activity
from storage.db import studio_view
from ui import data, gain_view, identity, interventions as iv, keys, nav, submission
from ui.errors import shows_storage_errors
from ui.render import md
from ui.steering import show_outcome


def approve_box(run: dict, cand_id: str, has_text: bool) -> None:
    """Approve this candidate (or withdraw the approval), with a reason; editors only."""
    approved = run.get("approved_candidate_id")
    if approved == cand_id:
        st.success("This is the run's **approved** candidate.", icon=":material/verified:")
    with st.expander("Approve this candidate" if approved != cand_id else "Withdraw the approval",
                     icon=":material/verified:"):
        if approved != cand_id:
            gain_view.approve_note(run, cand_id)
        st.text_input("Why (recorded with the approval)", key=keys.APPROVE_REASON.format(cand=cand_id),
                      placeholder="e.g. best on the hard cases, reviewed by the team")
        slot = f"approve:{cand_id}"
        st.button("Approve" if approved != cand_id else "Withdraw", icon=":material/verified:",
                  key=submission.widget_key(keys.APPROVE_SEND.format(cand=cand_id), slot),
                  disabled=not has_text or not identity.may("approve"), on_click=_send_approval,
                  args=(run["id"], cand_id, approved != cand_id, slot, submission.token(slot)))
        note = identity.refusal_note("approve") or (None if identity.current_actor() else iv.NO_NAME)
        if note:
            st.caption(note)
        elif approved and approved != cand_id:
            st.caption(f"Approving this one replaces the approval of {approved}.")
        show_outcome(keys.APPROVE_OUTCOME.format(cand=cand_id))


def _send_approval(run_id: str, cand_id: str, approve: bool, slot: str, token: str) -> None:
    """Button callback: approve ``cand_id`` (or withdraw its approval) as the current person."""
    reason = st.session_state.get(keys.APPROVE_REASON.format(cand=cand_id), "")
    out = iv.send(data.get_db(), run_id, "approve", {"candidate_id": cand_id if approve else None},
                  identity.current_actor(), reason, token)
    if out.ok and out.command_ids:
        out = iv.Outcome(True, (f"Approved {cand_id}" if approve else "Approval withdrawn")
                         + f" (command {out.command_ids[0]}).", out.command_ids)
    if out.command_ids:
        submission.renew(slot)
    st.session_state[keys.APPROVE_OUTCOME.format(cand=cand_id)] = out
    data.forget_steering()
    data.run_overview.clear()  # the run row changed: the runs list and the dashboard show it at once
    data.runs_table.clear()


def approved_link(run: dict) -> None:
    approved = run.get("approved_candidate_id")
    if approved:
        nav.link("candidate", f"Approved: {approved}", run=run["id"], candidate=approved, icon=":material/verified:")


def report_download(run_id: str) -> None:
    """One self-contained HTML file of the run, built when clicked."""
    from engine.records.report import build_report

    # the whole run is read through the engine's functions: with the studio's time limit on each read
    st.download_button("Download the report (HTML)", data=lambda: build_report(studio_view(data.get_db()), run_id),
                       file_name=f"refract-{run_id}.html", mime="text/html", key=keys.REPORT_DOWNLOAD,
                       icon=":material/download:", on_click="ignore",
                       help="One file with the summary, config, plots, frontier, lineage, the approved (or best) "
                            "candidate and its diff against the seed, per-example scores, commands and comments. "
                            "Opens in any browser without a network.")


@st.fragment
@shows_storage_errors
def activity_feed(run_id: str) -> None:
    """Commands, comments and refusals of the run, newest first, filterable by person."""
    rows = activity.run_activity(data.get_db(), run_id)
    if not rows:
        st.caption("No activity yet: commands, comments and refused actions appear here, newest first.")
        return
    people = sorted({r["who"] for r in rows if r["who"]})
    person = st.selectbox("Person", ["everyone", *people], key=keys.ACTIVITY_PERSON)
    shown = rows if person == "everyone" else [r for r in rows if r["who"] == person]
    st.caption(f"{len(shown)} event(s)" + ("" if person == "everyone" else f" by {md(person)}"))
    st.dataframe(pd.DataFrame(shown, columns=["when", "who", "what", "candidate", "detail", "status"]),
                 hide_index=True, width="stretch", height=min(400, 38 + 35 * len(shown)),
                 column_config={"when": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
                                "detail": st.column_config.TextColumn(width="large")})
