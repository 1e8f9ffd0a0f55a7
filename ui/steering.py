"""Steering controls — the places where issue 5 plugs in.

Each function is called by a page at the spot where its controls belong and renders nothing
interactive yet: the commands (pin, veto, edit, feedback, pause, step …) are written through
``storage.repo.add_command`` once the engine applies them at step boundaries. Until then the
pages show what exists (pinned / vetoed marks, comments, the command log) read-only.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.render import md


def run_controls(run: dict) -> None:
    """STEERING: pause / resume / step / stop / change budgets of a live run (issue 5 §1)."""
    return None


def candidate_controls(run: dict, candidate: dict) -> None:
    """STEERING: pin, veto, edit-and-inject, feedback for one candidate (issue 5 §2–5)."""
    return None


def comment_box(run_id: str, candidate_id: str) -> None:
    """STEERING: add a comment to a candidate's thread (issue 5 §6)."""
    return None


def intervention_log(log: pd.DataFrame) -> None:
    """The run's commands, newest first (who, what, why, when applied, result)."""
    if log.empty:
        st.caption("No interventions yet.")
        return
    view = pd.DataFrame({
        "when": log["created_at"], "who": log["author"], "command": log["kind"],
        "on": log["payload"].map(lambda p: (p or {}).get("candidate_id", "")),
        "why": log["reason"], "status": log["status"], "applied at step": log["applied_step"], "result": log["result"],
    })
    st.dataframe(view, hide_index=True, width="stretch")


def pending_note(n_pending: int) -> None:
    if n_pending:
        st.info(md(f"{n_pending} command(s) waiting for the engine's next step boundary."))
