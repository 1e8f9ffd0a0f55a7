"""The New run form's paste boxes take at most ``form_checks.PASTE_LIMIT`` characters.

Chromium inserts a pasted multi-line text into a text area in time that grows with the square of
its length (docs/benchmarks-large-dataset.md): a paste of 12,000 JSONL rows froze the page for
minutes. Streamlit's own ``max_chars`` cuts the value only after the browser has inserted all of
it, so the boxes get the browser's ``maxlength`` instead, which cuts the paste as it is inserted;
the form then says the paste was cut (``form_checks.paste_cut``) and how to give more rows (an
upload). A text already longer (an upload shown in the box, a loaded example) stays whole.
"""

from __future__ import annotations

import json

import streamlit as st

from ui.form_checks import PASTE_LIMIT

_SCRIPT = """<script>
(() => {
  const selector = %(selector)s, limit = %(limit)d;
  const apply = () => document.querySelectorAll(selector).forEach(t => {
    if (t.maxLength !== limit) t.maxLength = limit; });
  apply();
  if (!window.__refractPasteLimit) {  // one watcher per page: boxes redrawn by a rerun get it too
    window.__refractPasteLimit = new MutationObserver(apply);
    window.__refractPasteLimit.observe(document.body, {childList: true, subtree: true});
  }
})();
</script>"""


def limit_paste_boxes(keys: tuple[str, ...]) -> None:
    """Give the text areas of these widget keys the browser's ``maxlength``."""
    selector = ", ".join(f".st-key-{k} textarea" for k in keys)
    st.html(_SCRIPT % {"selector": json.dumps(selector), "limit": PASTE_LIMIT}, unsafe_allow_javascript=True)
