"""Two candidates of a run side by side: the text diff, and per example both scores and (for a
prompt evaluator) both outputs, on the validation and the test set. The data functions are plain;
``show_*`` draw them."""

from __future__ import annotations

import difflib
from typing import Optional

import pandas as pd
import streamlit as st

from ui.prompt_view import is_prompt_side_info

SPLITS = {"val": "validation", "test": "held-out test", "train": "training"}


def default_pair(cands: pd.DataFrame, best_id: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(a, b) shown first: the seed against the best (b = a when the seed is the best)."""
    seeds = cands.loc[cands["origin"] == "seed", "id"].tolist()
    a = seeds[0] if seeds else (cands["id"].iloc[0] if len(cands) else None)
    return a, best_id or a


def text_of(content: dict) -> str:
    """A candidate's text as one string (components under their names)."""
    if list(content) == ["text"]:
        return content["text"]
    return "\n\n".join(f"## {k}\n{v}" for k, v in content.items())


def unified_diff(a: str, b: str, name_a: str, name_b: str) -> str:
    lines = difflib.unified_diff(a.splitlines(), b.splitlines(), name_a, name_b, lineterm="", n=3)
    return "\n".join(lines) or "(the same text)"


def pair_table(rows: list[dict], split: str, names: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """One split of ``storage.compare_queries.pair_evaluations`` as a table, its columns named
    after ``names`` (the a and b candidates): the example's fields, both scores and their
    difference, and the outputs of a prompt evaluator with the assertions each failed, when there
    are any."""
    na, nb = names
    out = []
    for r in rows:
        if r["split"] != split:
            continue
        item = {"example": r["example"], "input": input_text(r.get("payload")),
                f"score {na}": r["score_a"], f"score {nb}": r["score_b"],
                f"{nb} − {na}": None if r["score_a"] is None or r["score_b"] is None else r["score_b"] - r["score_a"]}
        for which, name in (("a", na), ("b", nb)):
            side = r[f"side_{which}"]
            if is_prompt_side_info(side or {}):
                item[f"output {name}"] = side["output"]
                item[f"failed {name}"] = ", ".join(x["assertion"] for x in side["assertions"] if not x["passed"])
            elif r[f"error_{which}"]:
                item[f"output {name}"] = "error: " + r[f"error_{which}"].strip().splitlines()[-1]
        out.append(item)
    return pd.DataFrame(out)


def input_text(payload, limit: int = 160) -> str:
    """An example's fields on one line (``text: The app crashes · label: bug``), cut at ``limit``."""
    if payload is None:
        return ""
    text = " · ".join(f"{k}: {v}" for k, v in payload.items()) if isinstance(payload, dict) else str(payload)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


RANK = {"score up": 0, "score down": 0, "answer only": 1, "": 2, "not comparable": 3}  # how changed_first sorts


def changed_first(table: pd.DataFrame, names: tuple[str, str]) -> pd.DataFrame:
    """``pair_table(…, names)`` with a ``changed`` column (a key of ``RANK``: whether b's score
    rose or fell against a's, or only its answer differs): the examples whose score changed first,
    the biggest change first, then those whose answer alone changed, then the unchanged ones;
    otherwise in the run's order."""
    if table.empty:
        return table
    na, nb = names
    delta = table[f"{nb} − {na}"]
    same_answer = (table[f"output {na}"].fillna("") == table[f"output {nb}"].fillna("")) \
        if f"output {na}" in table and f"output {nb}" in table else pd.Series(True, index=table.index)
    change = ["not comparable" if pd.isna(d) else "score up" if d > 1e-9 else "score down" if d < -1e-9
              else "" if same else "answer only" for d, same in zip(delta, same_answer)]
    out = table.assign(changed=change)
    order = out.assign(_rank=[RANK[c] for c in change], _size=-delta.abs().fillna(0))
    out = out.loc[order.sort_values(["_rank", "_size"], kind="stable").index]
    return out[["example", "changed"] + [c for c in table.columns if c not in ("example", "changed")]]


def means(table: pd.DataFrame, names: tuple[str, str] = ("A", "B")) -> tuple[Optional[float], Optional[float], int]:
    """Mean score of a and of b (``pair_table``'s columns for ``names``) over the examples both
    have, and how many those are."""
    cols = [f"score {n}" for n in names]
    both = table.dropna(subset=cols) if len(table) else table
    if both.empty:
        return None, None, 0
    return float(both[cols[0]].mean()), float(both[cols[1]].mean()), len(both)


def validation_split(rows: list[dict]) -> str:
    """The split that holds the validation examples: "val", or "train" in a multi-task run (no
    valset: the dataset is also the validation set)."""
    return "val" if any(r["split"] == "val" for r in rows) else "train"


def show_split(rows: list[dict], split: str, has_examples: bool = True) -> None:
    """One split's table; ``has_examples``: the run has examples in that split at all."""
    table = pair_table(rows, split)
    if split == "train":
        split = "val"  # a multi-task run validates on its dataset
    if not has_examples:
        st.caption(f"This run has no {SPLITS[split]} set.")
        return
    if table.empty:
        st.caption(f"Neither candidate was evaluated on the {SPLITS[split]} set"
                   + (" (the test pass runs on the seed and the final best, when the run ends)." if split == "test" else "."))
        return
    mean_a, mean_b, n = means(table)
    if n:
        st.markdown(f"**{SPLITS[split].capitalize()}**: A {mean_a:.3f} · B {mean_b:.3f} · B − A {mean_b - mean_a:+.3f} "
                    f"over the {n} example(s) both were evaluated on")
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"B − A": st.column_config.NumberColumn(format="%+.3f")})
