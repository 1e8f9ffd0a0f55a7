"""Lineage: the whole tree of a run as a plotly graph; click a node to open the candidate."""

from __future__ import annotations

import streamlit as st

from ui import data, keys, nav
from ui.lineage import lineage_figure
from ui.render import md

url = data.db_url()
run_id, run = nav.linked_run(url, "Lineage",
                             "Open a run first (Runs page); its lineage link carries `?run=…`.")

token = data.version_token(run)
cands = data.candidate_rows(url, run_id, token)
st.title(f"Lineage · {md(run['name'])}")
if cands.empty:
    st.info("No candidates yet.")
    st.stop()
front = data.frontier_view(url, run_id, token)
hidden = int(cands["status"].isin(["rejected", "failed"]).sum())
c1, c2 = st.columns([3, 2], vertical_alignment="center")
with c1:
    show = st.toggle(f"Show rejected and failed proposals ({hidden})", value=False, key=keys.LIN_SHOW_REJECTED)
with c2:
    nav.link("dashboard", "Run dashboard", run=run_id, icon=":material/monitoring:")
st.caption(f"{len(cands)} candidates · {len(front.members)} on the frontier · x = step, one row per lineage branch; "
           "★ best, ◆ frontier, ■ merge, ▲ human edit (an orange □ / purple △ ring when another mark, e.g. frontier, takes the symbol), "
           "red ring pinned (never collapsed), grey ⊗ vetoed, × rejected / failed. "
           "Click a node to open it; scroll to zoom, drag to pan.")
fig = lineage_figure(cands, run.get("best_candidate_id"), front.members, show_rejected=show,
                     highlight=nav.query_candidate())
event = st.plotly_chart(fig, key=keys.LIN_CHART, width="stretch", on_select="rerun", selection_mode="points",
                        config={"scrollZoom": True, "displaylogo": False})
points = (event.selection.points if event else []) or []
if points and points[0].get("customdata"):
    nav.go("candidate", run=run_id, candidate=points[0]["customdata"])
