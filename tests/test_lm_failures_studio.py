"""The dashboard's KPI area says how many LM calls failed and how (issue 13, defect 1)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from streamlit.testing.v1 import AppTest

from storage import lm_calls, queries
from storage.models import LMCall
from tests.support.synthetic import generate_run
from tests.support.studio import studio_database
from ui.lm_health import lm_failures_text

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _attempt(db, run_id, status, kind=None):
    call_id = lm_calls.start_lm_call(db, LMCall(run_id=run_id, purpose="reflection", model="openai/gpt-4.1-mini",
                                            messages=[{"role": "user", "content": "improve"}]))
    if status != "started":
        lm_calls.finish_lm_call(db, call_id, status, error="injected" if kind else None, error_kind=kind)


def test_the_dashboard_shows_lm_failures_by_kind(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=10, n_val=4, n_train=4)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["run"] = run_id
    at.switch_page(str(Path(APP).parent / "pages/dashboard.py"))
    at.run()
    assert not any("LM calls:" in c.value for c in at.caption)  # nothing failed: no caption

    for status, kind in (("failed", "rate_limit"), ("failed", "rate_limit"), ("failed", "timeout"), ("done", None),
                         ("started", None)):
        _attempt(db, run_id, status, kind)
    from engine.lm.journal import recover_interrupted

    recover_interrupted(db, run_id)
    run = queries.run_overview(db, run_id)
    expected = ("LM calls: 3 of 5 LM calls failed (429 ×2, timeout ×1); 1 of 5 LM calls were interrupted by a crash "
                "(cost estimated from their prompts)")
    assert lm_failures_text(run) == expected
    # the first render cached the run's overview for a second or two (ui.data): a person sees the
    # failures at the next refresh; the test asks for that refresh instead of racing the cache
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["run"] = run_id
    at.switch_page(str(Path(APP).parent / "pages/dashboard.py"))
    at.run()
    assert not at.exception
    assert expected in [c.value for c in at.caption]
