"""The HTML report opened in Chromium with the network blocked: plotly draws from the inlined
bundle, nothing is requested, no script error, and HTML in the run's texts stays text.
Screenshots: test-artifacts/report*.png."""

from __future__ import annotations

import re

import pytest

from engine.cli import main
from engine.commands import send_command
from tests.support.reviewed_run import reviewed  # noqa: F401  (the fixture)

from .conftest import ARTIFACTS, VIEWPORT

pytestmark = pytest.mark.browser


def test_the_report_opens_in_chromium_with_the_network_blocked(reviewed, tmp_path, browser):  # noqa: F811
    db, run_id, cand_id = reviewed
    send_command(db, run_id, "approve", {"candidate_id": cand_id}, reason="the clearest", author="ed")
    out = tmp_path / "report.html"
    assert main(["report", run_id, "--out", str(out), "--db", db.url]) == 0
    requests, errors = [], []
    ctx = browser.new_context(viewport=VIEWPORT, offline=True)
    ctx.route(re.compile(r"^(?!file:).*"), lambda route: (requests.append(route.request.url), route.abort()))
    page = ctx.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("dialog", lambda d: (errors.append("dialog: " + d.message), d.dismiss()))
    page.goto(out.as_uri())
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)  # plotly drew from the inlined bundle
    assert page.locator(".js-plotly-plot").count() == 2
    assert page.title().startswith("Refract run demo <script>")  # the name as text, not run
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"))
    page.get_by_text("Validation score over the budget").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "report-plots.png"))
    page.get_by_text("The approved candidate").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "report-candidate.png"))
    ctx.close()
    assert requests == [] and errors == []
