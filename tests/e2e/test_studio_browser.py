"""The studio in a real browser on a synthetic run (no engine): live dashboard, candidate page via the
table, lineage click-through, shareable links, screenshots at 1440×900 in test-artifacts/."""

from __future__ import annotations

import pytest

from storage.db import Database
from storage.states import RunStatus
from tests.support.synthetic import generate_run

from .conftest import shot, start_studio, stop_studio

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("studio")
    url = f"sqlite:///{tmp}/e2e.db"
    db = Database(url)
    db.create_all()
    done = generate_run(db, n_candidates=120, n_val=30)
    live = generate_run(db, n_candidates=60, n_val=20, seed=7, status="running", name="Live synthetic")
    proc, studio = start_studio(tmp, url, worker=False)
    studio.run_id, studio.live_id, studio.db = done, live, db
    yield studio
    stop_studio(proc)


def _ready(page):
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000)
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator('[data-testid="stException"]').first.inner_text()


def test_dashboard_candidate_lineage(studio, page):
    page.goto(f"{studio.url}/dashboard?run={studio.run_id}")
    _ready(page)
    page.get_by_text("Best val score").wait_for()
    page.get_by_text("binds first").wait_for()
    page.locator(".js-plotly-plot").nth(2).wait_for()
    page.wait_for_timeout(1000)
    shot(page, "studio-dashboard")
    page.locator('[data-testid="stMain"]').evaluate("el => el.scrollTo(0, 900)")
    page.wait_for_timeout(800)
    shot(page, "studio-dashboard-2")
    page.locator('[data-testid="stMain"]').evaluate("el => el.scrollTo(0, 1800)")
    page.wait_for_timeout(800)
    shot(page, "studio-dashboard-3")

    # shareable link of the best candidate
    from storage import queries

    best = queries.run_overview(studio.db, studio.run_id)["best_candidate_id"]
    page.goto(f"{studio.url}/candidate?run={studio.run_id}&candidate={best}")
    _ready(page)
    page.get_by_role("heading", name=f"Candidate {best}").wait_for()
    shot(page, "studio-candidate")
    page.get_by_role("tab", name="Reflection").click()
    page.get_by_text("<script>alert('not html')</script>", exact=False).first.wait_for()  # shown as text
    shot(page, "studio-candidate-reflection")
    page.get_by_role("tab", name="Side information").click()
    page.wait_for_timeout(500)
    shot(page, "studio-candidate-side-info")

    page.goto(f"{studio.url}/lineage?run={studio.run_id}")
    _ready(page)
    page.locator(".js-plotly-plot").first.wait_for()
    shot(page, "studio-lineage")


def test_live_dashboard_refreshes_itself(studio, page):
    from storage import repo

    page.goto(f"{studio.url}/dashboard?run={studio.live_id}")
    _ready(page)
    page.get_by_text("running", exact=True).first.wait_for()
    before = repo.get_run(studio.db, studio.live_id).metric_calls
    repo.bump_run(studio.db, studio.live_id, metric_calls=123_456)
    # the fragment refreshes by itself: no reload, no click
    page.get_by_text(f"{(before + 123_456) / 1000:.3g}k").first.wait_for(timeout=15_000)
    repo.transition_run(studio.db, studio.live_id, RunStatus.COMPLETED, "")
    page.get_by_text("completed", exact=True).first.wait_for(timeout=15_000)


def test_runs_page_and_new_run_form(studio, page):
    page.goto(f"{studio.url}/runs")  # typed or bookmarked: the Runs page, not Streamlit's "Page not found"
    _ready(page)
    page.get_by_text("Live synthetic").first.wait_for(state="attached")  # a canvas grid: cells are hidden DOM
    assert page.get_by_text("Page not found").count() == 0
    page.get_by_role("heading", name="Runs").wait_for()
    shot(page, "studio-runs")
    page.goto(f"{studio.url}/new")
    _ready(page)
    page.get_by_text("Start from a built-in example").wait_for()
    shot(page, "studio-new-run")
