"""One caption for the dashboard's KPI area: how many LM calls failed, and how."""

from __future__ import annotations

import streamlit as st

from engine.lm.journal import lm_failure_summary


def lm_failures_text(run: dict) -> str:
    """``LM calls: 31 of 104 LM calls failed (429 ×12, timeout ×9 …)`` for a run overview
    (``storage.queries.run_overview``); '' when none failed or was interrupted."""
    note = lm_failure_summary(int(run.get("lm_calls") or 0), int(run.get("lm_calls_failed") or 0),
                              int(run.get("lm_calls_interrupted") or 0), run.get("lm_failures_by_kind"))
    return f"LM calls: {note}" if note else ""


def lm_failures_caption(run: dict) -> None:
    text = lm_failures_text(run)
    if text:
        st.caption(text, help="every attempt is a row of the run's LM calls (status, error kind); 429, 5xx, "
                              "timeouts, bad bodies and connection errors are retried up to [reflection_lm] "
                              "num_retries times. `python -m engine status RUN` prints the same line")
