"""How the studio shows a prompt evaluator's evaluations: the task LM's output and, per
assertion, whether it passed and why (``side_info`` as ``refract_prompt`` writes it)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.render import show_side_info, show_text


def is_prompt_side_info(info: dict) -> bool:
    return isinstance(info, dict) and isinstance(info.get("assertions"), list) and "output" in info


def assertion_table(info: dict) -> pd.DataFrame:
    return pd.DataFrame([{"assertion": a.get("assertion"), "passed": "✓" if a.get("passed") else "✗",
                          "score": a.get("score"), "why": a.get("reason", "")} for a in info.get("assertions") or []])


def show_evaluation(info: dict) -> None:
    """One evaluation: a prompt evaluator's output and assertion results, else its side information."""
    if not is_prompt_side_info(info):
        show_side_info(info)
        return
    st.caption("Task LM output")
    show_text(info["output"] or "(empty)")
    st.dataframe(assertion_table(info), hide_index=True, width="stretch")


def pass_rates(rows: list[dict], split: str, names: tuple[str, str] = ("seed", "best")) -> pd.DataFrame:
    """Per assertion, the share of ``split``'s examples on which candidate a and candidate b
    passed it (rows of ``storage.compare_queries.pair_evaluations``), in columns named ``names``."""
    counts: dict[str, list[int]] = {}
    for r in rows:
        if r["split"] != split:
            continue
        for i, which in enumerate(("a", "b")):
            side = r[f"side_{which}"] or {}
            for x in side.get("assertions") or [] if is_prompt_side_info(side) else []:
                c = counts.setdefault(x["assertion"], [0, 0, 0, 0])  # passed a, seen a, passed b, seen b
                c[2 * i] += bool(x["passed"])
                c[2 * i + 1] += 1
    return pd.DataFrame([{"assertion": name, names[0]: c[0] / c[1] if c[1] else None,
                          names[1]: c[2] / c[3] if c[3] else None} for name, c in counts.items()])


def show_pass_rate_table(table: pd.DataFrame) -> None:
    """``pass_rates`` drawn as bars, one column per candidate."""
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        name: st.column_config.ProgressColumn(name, min_value=0.0, max_value=1.0, format="percent")
        for name in table.columns if name != "assertion"})


def show_pass_rates(run: dict, seed_id: str) -> None:
    """The dashboard's table: pass rate per assertion of the best candidate against the seed, on
    the validation examples (``run``: the run as it is now; read again when it changed)."""
    from ui import data

    best = run.get("best_candidate_id") or seed_id
    rows = data.pair_evaluations(data.db_url(), run["id"], seed_id, best, data.version_token(run))
    split = "val" if any(r["split"] == "val" for r in rows) else "train"
    table = pass_rates(rows, split)
    if table.empty:
        st.caption("No validated evaluation yet.")
        return
    show_pass_rate_table(table)
