"""Compare: two candidates of a run (the seed against the best by default), their text diff, and
per example both scores and outputs on the validation and the held-out test set."""

from __future__ import annotations

import streamlit as st

from storage.compare_queries import pair_evaluations
from ui import compare, data, keys, nav
from ui.render import md

url = data.db_url()
run_id, run = nav.linked_run(url, "Compare candidates",
                             "Open a run first (Runs page); its compare link carries `?run=…`.")
cands = data.candidate_rows(url, run_id, data.version_token(run))
st.title(f"Compare candidates · {md(run['name'])}")
nav.link("dashboard", "Run dashboard", run=run_id, icon=":material/monitoring:")
if cands.empty:
    st.info("No candidates yet.")
    st.stop()
ids = cands["id"].tolist()
token = data.version_token(run)
a0, b0 = compare.default_pair(cands, run.get("best_candidate_id"))
opened = nav.query_candidate()  # from a candidate page: that candidate against its (first) parent
if opened in ids:
    parents = (data.candidate_detail(url, opened, token) or {}).get("parents") or []
    a0, b0 = (parents[0]["id"] if parents and parents[0]["id"] in ids else a0), opened
label = {r["id"]: f"{r['id']} · {r['origin']} · step {r['step']} · val {r['val_mean']:.3f}" if r["val_mean"] == r["val_mean"]
         and r["val_mean"] is not None else f"{r['id']} · {r['origin']} · step {r['step']}" for _, r in cands.iterrows()}
c1, c2 = st.columns(2)
a = c1.selectbox("A", ids, index=ids.index(a0), format_func=label.get, key=keys.CMP_A)
b = c2.selectbox("B", ids, index=ids.index(b0), format_func=label.get, key=keys.CMP_B)
text_a, text_b = (compare.text_of(data.candidate_detail(url, c, token)["candidate"]["content"]) for c in (a, b))
st.subheader("What changed in the text")
st.code(compare.unified_diff(text_a, text_b, f"A {a}", f"B {b}"), language="diff")
rows = pair_evaluations(data.get_db(), run_id, a, b)
st.subheader("Per example")
for split in (compare.validation_split(rows), "test"):
    compare.show_split(rows, split, split != "test" or bool(data.example_keys(url, run_id, "test")))
