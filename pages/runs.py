"""Runs: every run in the database, filters, open, duplicate a config, compare runs."""

from __future__ import annotations

import streamlit as st

from ui import admin, analysis, charts, data, filters, keys, nav, welcome
from ui.render import fmt_seconds
from ui.sidebar import STALE_AFTER_S

url = data.db_url()
st.title("Runs")
admin.deleted_note()
table = data.runs_table(url)
if table.empty:
    welcome.show()
    st.stop()

# a run submitted with no owner gets a name in the filter (an empty one drew an empty chip)
table["owner"] = table["owner"].fillna("").replace("", "(no owner)")
f1, f2, f3 = st.columns([2, 2, 3])
with f1:
    status = filters.following_multiselect("Status", sorted(table["status"].unique()), keys.RUNS_STATUS)
with f2:
    owner = filters.following_multiselect("Owner", sorted(table["owner"].unique()), keys.RUNS_OWNER)
with f3:
    text = st.text_input("Name contains", key=keys.RUNS_SEARCH)
waiting = analysis.waiting_reasons(table, data.worker_status(url), STALE_AFTER_S)
if waiting:
    st.info(f"{len(waiting)} run(s) waiting for an engine worker: {next(iter(waiting.values())).split(': ', 1)[1]}. "
            "A queued run can be cancelled from its dashboard (Stop).", icon=":material/hourglass_top:")
view = table[table["status"].isin(status) & table["owner"].isin(owner)]
if text:
    view = view[view["name"].str.contains(text, case=False, regex=False)]

shown = view.assign(
    open=[nav.url("dashboard", r) for r in view["id"]],
    calls=[f"{c:,} / {m:,}" if m else f"{c:,}" for c, m in zip(view["metric_calls"], view["max_metric_calls"].fillna(0).astype(int))],
    elapsed=[fmt_seconds(s) for s in view["elapsed_s"]],
    note=[waiting.get(r, "") for r in view["id"]],
)[["open", "name", "id", "owner", "status", "note", "best_val", "approved", "calls", "cost_usd", "elapsed", "steps",
   "model", "created_at"]]
st.caption(f"{len(view)} of {len(table)} runs · select rows to open, duplicate or compare")
event = st.dataframe(shown, hide_index=True, width="stretch", key=keys.RUNS_TABLE, on_select="rerun",
                     selection_mode="multi-row",
                     column_config={"open": st.column_config.LinkColumn("open", display_text="open ↗", width="small"),
                                    "best_val": st.column_config.NumberColumn("best val", format="%.3f"),
                                    "cost_usd": st.column_config.NumberColumn("$ spent", format="$%.4f"),
                                    "calls": "metric calls used / budget",
                                    "note": st.column_config.TextColumn("waiting", width="medium"),
                                    "created_at": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm")})
selected = [shown.iloc[i]["id"] for i in (event.selection.rows if event else [])]

b1, b2, b3 = st.columns(3)
with b1:
    if st.button("Open dashboard", disabled=len(selected) != 1, key=keys.RUNS_OPEN, width="stretch"):
        nav.go("dashboard", run=selected[0])
with b2:
    if st.button("Duplicate config into a new run", disabled=len(selected) != 1, key=keys.RUNS_DUPLICATE, width="stretch"):
        config = data.run_config(url, selected[0])
        st.session_state[keys.NEW_PREFILL] = dict(config or {}, name=f"{(config or {}).get('name', 'run')} (copy)")
        nav.go("new")
with b3:
    st.caption("Select two or more runs to compare them below.")

if len(selected) >= 2:
    st.subheader("Compare")
    x = st.segmented_control("Best score against", ["metric_calls", "cost_usd"], format_func=charts.X_LABELS.get,
                             default="metric_calls", key=keys.RUNS_COMPARE) or "metric_calls"
    cmp = data.compare_runs(url, tuple(selected))
    names = dict(zip(table["id"], table["name"]))
    st.plotly_chart(charts.compare_figure(cmp, names, x), width="stretch",
                    key="runs_compare_chart")
    nav.link("compare_runs", "Side by side: held-out results, config differences, best texts", runs=selected,
             icon=":material/stacked_line_chart:")
