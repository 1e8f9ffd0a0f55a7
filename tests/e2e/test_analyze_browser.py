"""The Analyze panel in a real browser, on a sick run the engine really ran (a hedging answer on
the frontier): the findings with their evidence, a veto sent with one click (and the findings
refreshing by themselves once the engine applied it), and the written
diagnosis queued as a job that the studio's worker runs with the run's (scripted) reflection LM.

Screenshots go to test-artifacts/ (analyze-panel.png and analyze-diagnosis.png, the README's
docs/screenshots/ copies)."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from engine.commands import send_command
from storage import repo
from storage.analyze_queries import last_diagnosis
from tests.support import sick_runs
from ui import keys as K

from .conftest import by_key, new_page, ready, shot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _paused_sick_run(db, tmp_path) -> str:
    def pause_after_step_3(ctx):
        if ctx.step_index == 3:
            send_command(ctx.db, ctx.run_id, "pause", author="ana")

    return sick_runs.degenerate_member(db, tmp_path, on_step=pause_after_step_3)


def test_analyze_panel_findings_veto_and_diagnosis(worker_studio, browser, tmp_path):
    db = worker_studio.db
    run_id = _paused_sick_run(db, tmp_path)
    assert repo.get_run(db, run_id).status == "paused"
    page = new_page(browser, worker_studio.url, who="ana")
    page.goto(f"{worker_studio.url}/dashboard?run={run_id}")
    ready(page)
    first = by_key(page, K.ANALYZE_FINDING.format(finding="F1"))
    expect(first).to_contain_text("degenerate frontier member", timeout=30_000)  # named first: F1
    first.scroll_into_view_if_needed()
    shot(page, "analyze-panel")

    by_key(page, K.ANALYZE_ACTION.format(finding="degenerate_members", i=0)).get_by_role(
        "button", name=re.compile("^Veto")).click()
    # "veto queued (command N)", which becomes "veto applied …" once the worker applied it
    expect(page.get_by_text(re.compile(r"veto (queued|applied)")).first).to_be_visible(timeout=20_000)
    cmd = repo.list_commands(db, run_id)[-1]
    assert cmd.kind == "veto" and cmd.author == "ana" and cmd.reason.startswith("Analyze: degenerate")
    # the worker applies the veto on the paused run; the panel refreshes by itself (no click, no reload)
    expect(first).not_to_contain_text("degenerate frontier member", timeout=40_000)
    assert repo.get_candidate(db, cmd.payload["candidate_id"]).vetoed

    by_key(page, K.ANALYZE_DIAGNOSE).get_by_role("button", name="Write a diagnosis").click()
    deadline = time.monotonic() + 90
    while last_diagnosis(db, run_id) is None:
        assert time.monotonic() < deadline, "the worker did not write the diagnosis within 90 s"
        time.sleep(0.5)
    expect(page.get_by_text("Deal with F1 before anything else")).to_be_visible(timeout=30_000)
    page.get_by_text("Deal with F1 before anything else").scroll_into_view_if_needed()
    page.mouse.move(700, 5)  # no tooltip of the button (hovered, or focused since the click) over the draft
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.wait_for_timeout(500)
    shot(page, "analyze-diagnosis")
    assert last_diagnosis(db, run_id)["model"] == "scripted/toy"
