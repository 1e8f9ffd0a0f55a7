"""The six phases of one step, each a short plain explanation beside that step's real data
(``ui.explain_model``), and the runtime-model side panel. Untrusted text (candidates, prompts,
answers, side information) is shown as text, never Markdown.
"""

from __future__ import annotations

import difflib

import pandas as pd
import streamlit as st

from ui import explain_model as em, nav
from ui.render import md, messages_text, show_side_info, show_text

PHASES = ("1 · Parents", "2 · Minibatch", "3 · Reflection", "4 · Proposals", "5 · Acceptance", "6 · Frontier update")


def _score(x) -> str:
    return "—" if x is None or pd.isna(x) else f"{x:.3g}"


def parents(detail: dict, before: dict) -> None:
    st.info("Refract keeps, for every validation example, the candidate(s) with the best score on it: the **Pareto "
            "frontier**. Any candidate that is best somewhere may become a parent, so a text that solves rare cases "
            "survives even when its average is lower. Each step picks its parents from that frontier.",
            icon=":material/school:")
    step, cands = detail["step"], detail["candidates"]
    rows = [{"parent": pid, "why chosen": step["parent_reasons"].get(pid, ""), "origin": cands[pid]["origin"],
             "validation mean": cands[pid]["val_mean"],
             "best on": sum(pid in h for h in before["holders"].values())}
            for pid in step["parent_ids"] if pid in cands]
    st.markdown(f"**This step chose {len(rows)} parent(s)**")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
        "best on": st.column_config.NumberColumn(help="validation examples where it holds the best score, ties included")})
    if not before["best"]:
        st.caption("No candidate was validated before this step: the frontier was empty.")
        return
    low = before["below_seed"]
    if low:
        st.caption("Not eligible as parents: validation mean below the seed's (a text that is right only where a "
                   "trivial answer is right, such as a pattern that matches nothing, otherwise holds the frontier "
                   "there and its variants crowd out real progress): "
                   + "; ".join(f"`{c}` {m:.3f} < {s:.3f}" for c, (m, s) in sorted(low.items())) + ". A pin overrides this.")
    chosen = set(step["parent_ids"])
    table = pd.DataFrame([{"example": k, "best score": before["best"][k],
                           "held by": ", ".join(before["holders"][k]) if before["best"][k] > 0
                           else "nobody solves it yet (every candidate ties at 0)",
                           "a parent holds it": before["best"][k] > 0 and bool(chosen & set(before["holders"][k]))}
                          for k in before["best"]])
    st.markdown(f"**The frontier when the step began** ({len(before['members'])} member(s), ties included; "
                "highlighted rows: a parent of this step holds the best score)")
    st.dataframe(table.style.apply(lambda r: ["background-color: #dbeafe" if r["a parent holds it"] else ""] * len(r), axis=1),
                 hide_index=True, width="stretch", height=min(36 * (len(table) + 1) + 2, 360), column_config={
                     "example": st.column_config.TextColumn(width="small"),
                     "best score": st.column_config.NumberColumn(format="%.3f", width="small"),
                     "held by": st.column_config.TextColumn(width="large"),
                     "a parent holds it": st.column_config.CheckboxColumn(width="small")})


def minibatch(detail: dict) -> None:
    st.info("Scoring every proposal on the whole training set would be expensive, so each parent is scored on a "
            "small **minibatch** of training examples. The evaluator returns a score and **side information** "
            "(what went wrong, and why) for each example: that is what the reflection will read. A minibatch the "
            "parent already gets entirely right cannot show that a child is better, so up to half of it is taken "
            "from examples the parent is known to fail, and one it aces is drawn again.",
            icon=":material/school:")
    for p in em.parent_minibatches(detail):
        st.markdown(f"**Parent `{p['id']}`** on {len(p['keys'])} example(s): " + ", ".join(md(k) for k in p["keys"]))
        if p["drawn"]:
            st.caption("How it was drawn: " + md(p["drawn"]))
        for r in p["rows"]:
            label = f"{md(r['example'])} · score {_score(r['score'])}" + (" · error" if r["error"] else "")
            with st.expander(label, expanded=bool(r["score"] is not None and r["score"] < 1)):
                if r["error"]:
                    show_text(r["error"])
                show_side_info(r["side_info"])


def reflection(detail: dict, kids: list[dict]) -> None:
    st.info("The **reflection LM** gets the parent's text and the side information of its minibatch, and answers "
            "with a new version in a fenced block. The K proposals of one parent share one prompt and differ by "
            "their sampling (each a little hotter); the built-in local model reads that prompt once, so each sample "
            "after the first costs only its answer. Refract extracts the text and runs the artifact kind's "
            "`validate()` on it before any metric call is spent; an unusable or invalid answer is retried once, "
            "told what was wrong (on the built-in local model a repeated answer is instead sampled again from the "
            "same prompt), then the proposal fails.", icon=":material/school:")
    written = [k for k in kids if k["lm_call"] is not None]
    if not written:
        st.caption("No reflection in this step (the budget ran out, or all proposals were merges).")
        return
    tabs = st.tabs([f"{k['id']} · {k['origin']}" for k in written])
    for tab, k in zip(tabs, written):
        with tab:
            call = k["lm_call"]
            st.caption(f"{call['purpose']} call · model `{call['model']}` · {call['seconds']:.1f} s · "
                       f"${call['cost_usd']:.5f}" + (" · cached" if call["cached"] else "")
                       + (f" · rewrote component `{k['component']}`" if k["component"] else ""))
            left, right = st.columns(2)
            with left:
                st.markdown("**The exact prompt** (the side information is under each example)")
                show_text(messages_text(call["messages"]), language="markdown", height=460)
            with right:
                st.markdown("**Its answer**")
                show_text(call["answer"] or "(empty answer)", height=240)
                st.markdown("**What became of it**")
                if k["status"] == "failed":
                    st.error(k["reason"])
                elif k["status"] == "rejected" and k["reason"]:
                    st.warning(f"parsed and valid, then tested on the minibatch: {k['reason']}")
                else:
                    st.success("parsed and valid: the new text was tested on the minibatch")


def proposals(kids: list[dict]) -> None:
    st.info("Each **proposal** is a child: the parent with one component rewritten. It is scored on the same "
            "minibatch as its parent, so the two totals compare like for like.", icon=":material/school:")
    # the scores and why first: the grid draws only the columns in view, and these are what a
    # reader of this step wants to see without scrolling
    rows = [{"child": k["id"], "status": k["status"], "parent minibatch": k["parent_minibatch_score"],
             "child minibatch": k["minibatch_score"], "why": k["reason"],
             "parent(s)": ", ".join(k["parent_ids"]), "origin": k["origin"]} for k in kids]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"why": st.column_config.TextColumn("why", width="large")})
    for k in kids:
        if not k["content"] or not k["parents"]:
            continue
        with st.expander(f"diff of {k['id']} against {k['parents'][0]['id']}"):
            old, new = k["parents"][0]["content"] or {}, k["content"]
            for name in sorted(set(old) | set(new)):
                if old.get(name, "") != new.get(name, ""):
                    show_text("\n".join(difflib.unified_diff(str(old.get(name, "")).splitlines(), str(new.get(name, "")).splitlines(),
                                                             f"{k['parents'][0]['id']}/{name}", f"{k['id']}/{name}", lineterm="")),
                              language="diff")


def acceptance(kids: list[dict], config: dict) -> None:
    s = config.get("search") or {}
    st.info(f"{em.improvement_sentence(s)}. Improving children then pay a full **validation pass**: with "
            f"accept = {s.get('accept', 'all')}" + (f" (top {s.get('top_k')})" if s.get("accept") == "top_k" else "")
            + ", " + {"all": "every improving child does",
                      "best": "only the best improvement does (and the runner-up too when the best scored no higher "
                              "than its parent on the validation set and a pass costs little beside a reflection)",
                      "top_k": "the k best improvements do"}.get(s.get("accept", "all"), "")
            + (". With merge_siblings, two or more improving children are first combined into one, which is "
               "validated instead." if s.get("merge_siblings") else "."), icon=":material/school:")
    rows = [{"child": k["id"], "origin": k["origin"], "improved on minibatch": k["improved"],
             "validated": k["validated"], "validation mean": k["val_mean"], "status": k["status"], "why": k["reason"]}
            for k in kids]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    merges = [k for k in kids if k["origin"] == "merge"]
    if merges:
        st.markdown("**Merge**: " + "; ".join(f"`{m['id']}` combines {', '.join(m['parent_ids'])} ({m['status']})"
                                             for m in merges))


def frontier_update(detail: dict, before: dict, after: dict) -> None:
    st.info("Validated children that hold the best score on at least one validation example **enter the frontier**; "
            "members beaten everywhere leave it. The step's cost is what it spent: metric calls (evaluator runs), "
            "seconds and dollars.", icon=":material/school:")
    step = detail["step"]
    joined = [c for c in after["members"] if c not in before["members"]]
    left = [c for c in before["members"] if c not in after["members"]]
    b0, b1 = before["best_mean"], after["best_mean"]
    m = st.columns(5)
    m[0].metric("Best validation mean", _score(b1[1] if b1 else None),
                None if not (b0 and b1) or abs(b1[1] - b0[1]) < 1e-12 else f"{b1[1] - b0[1]:+.3g}")
    m[1].metric("Frontier size", len(after["members"]), len(after["members"]) - len(before["members"]) or None)
    m[2].metric("Metric calls", step["metric_calls"])
    m[3].metric("Seconds", f"{step['seconds']:.1f}")
    m[4].metric("Cost", f"${step['cost_usd']:.4f}")
    st.markdown("**Entered the frontier:** " + (", ".join(f"`{c}`" for c in joined) or "none") +
                "  \n**Left the frontier:** " + (", ".join(f"`{c}`" for c in left) or "none") +
                (f"  \n**Best candidate:** `{b1[0]}`" if b1 else ""))
    for h in em.humans(detail):
        st.caption(f"A person's edit applied at the start of this step: {h['id']} ({h['status']})")


def _seconds(x: float) -> str:
    """Four digits at most: the side column is narrow at 1440 px ("34.06 s" showed as "34.0…",
    "0.083 s" as "0.08…" and "118 ms" as "118 …"; "0.15 s" fits)."""
    return f"{x:.2f} s" if round(x, 2) < 10 else f"{x:.0f} s"


def runtime_panel(detail: dict, config: dict) -> None:
    st.markdown("#### Runtime model")
    check = em.runtime_check(detail, config)
    if check is None:
        st.caption("This step recorded no LM or evaluation timings, so there is nothing to model.")
        return
    lat, shape = check["latencies"], check["shape"]
    st.caption(f"P = {shape.parents} parents × K = {shape.per_parent} proposals on W = {lat.workers} workers; "
               f"measured in this step: LM {lat.lm:.2f} s a call, evaluator {lat.eval:.3f} s a metric call, "
               f"{lat.accept:.0%} of proposals improved; minibatch {lat.minibatch}, validation set {lat.n_val}.")
    c1, c2 = st.columns(2)
    c1.metric("Predicted", _seconds(check["predicted"]))
    c2.metric("Measured", _seconds(check["measured"]))
    st.markdown(f"**{check['bound']}**: of the predicted time, {check['lm_seconds']:.2f} s wait for the LM "
                f"and {check['eval_seconds']:.2f} s for metric calls on the workers.")
    st.caption(em.reflections_note(config) + " The measured time also holds database writes and prompt building, "
               "which the model leaves out.")
    nav.link("playground", "Play with the runtime model", icon=":material/tune:")
