"""Run dashboard, live: run controls, status, budget, KPIs, score charts, frontier, timeline,
candidates, the command log and the steps.

Fragments refresh themselves (no page reload, scroll kept): the run controls and the
command log every second (steering is seen by everyone within 2 s), the live overview
every 2 s, the candidate table and the frontier every 5 s. Each reads through ``ui.data`` (at most 3 queries per
refresh; an idle run costs one).
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.lm.providers import is_local
from engine.held_out_pass import audit_line
from storage.attached import waiting_note
from storage.run_figures import proposal_counts, running_seconds
from storage.states import ACTIVE
from ui import (admin, analysis, analyze_panel, branching, charts, data, filters, gain_view, keys, lm_settings, nav, paging, prompt_view, review,
                steering, step_links)
from ui.errors import shows_storage_errors
from ui.lm_health import lm_failures_caption
from ui.render import code_span, compact, fmt_seconds, md, status_badge
from ui.sidebar import STALE_AFTER_S

LIVE_S, FRONTIER_S = 2.0, 5.0

url = data.db_url()
run_id = nav.current_run()

if not run_id:
    st.title("Run dashboard")
    table = data.runs_table(url)
    if table.empty:
        st.info("No runs yet.")
        nav.link("new", "Create a run", icon=":material/add_circle:")
        st.stop()
    labels = {r.id: f"{r.name} · {r.id} · {r.status}" for r in table.itertuples()}
    choice = st.selectbox("Open a run", options=list(labels), format_func=labels.get, index=None, key=keys.DASH_RUN)
    if choice:
        st.query_params[keys.QP_RUN] = choice
        st.rerun()
    st.stop()

run = nav.require_run(url, run_id)

cfg = run.get("config") or {}
search = cfg.get("search") or {}
head, links = st.columns([4, 2], vertical_alignment="bottom")
with head:
    st.title(md(run["name"]))
    st.caption(f"run `{run_id}` · owner {md(run['owner'] or '—')} · reflection LM "
               f"{code_span((cfg.get('reflection_lm') or {}).get('model', '?'))} · batch "
               f"{search.get('parents_per_step', '?')}×{search.get('proposals_per_parent', '?')} (P×K) · "
               f"{(cfg.get('executor') or {}).get('workers', '?')} workers · selection {md(search.get('selection', '?'))}")
with links:
    nav.link("lineage", "Lineage", run=run_id, icon=":material/account_tree:")
    nav.link("compare", "Compare the best with the seed", run=run_id, icon=":material/compare:")
    review.report_download(run_id)
    branching.branch_popover(run)
branching.lineage_note(run)
steering.run_controls(run_id)
lm_settings.editor(run_id)  # a paused run's LM settings


SERIAL_LM_NOTE = (" With the built-in local model both figures are rough: it answers one request at a time, so a "
                  "step's reflections queue and their measured times include the wait (Step explained's runtime "
                  "panel shows it step by step).")


def _kpis(run: dict, cands: pd.DataFrame, steps: pd.DataFrame, serial_lm: bool = False) -> None:
    seed = cands.loc[cands["origin"] == "seed", "val_mean"].dropna()
    best = run.get("best_val_mean")
    # the run's own counters, over the proposals whose reflection LM has answered (storage.run_figures)
    counts = proposal_counts(run, int(run.get("proposals_reflecting") or 0))
    cost = run["cost_by_purpose"]
    measured, predicted = analysis.speedups(steps)
    cols = st.columns(6)
    gain = None if best is None or seed.empty else best - seed.iloc[0]
    flat = gain is None or abs(gain) < 5e-4  # shown as +0.000: no arrow, no colour (a green up arrow read as a gain)
    cols[0].metric("Best val score", "—" if best is None else f"{best:.3f}",
                   None if gain is None else f"{gain:+.3f} vs seed",
                   delta_color="off" if flat else "normal", delta_arrow="off" if flat else "auto",
                   help="mean score over the validation examples of the best fully validated candidate")
    # a longer label is cut at six columns, and so was "5011 / 9999": from 1,000 answers on, the count
    # of those improved, and of how many under it
    value, below = f"{counts.improved} / {counts.answered}", []
    if counts.answered >= 1000:
        value, below = compact(counts.improved), [f"of {compact(counts.answered)}"]
    below += [f"+{counts.waiting} reflecting"] if counts.waiting else []
    cols[1].metric("Improved", value, " · ".join(below) or None, delta_color="off", delta_arrow="off",
                   help=f"{counts.improved:,} / {counts.answered:,} improved / answered: proposals that beat their "
                        "parent on its minibatch (those validated "
                        "are then accepted), out of every proposal whose reflection LM has answered; "
                        "\"reflecting\": proposals still waiting for their answer")
    cols[2].metric("Metric calls", compact(run["metric_calls"]), help=f"{run['metric_calls']:,} evaluations")
    cols[3].metric("Spent", f"${run['cost_usd']:.4f}", f"{compact(run['tokens_in'])}/{compact(run['tokens_out'])} tok",
                   delta_color="off", delta_arrow="off",
                   help=" · ".join(f"{k} ${v:.4f}" for k, v in cost.items() if v) or "nothing yet")
    cols[4].metric("Elapsed", fmt_seconds(running_seconds(run)),
                   help="running time: while the engine ran the run (the seed, the steps, the held-out test), not "
                        "while it was queued or paused")
    cols[5].metric("Speed-up", "—" if not measured else f"{measured:.1f}×",
                   None if not predicted else f"predicted {predicted:.1f}×", delta_color="off", delta_arrow="off",
                   help="mean over the steps of the engine's measurements: measured = the step's sequential work "
                        "over its wall-clock; predicted = the runtime model's estimate for this batch shape. "
                        "Per step in the Steps table below." + (SERIAL_LM_NOTE if serial_lm else ""))
    _rates(run, counts, cost)
    if audit_line(run):
        st.caption(audit_line(run) + ". The search never saw the test set.")
    lm_failures_caption(run)


def _rates(run: dict, counts, cost: dict) -> None:
    """Parse, validity and acceptance rates of the proposals (a weak reflection LM shows here)
    and the $ split by purpose."""
    parts = [f"step {run['steps_done']}", f"{counts.total} proposals"
             + (f" ({counts.waiting} waiting for the reflection LM)" if counts.waiting else "")
             + (f" ({counts.unanswered} got no answer from it)" if counts.unanswered else "")]
    for label, n in (("parsed", counts.parsed), ("valid", counts.valid), ("improved", counts.improved)):
        parts.append(f"**{label}** {n}/{counts.answered}" + (f" ({counts.percent(n)})" if counts.answered else ""))
    parts += [f"{k} ${v:.4f}" for k, v in cost.items() if v]
    st.markdown(" · ".join(parts), help="over the proposals whose reflection LM answered · parsed: the answer had a "
                "usable fenced block · valid: it passed the evaluator's validate() · improved: it beat its parent on "
                "the minibatch")
    parsed = counts.rate(counts.parsed)
    if counts.answered >= 8 and parsed is not None and parsed < 0.5:
        st.warning(f"Only {parsed:.0%} of the reflection LM's answers could be parsed: the model may be too "
                   "weak for this task, or the artifact kind is unclear to it.", icon=":material/warning:")


def _candidate_table(run_id: str, cands: pd.DataFrame) -> None:
    st.subheader("Candidates")
    if cands.empty:
        st.caption("No candidates yet: the seed appears once the engine has evaluated it.")
        return
    f1, f2, f3 = st.columns([2, 2, 3])
    # the filters follow the run: a status, an origin or a step that appears later is shown
    with f1:
        status = filters.following_multiselect("Status", sorted(cands["status"].unique()), keys.DASH_STATUS,
                                               left_out=("rejected",))
    with f2:
        origin = filters.following_multiselect("Origin", sorted(cands["origin"].unique()), keys.DASH_ORIGIN)
    with f3:
        steps = filters.following_range("Steps", int(cands["step"].min()), int(cands["step"].max()), keys.DASH_STEPS)
    # pinned candidates never disappear from the views, whatever the filters say
    view = cands[(cands["status"].isin(status) & cands["origin"].isin(origin) & cands["step"].between(*steps))
                 | cands["pinned"].astype(bool)]
    view = analysis.ranked(view, data.validation_size(url, run_id))  # fully validated first: partial means rank nothing
    shown = len(view)
    view, page_note = paging.page(view, PAGE_ROWS, keys.DASH_PAGE)
    table = pd.DataFrame({
        "open": [nav.url("candidate", run_id, c) for c in view["id"]],
        "id": view["id"], "status": view["status"], "origin": view["origin"], "step": view["step"],
        "val score": view["full_mean"], "validated on": view["validated"],
        "minibatch Δ (mean)": analysis.minibatch_mean_delta(view),
        "pinned": view["pinned"], "vetoed": view["vetoed"], "author": view["author"],
        "rewrote": view["component"].fillna(""),
    })
    st.caption(f"{shown:,} of {len(cands):,} candidates{page_note} · select a row to open it · pinned ones always shown, "
               "vetoed ones greyed")
    event = st.dataframe(
        _grey_vetoed(table), hide_index=True, width="stretch", height=320, key=keys.DASH_TABLE, on_select="rerun",
        selection_mode="single-row",
        column_config={
            "open": st.column_config.LinkColumn("open", display_text="open ↗", width="small"),
            "val score": st.column_config.ProgressColumn(
                "val score", format="%.3f", min_value=0.0, max_value=max(1.0, float(cands["val_mean"].max() or 1.0)),
                help="mean over every validation example; a candidate whose pass was cut short has none (its "
                     "mean over a few examples is under \"validated on\")"),
            "minibatch Δ (mean)": st.column_config.NumberColumn(
                format="%+.3f", help="mean score per minibatch example, this candidate minus its parent"),
        })
    rows = event.selection.rows if event else []
    if rows:
        nav.go("candidate", run=run_id, candidate=table.iloc[rows[0]]["id"])


PAGE_ROWS = 200  # a page of the candidate table: 10,000 rows took seconds to send on every refresh


def _grey_vetoed(table: pd.DataFrame):
    """Vetoed rows greyed (a Styler over those rows only: styling every row of a 2,000-row table
    would double the dashboard's build time)."""
    vetoed = table.index[table["vetoed"].astype(bool)]
    if vetoed.empty:
        return table
    return table.style.apply(lambda row: ["color: #9ca3af"] * len(row), axis=1, subset=pd.IndexSlice[vetoed, :])


def _best_link(run: dict) -> None:
    """A link that names the best candidate (a colleague opening it later sees this one), drawn
    with the numbers it belongs to."""
    best = run.get("best_candidate_id")
    if best:
        nav.link("candidate", f"Best: {best}", run=run["id"], candidate=best, icon=":material/star:")
    else:
        st.caption("No best candidate yet")
    review.approved_link(run)


@st.fragment(run_every=LIVE_S if run["status"] in ACTIVE else None)
@shows_storage_errors
def live(run_id: str) -> None:
    run, cands, steps = data.live_snapshot(run_id)
    if run is None:
        st.error("This run was deleted.")
        return
    # the run just ended (or was continued): redraw the page once, so the charts stop (or start)
    # refreshing; one state with the run controls, so that whichever sees it first redraws
    steering.redraw_when_it_ends_or_continues(run_id, run["status"], "dashboard")
    reason = f" — {md(run['status_reason'])}" if run.get("status_reason") else ""
    if run["status"] == "queued":
        waiting = analysis.waiting_reasons(data.runs_table(url), data.worker_status(url), STALE_AFTER_S)
        reason = f" — {waiting.get(run_id, '')}"  # the studio's own words and run ids: its `code` spans render
    badge, best_link = st.columns([3, 1], vertical_alignment="center")
    badge.markdown(f"{status_badge(run['status'])}{reason}")
    with best_link:
        _best_link(run)
    waiting = waiting_note(run)
    if waiting:
        st.warning(waiting, icon=":material/hourglass_empty:")
    bs = analysis.budgets(run)
    if bs:
        st.progress(bs[0].fraction, text=f"{bs[0].label()} ({bs[0].fraction:.0%}) — binds first"
                    + ("" if len(bs) < 2 else " · " + " · ".join(f"{b.label()}" for b in bs[1:])))
    else:
        st.caption("No budget limit is set.")
    _kpis(run, cands, steps, serial_lm=is_local((cfg.get("reflection_lm") or {}).get("model", "")))

    left, right = st.columns(2)
    with left:
        x = st.segmented_control("Score against", options=list(charts.X_LABELS), format_func=charts.X_LABELS.get,
                                 default="metric_calls", key=keys.DASH_CHART_X) or "metric_calls"
        progress = analysis.score_progress(run, cands, steps, data.validation_size(url, run_id))
        if progress.empty:
            st.caption("The score chart starts once the seed is validated.")
        else:
            st.plotly_chart(charts.score_progress_figure(progress, x), key="dash_progress_chart", width="stretch")
        if not steps.empty and steps["worker_utilisation"].notna().any():
            st.markdown("**Evaluation workers busy per step**",
                        help="share of the step's wall-clock the sandbox workers spent evaluating; the rest of a step "
                             "is mostly waiting for the reflection LM, so a fast evaluator shows low values")
            st.plotly_chart(charts.utilisation_figure(steps), key="dash_util_chart", width="stretch")
    with right:
        st.markdown("**Step timeline** (last steps: reflections, minibatch evaluations, validation passes)")
        events = analysis.timeline_events(steps, run.get("started_at"))
        if events.empty:
            st.caption("No step has recorded its timeline yet.")
        else:
            st.plotly_chart(charts.timeline_figure(events), key="dash_timeline_chart", width="stretch")
    step_links.steps_table(run_id, steps)


@st.fragment(run_every=FRONTIER_S if run["status"] in ACTIVE else None)
@shows_storage_errors
def frontier_panel(run_id: str) -> None:
    run, view = data.frontier_snapshot(run_id)
    if run is None:
        return
    st.subheader("Pareto frontier")
    if view.best.empty:
        st.caption("The frontier appears once candidates are validated.")
        return
    n_ex = len(view.best)
    members = view.best_on[view.best_on > 0]
    c1, c2, c3 = st.columns(3)
    c1.metric("Frontier size", len(members), help="candidates that hold the best score on at least one validation example "
              "(ties included, vetoed candidates excluded)")
    c2.metric("Validation examples", n_ex)
    c3.metric("Examples solved by no one", int((view.best <= 0).sum()))
    include = st.toggle("Also show the best non-frontier candidates", key=keys.DASH_HEATMAP_ALL)
    # the best non-frontier candidates by their full means (a pass cut short ranks nothing)
    scored = view.aggregates[view.aggregates["val_count"] > 0]
    val_means = analysis.ranked(scored, n_ex).set_index("id")["full_mean"]
    pinned = list(scored.loc[scored["pinned"], "id"])
    rows = charts.heatmap_rows(view, val_means, include_all=include, pinned=pinned)
    fig = charts.frontier_heatmap(view, data.frontier_matrix_of(url, run, rows, charts.heatmap_columns(view)),
                                  pinned=pinned)
    shown = (f"the first {charts.MAX_HEATMAP_ROWS} of {len(members)} frontier members" if len(members) > charts.MAX_HEATMAP_ROWS
             else f"up to {charts.MAX_HEATMAP_ROWS} rows")
    columns = (f"; of the {n_ex} examples, the {charts.MAX_HEATMAP_COLUMNS} held by the fewest candidates (where "
               "the frontier is made of specialists)" if n_ex > charts.MAX_HEATMAP_COLUMNS else "")
    st.caption(f"◆ (a black diamond in a cell) = holds the best score on that example (none where every candidate "
               f"ties). Showing {shown}, frontier members with the most examples first, then pinned candidates{columns}.")
    ev = st.plotly_chart(fig, key=keys.DASH_FRONTIER_CHART, width="stretch", on_select="rerun", selection_mode="points")
    pts = (ev.selection.points if ev else []) or []
    if pts and pts[0].get("customdata"):
        nav.go("candidate", run=run_id, candidate=pts[0]["customdata"])
    # degenerate members (docs/design.md §2) (e.g. "reject everything" regexes), one click from a veto
    steering.degenerate_members(run_id, data.degenerate_of(url, run), run["status"] not in ACTIVE)


@st.fragment(run_every=FRONTIER_S if run["status"] in ACTIVE else None)
def candidates_panel(run_id: str) -> None:
    """The candidate table in a fragment of its own: on a busy machine a slow chart above never
    keeps it from refreshing (a fragment still drawing when its next tick comes shows stale)."""
    run, cands, _ = data.live_snapshot(run_id)
    if run is not None:
        _candidate_table(run_id, cands)


live(run_id)
analyze_panel.show(run_id, run["status"])
candidates_panel(run_id)
frontier_panel(run_id)
st.subheader("Is the gain real?", help="The held-out gain of a candidate over the seed, with a paired bootstrap "
             "interval, the examples it wins and loses, and the validation–test gap (filled in when the run ends).")
gain_view.panel(run)

def objectives_view(run: dict) -> None:
    objectives = data.objective_means(url, run_id, data.version_token(run))
    names = [c for c in objectives.columns if c != "candidate_id"]
    if len(names) < 2:
        st.caption("The evaluator reports fewer than two sub-scores in side_info['scores'], so there is no 2-D view.")
        return
    cx, cy = st.columns(2)
    ox = cx.selectbox("x objective", names, index=0, key=keys.DASH_OBJ_X)
    oy = cy.selectbox("y objective", names, index=1, key=keys.DASH_OBJ_Y)
    _, view = data.frontier_snapshot(run_id)
    front = set(view.members) if view is not None else set()
    st.plotly_chart(charts.objectives_scatter(objectives, ox, oy, front), key="dash_objectives", width="stretch")


with st.expander("Two objectives (side_info['scores'])"):
    # on demand: averaging every sub-score of a big run is the heaviest read of the page
    if st.toggle("Show the 2-D Pareto view of two sub-scores", key=keys.DASH_OBJECTIVES_ON):
        objectives_view(run)

@st.fragment(run_every=FRONTIER_S if run["status"] in ACTIVE else None)
@shows_storage_errors
def pass_rates_panel(run_id: str, seed_id: str) -> None:
    """Live: the best changes the moment a validation pass ends, and its pass rates with it."""
    now = data.run_overview(url, run_id)
    if now is not None:
        prompt_view.show_pass_rates(now, seed_id)


if cfg.get("prompt_evaluator"):
    seeds = data.candidate_rows(url, run_id, data.version_token(run)).query("origin == 'seed'")["id"].tolist()
    if seeds:
        st.subheader("Assertions: pass rate of the best candidate vs the seed (validation)")
        pass_rates_panel(run_id, seeds[0])

st.subheader("Commands")
steering.command_log(run_id, run["status"])

st.subheader("Activity", help="Commands, comments and refused actions of everyone on this run, newest first.")
review.activity_feed(run_id)
admin.delete_box(run)
