"""Tables shown a page at a time: at 10,000 candidates or 2,500 steps, sending every row on each
refresh of a live run took seconds (Streamlit serialises the whole frame each time), and nobody
reads past the first screen without asking for it."""

from __future__ import annotations

import pandas as pd
import streamlit as st


def page(rows: pd.DataFrame, size: int, key: str, what: str = "rows") -> tuple[pd.DataFrame, str]:
    """One page of ``rows`` (already in the order shown: the first page is what matters most), a
    page number input when there is more than one, and what a caption says of it ("" for one
    page: " · 501–1,000 of 2,500 rows shown"). The numbers are places in the order shown, not
    the rows' own numbers: "steps 1–100" over the newest of 2,500 steps read as steps 1 to 100."""
    pages = -(-len(rows) // size)
    if pages <= 1:
        return rows, ""
    box, _ = st.columns([1, 3])  # a page number needs no page's width
    n = int(box.number_input(f"Page (of {pages}, {size} {what} each)", 1, pages, 1, key=key))
    first = (min(n, pages) - 1) * size
    return rows.iloc[first:first + size], f" · {first + 1:,}–{min(first + size, len(rows)):,} of {len(rows):,} {what} shown"
