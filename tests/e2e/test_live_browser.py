"""A run advancing while its dashboard is open, in a real browser against a real engine (the
supervised worker, the toy task, a scripted LM with some latency): without any reload, the
candidate filters take in the new origins, the frontier size follows the engine's, the
sidebar's heartbeat says what the worker does, and the best link names the best candidate.
The name typed on the New run page is still there on the dashboard the form opens.

Screenshots at 1440×900 go to test-artifacts/ (live-*.png).
"""

from __future__ import annotations

import re

import pytest

from engine.records.export import export_run
from storage import repo
from tests.support.synthetic import generate_run

from .conftest import by_key, new_page, ready, shot, until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture
def studio(worker_studio):
    return worker_studio


def _metric(page, label: str) -> str:
    return page.locator('[data-testid="stMetric"]', has_text=label).locator('[data-testid="stMetricValue"]') \
        .first.inner_text()


def test_the_dashboard_follows_a_run_without_a_reload(studio, browser):
    db = studio.db
    # a second person watches a finished run: the worker is idle, then busy, in their sidebar
    done = generate_run(db, n_candidates=20, n_val=6, n_train=8, name="earlier run")
    bob = new_page(browser, studio.url, who="bob")
    bob.goto(f"{studio.url}/dashboard?run={done}")
    ready(bob)
    sidebar = bob.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("idle").wait_for(timeout=60_000)  # the worker boots (imports litellm) first

    # ana names herself on the New run page and starts the toy example from the form
    ana = new_page(browser)
    ana.goto(f"{studio.url}/new")
    ready(ana)
    who = ana.locator('[data-testid="stSidebar"] input').first
    who.fill("ana")
    who.press("Enter")
    ready(ana)
    by_key(ana, "new_template").get_by_role("combobox").click()
    ana.get_by_role("option", name=re.compile("Toy words")).click()
    by_key(ana, "new_load_template").get_by_role("button").click()
    ready(ana)
    ana.get_by_text("Splits as given: 8 train").wait_for()  # the example is loaded
    model = by_key(ana, "new_model").locator("input")
    model.scroll_into_view_if_needed()
    model.fill("scripted/toy@1.5")  # slow enough to watch the run move
    model.press("Enter")
    until(lambda: ana.get_by_text("no provider API key found").count() == 0, "the local model's note to go", 30)
    ready(ana)
    by_key(ana, "new_submit").get_by_role("button").click()
    ana.wait_for_url(re.compile(r"/dashboard\?run="), timeout=60_000)
    run_id = re.search(r"run=(\w+)", ana.url).group(1)
    assert repo.get_run(db, run_id).owner == "ana"
    # bob's sidebar, untouched: the worker is now on ana's run (checked at once: the toy run is short)
    sidebar.get_by_text(f"on run {run_id}").wait_for(timeout=30_000)

    # the name survived the page switch: steering is enabled without a reload
    ready(ana)
    pause = by_key(ana, "steer_pause").get_by_role("button")
    pause.wait_for(timeout=60_000)
    assert ana.get_by_text("Enter your name under").count() == 0
    assert pause.is_enabled() or repo.get_run(db, run_id).status not in ("queued", "running")

    # while the run moves: new origins enter the filter, the table counts them
    # (the filter's key names its options: after they grow, Streamlit keeps the old widget in the
    # page, hidden, until the next refresh: two elements carry the key for a few seconds)
    origin = by_key(ana, "dash_cand_origin").and_(ana.locator('[data-stale="false"]'))
    origin.first.wait_for(timeout=60_000)
    until(lambda: any("reflection" in t for t in origin.all_inner_texts()), "a reflection origin in the filter", 60)
    ana.wait_for_timeout(800)
    shot(ana, "live-dashboard-running")
    shot(bob, "live-sidebar-other-browser")

    until(lambda: repo.get_run(db, run_id).status == "completed", "the run to complete", 120)
    doc = export_run(db, run_id)
    members = set().union(*(set(f["candidate_ids"]) for f in doc["frontier"]))
    best = doc["best"]["candidate_id"]
    visible = [c for c in doc["candidates"] if c["status"] != "rejected"]
    caption = ana.locator('[data-testid="stCaptionContainer"]', has_text="candidates · select a row").first
    want = f"{len(visible)} of {len(doc['candidates'])} candidates"
    until(lambda: caption.inner_text().startswith(want), f"the table to count {want}: {caption.inner_text()}", 20)
    until(lambda: _metric(ana, "Frontier size") == str(len(members)), "the frontier size to follow", 20)
    link = ana.get_by_role("link", name=f"Best: {best}")
    link.wait_for(timeout=20_000)
    assert f"candidate={best}" in link.get_attribute("href")
    assert _metric(ana, "Best val score") == f"{doc['best']['val_mean']:.3f}"
    ana.wait_for_timeout(800)
    shot(ana, "live-dashboard-completed")
    ana.get_by_role("heading", name="Pareto frontier").scroll_into_view_if_needed()
    ana.wait_for_timeout(800)
    shot(ana, "live-dashboard-frontier")
    link.click()
    ana.wait_for_url(re.compile(rf"/candidate\?run={run_id}&candidate={best}"))
    ready(ana)
    shot(ana, "live-best-candidate")
    for p in (ana, bob):
        p.context.close()
