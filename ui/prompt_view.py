"""How the studio shows a prompt evaluator's evaluations: the task LM's output and, per
assertion, whether it passed and why (``side_info`` as ``refract_prompt`` writes it)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.render import show_side_info, show_text


def is_prompt_side_info(info: dict) -> bool:
    return isinstance(info, dict) and isinstance(info.get("assertions"), list) and "output" in info


def assertion_table(info: dict) -> pd.DataFrame:
    return pd.DataFrame([{"assertion": a.get("assertion"), "passed": "✓" if a.get("passed") else "✗",
                          "score": a.get("score"), "why": a.get("reason", "")} for a in info.get("assertions") or []])


def show_evaluation(info: dict) -> None:
    """One evaluation: a prompt evaluator's output and assertion results, else its side information."""
    if not is_prompt_side_info(info):
        show_side_info(info)
        return
    st.caption("Task LM output")
    show_text(info["output"] or "(empty)")
    st.dataframe(assertion_table(info), hide_index=True, width="stretch")
