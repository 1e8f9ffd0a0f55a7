"""The candidate page's annotated text: every line with the candidate, step and kind of
writing (seed, reflection, merge, person's edit) that introduced it — ``engine.records.blame`` shown.

Lines are shown in a table (text cells, never Markdown). Each line links to the candidate
that wrote it (its Reflection tab holds the prompt, with the side information it read) and to
that step's explanation.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.records.blame import blame
from ui import data, nav
from ui.step_links import explain_url
from ui.teaching_keys import BLAME_COMPONENT

# one pale colour per writer, so runs of lines by the same candidate read as blocks
PALETTE = ("#dbeafe", "#dcfce7", "#fef9c3", "#fce7f3", "#ede9fe", "#ffedd5", "#ccfbf1", "#f1f5f9")
ORIGIN_WORDS = {"seed": "the seed", "reflection": "a reflection", "merge": "a merge", "human": "a person's edit"}


@st.cache_data(ttl=data.HEAVY_TTL, show_spinner=False, max_entries=32)
def _blame(url: str, run_id: str, candidate_id: str, token: str) -> pd.DataFrame:
    return pd.DataFrame(blame(data._db(url), run_id, candidate_id))


def render(url: str, run_id: str, candidate_id: str, token: str) -> None:
    lines = _blame(url, run_id, candidate_id, token)
    if lines.empty:
        st.caption("This candidate has no text (a failed proposal).")
        return
    st.caption("Each line is credited to the candidate that first wrote it: a line its parent already had keeps "
               "the parent's credit. Open the writer to read the reflection prompt (and the side information it "
               "read), or the step to see that reflection explained. Same as `python -m engine blame "
               f"{run_id} {candidate_id}`.")
    components = list(dict.fromkeys(lines["component"]))
    shown = st.radio("Component", components, horizontal=True, key=BLAME_COMPONENT) if len(components) > 1 else components[0]
    view = lines[lines["component"] == shown]
    writers = list(dict.fromkeys(view["candidate_id"]))
    colour = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(writers)}
    counts = view["candidate_id"].value_counts()
    st.markdown("  ·  ".join(f"`{c}` {ORIGIN_WORDS.get(o, o)} at step {s}: {counts[c]} line(s)"
                             for c, o, s in view.drop_duplicates("candidate_id")[["candidate_id", "origin", "step"]]
                             .itertuples(index=False)))
    table = pd.DataFrame({
        "line": view["line_no"], "text": view["text"],
        "written by": [nav.url("candidate", run_id, c) for c in view["candidate_id"]],
        "how": view["origin"].map(lambda o: ORIGIN_WORDS.get(o, o)),
        "step": [explain_url(run_id, s) for s in view["step"]],
    })
    writer = view["candidate_id"]  # same index as the table
    styled = table.style.apply(lambda row: [f"background-color: {colour[writer[row.name]]}"] * len(row), axis=1)
    st.dataframe(styled, hide_index=True, width="stretch", height=min(36 * (len(table) + 1) + 2, 700), column_config={
        "line": st.column_config.NumberColumn("line", width="small"),
        "text": st.column_config.TextColumn("text", width="large"),
        "written by": st.column_config.LinkColumn("written by", display_text=r"candidate=(\w+)", width="small"),
        "step": st.column_config.LinkColumn("step (explained)", display_text=r"step=(\d+)", width="small"),
    })
