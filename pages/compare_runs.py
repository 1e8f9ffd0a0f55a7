"""Compare runs: two or more runs side by side — the best validation score against metric calls,
dollars or seconds on one chart, their held-out results, their config differences, and each
run's best text against the others'. Opened from the Runs page (select runs), from a branch's
dashboard (with its base run) and with ``?runs=r1,r2``."""

from __future__ import annotations

import streamlit as st

from storage import branches
from storage.compare_queries import pair_evaluations
from ui import branching, charts, compare, compare_runs as cr, data, gain_view, keys, nav
from ui.render import md

url = data.db_url()
st.title("Compare runs")
table = data.runs_table(url)
if table.empty:
    st.info("No runs yet.")
    st.stop()
names = dict(zip(table["id"], table["name"]))
asked = [r for r in (st.query_params.get(keys.QP_RUNS) or "").split(",") if r in names]
if not asked and nav.current_run() in names:  # this run with its base run and its branches
    run = data.run_overview(url, nav.current_run())
    asked = [run["id"], *branching.related_runs(run)] if run else []
picked = st.multiselect("Runs", list(names), default=asked, key=keys.CMPR_RUNS,
                        format_func=lambda r: f"{names[r]} · {r}", help="two or more runs")
if len(picked) < 2:
    st.info("Pick two or more runs (a branch and its base run, say) to see them side by side.")
    st.stop()
st.query_params[keys.QP_RUNS] = ",".join(picked)
runs = {rid: data.run_overview(url, rid) for rid in picked}
runs = {rid: r for rid, r in runs.items() if r is not None}

st.subheader("Best validation score so far")
x = st.segmented_control("Against", list(charts.X_LABELS), format_func=charts.X_LABELS.get, default="metric_calls",
                         key=keys.CMPR_X) or "metric_calls"
progress = data.compare_runs(url, tuple(runs))
st.plotly_chart(charts.compare_figure(progress, names, x), width="stretch", key="cmpr_chart")

st.subheader("Held-out results", help="each run's best against its own seed on the held-out test set, with a paired "
             "bootstrap interval; reused: evaluations a branch copied from its base run instead of paying")
gains = {rid: gain_view.gain_of(run) for rid, run in runs.items()}
reused = {rid: sum(branches.reused_counts(data.get_db(), rid).values()) for rid in runs}
st.dataframe(cr.summary(runs, gains, reused), hide_index=True, width="stretch",
             column_config={c: st.column_config.NumberColumn(format="%.3f") for c in
                            ("best val", "best test", "seed test", "held-out gain", "val–test gap")}
             | {"$": st.column_config.NumberColumn(format="$%.4f"), "seconds": st.column_config.NumberColumn(format="%.1f")})
scores = cr.held_out_scores({rid: pair_evaluations(data.get_db(), rid, r["best_candidate_id"], r["best_candidate_id"])
                             for rid, r in runs.items() if r.get("best_candidate_id")})
if not scores.empty:
    with st.expander(f"Each best on each held-out example ({len(scores)})"):
        st.dataframe(scores, hide_index=True, width="stretch")

st.subheader("Config differences")
diff = cr.config_differences({rid: r.get("config") or {} for rid, r in runs.items()})
if diff.empty:
    st.caption("The runs have the same settings.")
else:
    st.dataframe(diff, hide_index=True, width="stretch")

st.subheader("Best candidates, diffed")
ref = st.selectbox("Against the best of", list(runs), format_func=lambda r: f"{names[r]} · {r}", key=keys.CMPR_BASE)
token = {rid: data.version_token(r) for rid, r in runs.items()}


def best_text(rid: str) -> str | None:
    best = runs[rid].get("best_candidate_id")
    detail = data.candidate_detail(url, best, token[rid]) if best else None
    return compare.text_of(detail["candidate"]["content"]) if detail else None


mine = best_text(ref)
for rid in runs:
    if rid == ref:
        continue
    theirs = best_text(rid)
    with st.expander(f"{md(names[rid])} · {rid} against {ref}", expanded=len(runs) == 2):
        if mine is None or theirs is None:
            st.caption("One of the two runs has no best candidate yet.")
        else:
            st.code(compare.unified_diff(mine, theirs, f"{ref} best", f"{rid} best"), language="diff")
