"""Candidate page: its state and steering (pin, veto, edit, inject, feedback — live), for a prompt
run its answers against its parent's, its text, diff against its parent(s), per-example scores and
side information, the reflection that wrote it, its cost, ancestors and children, and its comment
thread (live).

Everything that came from a candidate, a dataset or an LM is shown as text (``st.code`` /
``st.json`` / ``st.dataframe``), never as HTML or Markdown.
"""

from __future__ import annotations

import difflib

import pandas as pd
import streamlit as st

from ui import (analysis, blame_view, branching, candidate_answers, candidate_steering as steer, charts, data, keys, nav,
                review)
from ui.lineage import merge_path_text
from ui.render import code_span, md, messages_text, show_side_info, show_text

url = data.db_url()
run_id, run = nav.linked_run(url, "Candidate", "Open a candidate from a run's dashboard or lineage; its link "
                             "carries `?run=…&candidate=…`.")
cand_id = nav.query_candidate()
token = data.version_token(run)
cands = data.candidate_rows(url, run_id, token)
if cands.empty:
    st.info("This run has no candidates yet.")
    st.stop()

ids = list(cands.sort_values(["step", "created_at"])["id"])
if cand_id not in ids:
    if cand_id:
        st.warning(f"Run {md(run_id)} has no candidate {md(cand_id)} (a mistyped or stale link?). Showing the "
                   "run's best candidate instead; pick another one below.")
    cand_id = run.get("best_candidate_id") if run.get("best_candidate_id") in ids else ids[0]
    st.query_params[keys.QP_CANDIDATE] = cand_id  # the URL names what is shown: a colleague opening it sees this one
row_of = cands.set_index("id")
n_val = data.validation_size(url, run_id)
# over the columns, not a lookup per cell: four .at per candidate took 0.4 s at 10,000 of them
label = {c: f"{c} · step {s} · {st_}" + ("" if m != m else f" · {m:.3f}" + ("" if n >= n_val else f" on {n} of {n_val}"))
         for c, s, st_, m, n in zip(cands["id"].tolist(), cands["step"].tolist(), cands["status"].tolist(),
                                    cands["val_mean"].tolist(), cands["val_count"].tolist())}
st.title(f"Candidate {cand_id}")
picked = st.selectbox("Open another candidate of this run", ids, index=ids.index(cand_id), format_func=label.get, key=keys.CAND_SELECT)
if picked != cand_id:
    nav.go("candidate", run=run_id, candidate=picked)

detail = data.candidate_detail(url, cand_id, token)
if detail is None:
    st.error("This candidate disappeared from the database.")
    st.stop()
c = detail["candidate"]
front = data.frontier_of(url, run)

# ------------------------------------------------------------------ header: live state, pin, veto
steer.live_state(run, cand_id)
call = detail["lm_call"]
eval_cost = sum(e["cost_usd"] or 0.0 for e in detail["evaluations"])
lm_cost = (call or {}).get("cost_usd") or 0.0
m = st.columns(4)
n_mb = len(c["minibatch_keys"] or [])
mb = None if c["minibatch_score"] is None or not n_mb else c["minibatch_score"] / n_mb
parent_mb = None if c["parent_minibatch_score"] is None or not n_mb else c["parent_minibatch_score"] / n_mb
partly = c["val_mean"] is not None and c["val_count"] < n_val  # a pass cut short: this mean is no rank
m[0].metric(f"Validation score · {c['val_count']} of {n_val} only" if partly else f"Validation score · mean of {c['val_count']}",
            "—" if c["val_mean"] is None else f"{c['val_mean']:.3f}",
            help=f"mean over {c['val_count']} validation example(s)" + (f"; cut short: {c['val_cut_short']}" if c["val_cut_short"] else "")
            + ("; partly validated: a mean over part of the validation set, which ranks nothing (the run's best is "
               "the best fully validated candidate)" if partly else ""))
m[1].metric(f"Minibatch score · mean of {n_mb}" if n_mb else "Minibatch score", "—" if mb is None else f"{mb:.3f}",
            None if mb is None or parent_mb is None else f"{mb - parent_mb:+.3f} vs parent",
            help=f"mean over {n_mb} minibatch example(s), the scale of the validation score" if n_mb else
            "not evaluated on a minibatch (a seed, a human candidate or an injected one)")
m[2].metric("Step", c["step"])
m[3].metric("Cost", f"${lm_cost + eval_cost:.5f}",
            f"{(call or {}).get('tokens_in', 0):,} in · {(call or {}).get('tokens_out', 0):,} out tokens",
            delta_color="off", delta_arrow="off", help=f"reflection LM ${lm_cost:.5f} + evaluations ${eval_cost:.5f}")
st.caption(f"run {md(run['name'])} (`{run_id}`) · created {c['created_at']:%Y-%m-%d %H:%M:%S} UTC"
           + (f" · rewrote component {code_span(c['component'])}" if c["component"] else "")
           + (f" · {merge_path_text(c['merge_path'])}" if merge_path_text(c.get("merge_path")) else "")
           + (f" · by {md(c['author'])}" if c["author"] else "")
           + (f" · {md(c['reason'])}" if c["reason"] else ""))
nl = st.columns(4)
with nl[0]:
    nav.link("dashboard", "Run dashboard", run=run_id, icon=":material/monitoring:")
with nl[1]:
    nav.link("lineage", "Show in lineage", run=run_id, candidate=cand_id, icon=":material/account_tree:")
with nl[2]:  # for a prompt run: this candidate's outputs beside its parent's, example by example
    nav.link("compare", "Compare with its parent", run=run_id, candidate=cand_id, icon=":material/compare:")
with nl[3]:
    branching.branch_button(run_id, [cand_id] if c["content"] else [], "candidate")
branching.candidate_note(run, cand_id)
review.approve_box(run, cand_id, bool(c["content"]))
steer.edit_panel(run, c)
steer.inject_panel(run, list(c["content"] or {}))
with st.expander("Feedback for the reflection LM", icon=":material/forum:"):
    steer.feedback_box(run, cand_id)
if (run.get("config") or {}).get("prompt_evaluator"):
    candidate_answers.render(data.get_db(), run_id, cand_id, [p["id"] for p in detail["parents"]],
                             bool(data.example_keys(url, run_id, "val")))

tabs = st.tabs(["Text", "Diff vs parent", "Scores", "Side information", "Reflection", "Family", "Comments", "Who wrote each line"])

# ------------------------------------------------------------------ text
with tabs[0]:
    content = c["content"] or {}
    for name, text in content.items():
        st.markdown(f"**{md(name)}** · {len(text):,} characters")
        show_text(text)

# ------------------------------------------------------------------ diff
with tabs[1]:
    if not detail["parents"]:
        st.caption("A seed has no parent.")
    for parent in detail["parents"]:
        st.markdown(f"against parent `{parent['id']}`")
        nav.link("candidate", f"open {parent['id']}", run=run_id, candidate=parent["id"])
        for name in sorted(set(parent["content"]) | set(c["content"])):
            old, new = parent["content"].get(name, ""), c["content"].get(name, "")
            if old == new:
                st.caption(f"{md(name)}: unchanged")
                continue
            diff = "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{parent['id']}/{name}",
                                                  f"{cand_id}/{name}", lineterm=""))
            st.code(diff, language="diff", wrap_lines=True)

# ------------------------------------------------------------------ scores
evals = pd.DataFrame(detail["evaluations"])
with tabs[2]:
    if evals.empty:
        st.caption("Not evaluated yet.")
    else:
        val = evals[evals["split"] == ("val" if (evals["split"] == "val").any() else "train")]  # no valset: train
        if not val.empty:
            st.plotly_chart(charts.per_example_bar(val, front.best.reindex(val["example"])), key="cand_scores",
                            width="stretch")
        table = evals.assign(
            frontier_best=evals["example"].map(front.best),
            holds_best=[bool(s >= front.best.get(e, float("inf")) - 1e-9) for e, s in zip(evals["example"], evals["score"])],
            error=evals["error"].fillna(""),
        )[["example", "split", "score", "frontier_best", "holds_best", "error", "seconds", "cost_usd", "cached"]]
        st.dataframe(table, hide_index=True, width="stretch")
        if c["minibatch_keys"]:
            st.caption("minibatch: " + ", ".join(md(k) for k in c["minibatch_keys"])
                       + (f" — drawn: {md(c['minibatch_reason'])}" if c.get("minibatch_reason") else ""))

# ------------------------------------------------------------------ side information
with tabs[3]:
    if evals.empty:
        st.caption("No evaluations yet.")
    else:
        choice = st.radio("Show", ["all", "failed or below 1", "errors only"], horizontal=True, key=keys.CAND_EXAMPLE_FILTER)
        shown = detail["evaluations"]
        if choice == "failed or below 1":
            shown = [e for e in shown if e["error"] or (e["score"] or 0) < 1]
        elif choice == "errors only":
            shown = [e for e in shown if e["error"]]
        st.caption(f"{len(shown)} evaluation(s)")
        for e in shown[:200]:
            with st.expander(f"{md(e['example'])} · {e['split']} · score {e['score']:.3f}" + (" · error" if e["error"] else "")):
                if e["payload"] is not None:
                    st.caption("example")
                    show_text(e["payload"])
                if e["error"]:
                    st.caption("error")
                    show_text(e["error"])
                show_side_info(e["side_info"])
        if len(shown) > 200:
            st.caption(f"… and {len(shown) - 200} more; filter to narrow down.")

# ------------------------------------------------------------------ reflection
with tabs[4]:
    if call is None:
        st.caption("No LM call wrote this candidate (a seed given by the user, or a human edit).")
    else:
        st.caption(f"{call['purpose']} call · model {code_span(call['model'])} · {call['seconds']:.1f} s · "
                   f"${call['cost_usd']:.5f}" + (" · cached" if call["cached"] else ""))
        if call.get("error"):
            st.error("The LM call failed or its answer could not be used:")
            show_text(call["error"])
        if detail["earlier_answers"]:
            st.info(f"The reflection LM was asked {len(detail['earlier_answers']) + 1} times for this proposal: its "
                    "first answer could not be used (unchanged, a repeat, no fenced block or invalid), so it was asked "
                    "once more. The retry is told what was wrong (after an unchanged answer in prose: add sentences that "
                    "state the rules the failing examples break), except on the built-in local model, whose repeated "
                    "answer is sampled again from the same prompt with another seed (shown its own answer, it gave it "
                    "again).", icon=":material/replay:")
            with st.expander("The earlier answer"):
                show_text(detail["earlier_answers"][-1] or "(empty answer)", height=240)
        st.markdown("**Prompt**")
        show_text(messages_text(call["messages"]), height=420)
        st.markdown("**Raw answer**")
        show_text(call["answer"] or "(empty answer)", height=320)

# ------------------------------------------------------------------ family
with tabs[5]:
    anc = analysis.ancestors(cands, cand_id)
    kids = cands[cands["parent_ids"].map(lambda p: cand_id in (p or []))]
    a, b = st.columns(2)
    with a:
        st.markdown(f"**Ancestors** ({len(anc)})")
        for pid in anc[:50]:
            r = row_of.loc[pid]
            score = "" if pd.isna(r["val_mean"]) else f" · {r['val_mean']:.3f}"
            nav.link("candidate", f"{pid} · step {r['step']} · {r['origin']}{score}", run=run_id, candidate=pid)
    with b:
        st.markdown(f"**Children** ({len(kids)})")
        for k in kids.sort_values("step").itertuples():
            score = "" if pd.isna(k.val_mean) else f" · {k.val_mean:.3f}"
            nav.link("candidate", f"{k.id} · {k.status}{score}", run=run_id, candidate=k.id)

# ------------------------------------------------------------------ comments
with tabs[6]:
    steer.comment_thread(run, cand_id)
    steer.comment_box(run_id, cand_id)

# ------------------------------------------------------------------ provenance of every line
with tabs[7]:
    blame_view.render(url, run_id, cand_id, token)
