"""Lineage: the whole tree of a run as a plotly graph; click a node to open the candidate. Beside
it, on demand, the tree of its base run or of a branch, with the branch point marked; and
*Branch from* the candidate in view."""

from __future__ import annotations

import streamlit as st

from ui import branching, data, keys, nav
from ui.lineage import lineage_figure
from ui.lineage_runs import candidate_of
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
front = data.frontier_of(url, run)
hidden = int(cands["status"].isin(["rejected", "failed"]).sum())
in_view = nav.query_candidate() if nav.query_candidate() in set(cands["id"]) else run.get("best_candidate_id")
# the page's actions in one row: the branch button beside the dashboard link, not alone on a row of its own
c1, c2, c3 = st.columns([5, 2, 3], vertical_alignment="center")
with c1:
    show = st.toggle(f"Show rejected and failed proposals ({hidden})", value=False, key=keys.LIN_SHOW_REJECTED)
with c2:
    nav.link("dashboard", "Run dashboard", run=run_id, icon=":material/monitoring:")
with c3:
    if in_view:
        branching.branch_button(run_id, [in_view], "lineage", label=f"Branch from {in_view}")
st.caption(f"{len(cands):,} candidates · {len(front.members):,} on the frontier · x = step, one row per lineage branch; "
           "★ best, ◆ frontier, ■ merge, ▲ human edit (an orange □ / purple △ ring when another mark, e.g. frontier, takes the symbol), "
           "red ring pinned (never collapsed), grey ⊗ vetoed, × rejected / failed. "
           "Click a node to open it; scroll to zoom, drag to pan.")
fig = lineage_figure(cands, run.get("best_candidate_id"), front.members, show_rejected=show, highlight=nav.query_candidate())
related = branching.related_runs(run)
other = st.selectbox("Show beside it the tree of", list(related), index=None, format_func=related.get,
                     placeholder="its base run or a branch", key=keys.LIN_BOTH_TREES) if related else None
if other:
    fig = branching.joined_lineage(run, fig, other, show)
event = st.plotly_chart(fig, key=keys.LIN_CHART, width="stretch", on_select="rerun", selection_mode="points",
                        config={"scrollZoom": True, "displaylogo": False})
points = (event.selection.points if event else []) or []
if points and points[0].get("customdata"):
    target_run, target = candidate_of(points[0]["customdata"], run_id)
    nav.go("candidate", run=target_run, candidate=target)
