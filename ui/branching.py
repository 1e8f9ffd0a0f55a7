"""Branches in the studio: *Branch from here* (the candidate page, the lineage, the dashboard),
which opens the New run form filled with the branch (``engine.branch.branch_config``), the form's
note that it is one, and the links between a branch and its base run.

Nothing here stores a run: the form's *Start run* does, through ``engine.runs.submit_run``.
"""

from __future__ import annotations

import html
from typing import Sequence

import pandas as pd
import streamlit as st

from engine.branch import BranchError, branch_config
from engine.config import ConfigError
from storage import branches
from ui import data, identity, keys, nav
from ui.errors import shows_storage_errors
from ui.render import md


def branch_button(run_id: str, candidate_ids: Sequence[str], where: str, label: str = "Branch from here") -> None:
    """A button that opens the New run form with a branch of ``run_id`` from ``candidate_ids``
    (the first the seed, the others a seed population). Editors only, as creating a run is."""
    note = identity.refusal_note("create_run")
    if st.button(label, key=keys.BRANCH_SEND.format(where=where), icon=":material/call_split:",
                 disabled=bool(note) or not candidate_ids,
                 help=note or "a new run from here with this run's settings, any of which you can change in the form; "
                              "evaluations of the same text and example are reused, not paid again"):
        try:
            cfg = branch_config(data.get_db(), run_id, list(candidate_ids))
        except (BranchError, ConfigError) as exc:
            st.session_state[keys.BRANCH_ERROR.format(where=where)] = str(exc)
        else:
            st.session_state[keys.NEW_PREFILL] = cfg.stored()
            nav.go("new")
    error = st.session_state.pop(keys.BRANCH_ERROR.format(where=where), None)
    if error:
        st.error(error, icon=":material/error:")


def form_note(draft_key: str) -> None:
    """In the New run form (its draft under ``draft_key``): this draft is a branch, of which run
    and from which candidates, and a way to make it an ordinary run instead."""
    branch = st.session_state[draft_key].get(keys.NEW_BRANCH)
    if not branch:
        return
    more = len(branch.get("candidates") or []) - 1
    with st.container(border=True):
        st.info(f"**A branch of run `{branch['run']}`** from candidate `{branch['candidates'][0]}`"
                + (f" and {more} more as a seed population (validated at the start, all on the frontier)" if more else "")
                + ". Every setting below is the base run's; change any. Evaluations of the same text and example "
                "that the base run recorded are reused, not paid again (with an unchanged evaluator). The seed below "
                "is the candidate's text: edit it and the branch starts from your text.", icon=":material/call_split:")
        st.button("Start an ordinary run instead (no branch)", key=keys.NEW_UNBRANCH, on_click=_unbranch,
                  args=(draft_key,), help="the same settings and seed, but no link to the base run and nothing reused")


def _unbranch(draft_key: str) -> None:
    st.session_state[draft_key][keys.NEW_BRANCH] = None
    st.session_state[keys.NEW_BRANCH] = None


@shows_storage_errors
def lineage_note(run: dict) -> None:
    """Where this run came from and which runs came from it, with links (dashboard, lineage)."""
    url = data.db_url()
    base = run.get("branch_of")
    if base:
        seeds = ((run.get("config") or {}).get("branch") or {}).get("candidates") or []
        reused = branches.reused_counts(data.get_db(), run["id"])
        alive = data.run_overview(url, base) is not None
        c1, c2, c3 = st.columns([4, 2, 2], vertical_alignment="center")
        c1.caption(f":material/call_split: A branch of run `{base}` from {', '.join(f'`{c}`' for c in seeds)}"
                   + ("" if alive else " (that run is not in this database: deleted since, or this run was imported)")
                   + f" · {sum(reused.values()):,} evaluation(s) reused from it, not charged")
        if alive:
            with c2:
                nav.link("candidate", f"Branch point {seeds[0]}", run=base, candidate=seeds[0],
                         icon=":material/call_split:")
            with c3:
                nav.link("compare_runs", "Compare with the base run", runs=[base, run["id"]],
                         icon=":material/stacked_line_chart:")
    kids = branches.branches_of(data.get_db(), run["id"])
    if kids:
        c1, c2 = st.columns([6, 2], vertical_alignment="center")
        c1.caption(f":material/account_tree: {len(kids)} branch(es) of this run: "
                   + " · ".join(f"[{md(k['name'])}]({nav.url('dashboard', k['id'])}) (`{k['id']}`, {k['status']}, from "
                                f"`{k['candidates'][0] if k['candidates'] else '?'}`)" for k in kids))
        with c2:
            nav.link("compare_runs", "Compare with its branches", runs=[run["id"], *(k["id"] for k in kids)],
                     icon=":material/stacked_line_chart:")


def seed_sources(run: dict) -> dict[str, str]:
    """A branch's seed candidates -> the base run's candidate each was copied from."""
    from engine.state import deterministic_id

    seeds = ((run.get("config") or {}).get("branch") or {}).get("candidates") or []
    return {deterministic_id(run["id"], "seed", *([i] if i else [])): cid for i, cid in enumerate(seeds)}


@shows_storage_errors
def candidate_note(run: dict, cand_id: str) -> None:
    """On a candidate's page: the base run's candidate it was copied from (a branch's seed), and
    the branches that started from it."""
    source = seed_sources(run).get(cand_id)
    if source and run.get("branch_of"):
        nav.link("candidate", f"Copied from {source} of run {run['branch_of']} (the branch point)",
                 run=run["branch_of"], candidate=source, icon=":material/call_split:")
    kids = [k for k in branches.branches_of(data.get_db(), run["id"]) if cand_id in k["candidates"]]
    for k in kids:
        nav.link("dashboard", f"Branch {k['name']} ({k['id']}, {k['status']}) started from here", run=k["id"],
                 icon=":material/call_split:")


BRANCH_OPTIONS = 200


@shows_storage_errors
def branch_popover(run: dict) -> None:
    """The dashboard's *Branch from here*: the candidates to start from (the best by default,
    the frontier's members first; several make a seed population), then the New run form."""
    url, run_id = data.db_url(), run["id"]
    token = data.version_token(run)
    cands = data.candidate_rows(url, run_id, token)
    scored = cands[cands["val_mean"].notna()].sort_values("val_mean", ascending=False) if not cands.empty else cands
    members = set(data.frontier_of(url, run).members) if not scored.empty else set()
    on_front = scored["id"].isin(members).to_numpy()
    best = run.get("best_candidate_id")
    # the first BRANCH_OPTIONS (and the best): 5,000 options took a tenth of a second to send on
    # every refresh of the dashboard, and a longer list is no choice
    scored = pd.concat([scored[on_front], scored[~on_front]]).head(BRANCH_OPTIONS)
    options = list(scored["id"]) + ([best] if best and best not in set(scored["id"]) and best in set(cands["id"]) else [])
    label = {c: f"{c} · val {m:.3f}" + (" · frontier" if c in members else "") + (" · best" if c == best else "")
             for c, m in zip(scored["id"].tolist(), scored["val_mean"].tolist())}
    with st.popover("Branch from here", icon=":material/call_split:", width="stretch"):
        if len(options) >= BRANCH_OPTIONS:
            st.caption(f"The first {BRANCH_OPTIONS} of {int(cands['val_mean'].notna().sum()):,} validated candidates "
                       "(frontier members first, best score first); any other from its own page's *Branch from here*.")
        picked = st.multiselect("Start from", options, default=[best] if best in options else options[:1],
                                format_func=lambda c: label.get(c, c), key=keys.BRANCH_PICK,
                                help="the first is the seed; the others join it as a seed population, each validated "
                                     "at the start and on the frontier")
        branch_button(run_id, picked, "dashboard", label="Open the branch in the New run form")


def related_runs(run: dict) -> dict[str, str]:
    """The runs whose tree the lineage can show beside this one: its base run (if it still
    exists), then its branches; run id -> label."""
    out = {}
    base = run.get("branch_of")
    if base and data.run_overview(data.db_url(), base) is not None:
        out[base] = f"its base run {base}"
    for k in branches.branches_of(data.get_db(), run["id"]):
        out[k["id"]] = f"its branch {k['name']} ({k['id']})"
    return out


def joined_lineage(run: dict, fig, other_id: str, show_rejected: bool):
    """This run's lineage figure ``fig`` joined with ``other_id``'s (its base run above it, or a
    branch below it), the branch point marked (``ui.lineage_runs``)."""
    from ui.lineage import lineage_figure
    from ui.lineage_runs import joined_figure

    url = data.db_url()
    other = data.run_overview(url, other_id)
    token = data.version_token(other)
    other_fig = lineage_figure(data.candidate_rows(url, other_id, token), other.get("best_candidate_id"),
                               data.frontier_of(url, other).members, show_rejected=show_rejected)
    if run.get("branch_of") == other_id:  # the other is the base run: above
        return joined_figure(other_fig, other_id, fig, run["id"], seed_sources(run),
                             (f"base run {other_id}: {html.escape(other['name'][:60])}", f"this run {run['id']} (a branch)"))
    return joined_figure(fig, run["id"], other_fig, other_id, seed_sources(other),
                         (f"this run {run['id']}", f"branch {other_id}: {html.escape(other['name'][:60])}"))
