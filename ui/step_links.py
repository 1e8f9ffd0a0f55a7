"""The dashboard's Steps table: one row per step with what it did and cost, and a link that
opens the step explained (``explain?run=RUN&step=N``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui import paging
from ui.keys import DASH_STEPS_PAGE
from ui.teaching_keys import QP_STEP

PAGE_STEPS = 100  # steps shown at once, newest first


def explain_url(run_id: str, step: int) -> str:
    return f"/explain?run={run_id}&{QP_STEP}={step}"


def steps_table(run_id: str, steps: pd.DataFrame) -> None:
    st.subheader("Steps")
    if steps.empty:
        st.caption("No step yet.")
        return
    newest, note = paging.page(steps.iloc[::-1], PAGE_STEPS, DASH_STEPS_PAGE, "steps")
    if note:
        st.caption(f"Newest first{note}.")
    steps = newest
    table = pd.DataFrame({
        "step": steps["index"], "parents": steps["parent_ids"].map(len), "proposals": steps["proposal_ids"].map(len),
        "validated": steps["accepted_ids"].map(len), "metric calls": steps["metric_calls"],
        "seconds": steps["seconds"].round(2), "cost $": steps["cost_usd"],
        "explain": [explain_url(run_id, int(i)) for i in steps["index"]],
    })  # newest first: the step a class is watching is on top
    st.dataframe(table, hide_index=True, width="stretch", height=min(36 * (len(table) + 1) + 2, 320), column_config={
        "cost $": st.column_config.NumberColumn(format="%.4f"),
        "explain": st.column_config.LinkColumn("explain", display_text="explain ↗", width="small",
                                               help="this step phase by phase, on its real data"),
    })
