"""The candidate page's section for a prompt run: what changed in the task LM's answers against
the parent, example by example (changed ones first, highlighted), and the pass rate of each
assertion for both. Built from the compare view's query and tables (``storage.compare_queries``,
``ui.compare``) and the dashboard's pass rates (``ui.prompt_view``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from storage.compare_queries import pair_evaluations
from ui import compare, keys as K
from ui.prompt_view import pass_rates, show_pass_rate_table

NAMES = ("parent", "this")
# the answers side by side before the numbers (the table is wider than the page: what matters first)
ORDER = ("example", "changed", "input", "output parent", "output this", "this − parent", "failed parent", "failed this",
         "score parent", "score this")
WIDTHS = {"example": "small", "changed": "small", "input": "medium", "output parent": "medium", "output this": "medium",
          "this − parent": "small", "failed parent": "small", "failed this": "small"}
# a pale background per kind of change, so that the changed rows stand out in the table
SHADES = {"score up": "#dcfce7", "score down": "#fee2e2", "answer only": "#fef9c3"}


def splits(has_val: bool) -> list[tuple[str, str]]:
    """The splits shown, in order, with their headings: the validation set, then the minibatch
    (training examples) when the run has a separate validation set, then the held-out test set."""
    if has_val:
        return [("val", "Validation"), ("train", "Minibatch (training examples)"), ("test", "Held-out test")]
    return [("train", "Validation (the dataset)"), ("test", "Held-out test")]


def own_rows(rows: list[dict]) -> list[dict]:
    """The rows of the examples this candidate (b) was evaluated on: a parent is evaluated on many
    more (its own validation pass, its other children's minibatches)."""
    return [r for r in rows if r["score_b"] is not None or r["error_b"] is not None]


def summary(table: pd.DataFrame) -> str:
    """One line: how many examples changed, and both means where both were evaluated."""
    counts = table["changed"].value_counts()
    parts = [f"{len(table)} example(s)", f"score up on {counts.get('score up', 0)}",
             f"down on {counts.get('score down', 0)}", f"answer changed, same score on {counts.get('answer only', 0)}"]
    mean_a, mean_b, n = compare.means(table, NAMES)
    if n:
        parts.append(f"mean {mean_a:.3f} → {mean_b:.3f} over the {n} both answered")
    return " · ".join(parts)


def _shade(row: pd.Series) -> list[str]:
    colour = SHADES.get(row["changed"])
    return [f"background-color: {colour}" if colour else ""] * len(row)


def _show_split(rows: list[dict], split: str, heading: str) -> None:
    table = compare.changed_first(compare.pair_table(rows, split, NAMES), NAMES)
    if table.empty:
        return
    st.markdown(f"**{heading}** · {summary(table)}")
    show_pass_rate_table(pass_rates(rows, split, NAMES))
    table = table[[c for c in ORDER if c in table]]
    scores = [c for c in ("score parent", "score this") if c in table]
    styled = table.style.apply(_shade, axis=1).format({**{c: "{:.3f}" for c in scores}, "this − parent": "{:+.3f}"},
                                                      na_rep="—")
    st.dataframe(styled, hide_index=True, width="stretch",
                 column_config={c: st.column_config.Column(width=w) for c, w in WIDTHS.items() if c in table})


def render(db, run_id: str, cand_id: str, parent_ids: list[str], has_val: bool) -> None:
    """The section: against the parent picked (the first one by default; a merge has two)."""
    st.subheader("Answers against the parent")
    if not parent_ids:
        st.caption("A seed has no parent: its answers and assertion results are under Side information below.")
        return
    parent = parent_ids[0]
    if len(parent_ids) > 1:
        parent = st.radio("Against parent", parent_ids, horizontal=True, key=K.CAND_ANSWERS_PARENT)
    rows = own_rows(pair_evaluations(db, run_id, parent, cand_id))
    if not rows:
        st.caption("This candidate has no evaluation yet.")
        return
    st.caption(f"parent `{parent}` against this candidate `{cand_id}`, per example the task LM's answer and the "
               "assertions it failed. Changed examples first: green = the score rose, red = it fell, yellow = "
               "another answer with the same score.")
    for split, heading in splits(has_val):
        _show_split(rows, split, heading)
