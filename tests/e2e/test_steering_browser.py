"""The studio against a real engine, in a real browser: a real ``streamlit run`` whose supervised
worker runs the toy task with a scripted reflection LM (deterministic, no network).

1. Create a run from the built-in "Toy words" example in the New run page (its train / val /
   test files kept as given), watch the live dashboard reach its first accepted candidate,
   open that candidate and its lineage.
2. Two people on one paused run: one pins, edits, unpins and vetoes a candidate; the other,
   on the same candidate page, sees each command within 2 seconds (and then its effect, once
   the engine applied it at the step boundary).

Screenshots at 1440×900 go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from datetime import timezone

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from engine.commands import send_command
from engine.runs import submit_run
from storage import repo
from storage.db import Database
from tests.support.harness import toy_config

from .conftest import (
    ARTIFACTS,
    by_key,
    new_page,
    ready,
    shot,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
SEEN_WITHIN_S = 2.0  # median
SEEN_AT_MOST_S = 6.0


@pytest.fixture
def studio(worker_studio):
    return worker_studio


def _wait_status(db: Database, run_id: str, status: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while repo.get_run(db, run_id).status != status:
        assert time.monotonic() < deadline, f"run {run_id} is {repo.get_run(db, run_id).status}, not {status}"
        time.sleep(0.2)


def _new_run_with_toy_words(studio, browser):
    """The new-run page of a fresh browser session, with the built-in toy example loaded."""
    page = new_page(browser, studio.url, who="ana")
    page.goto(f"{studio.url}/new")
    ready(page)
    by_key(page, "new_template").get_by_role("combobox").click()
    page.get_by_role("option", name=re.compile("Toy words")).click()
    by_key(page, "new_load_template").get_by_role("button").click()
    ready(page)
    return page


def test_try_evaluator_runs_in_the_engine_while_the_page_polls(studio, browser):
    page = _new_run_with_toy_words(studio, browser)
    by_key(page, "new_try_evaluator").get_by_role("button").click()
    # what the worker reports while it works (waiting for it, starting the sandbox, n of 5 done)
    page.get_by_text("Evaluator on the seed", exact=True).wait_for()
    page.get_by_text("Evaluator on the seed", exact=True).scroll_into_view_if_needed()
    shot(page, "e2e-try-evaluator-running")
    # then the table, its rows numbered as the preview numbers them
    page.get_by_text(re.compile(r"^row 1 \(w\d+\) · score \d\.\d{3}")).first.wait_for(timeout=60_000)
    # the progress line goes away once the result is there (the panel stops polling)
    expect(page.get_by_text(re.compile("waiting for the engine|example\\(s\\) evaluated…"))).to_have_count(0)
    page.locator('[data-testid="stDataFrame"]').last.scroll_into_view_if_needed()
    shot(page, "e2e-try-evaluator-result")


def test_new_run_from_an_example_to_its_first_accepted_candidate(studio, browser):
    page = _new_run_with_toy_words(studio, browser)
    # the example's own splits are kept: three sets, as given
    page.get_by_text("Splits as given: 8 train · 6 validation · 3 test").wait_for()
    model = by_key(page, "new_model").locator("input")
    model.scroll_into_view_if_needed()
    if model.input_value().startswith("local/"):  # no provider key here: the note says why the local model
        page.get_by_text("no provider API key found").wait_for()
    shot(page, "e2e-new-run-default-model")
    model.fill("scripted/toy")
    model.press("Enter")
    ready(page)
    shot(page, "e2e-new-run-toy-words")
    by_key(page, "new_submit").get_by_role("button").click()
    page.wait_for_url(re.compile(r"/dashboard\?run="), timeout=30_000)
    run_id = re.search(r"run=(\w+)", page.url).group(1)
    assert repo.get_run(studio.db, run_id).config["valset"][0]["id"] == "v0"

    # the live dashboard reaches the first improved (then validated: accepted) proposal by itself (no reload)
    accepted = page.locator('[data-testid="stMetric"]', has_text="Improved").locator('[data-testid="stMetricValue"]')
    deadline = time.monotonic() + 60
    while not re.match(r"[1-9]\d* / \d+", accepted.inner_text()):
        assert time.monotonic() < deadline, accepted.inner_text()
        page.wait_for_timeout(250)
    page.wait_for_timeout(800)
    shot(page, "e2e-dashboard-first-accepted")

    first = next(c for c in repo.list_candidates(studio.db, run_id, ["accepted"]) if c.origin == "reflection")
    page.goto(f"{studio.url}/candidate?run={run_id}&candidate={first.id}")
    ready(page)
    page.get_by_role("heading", name=f"Candidate {first.id}").wait_for()
    page.locator('[data-testid="stCode"]', has_text=first.content["text"]).first.wait_for()  # its full text
    shot(page, "e2e-candidate")
    page.get_by_role("link", name="Show in lineage").click()
    page.wait_for_url(re.compile(r"/lineage\?"))
    ready(page)
    page.locator(".js-plotly-plot").first.wait_for()
    page.get_by_text("this candidate").first.wait_for(state="attached")  # highlighted in the tree
    _wait_status(studio.db, run_id, "completed")
    page.wait_for_timeout(500)
    shot(page, "e2e-lineage")
    page.context.close()


def _seen(page, db: Database, run_id: str, kind: str) -> float:
    """Wait until the other browser shows the latest ``kind`` command by ana; the seconds from
    the command's creation (its database timestamp) to that moment. The wait is as long as the
    bound ``_check_latencies`` applies at this load (10 s at least), so that bound decides."""
    wait_s = max(10.0, SEEN_AT_MOST_S * _load_per_cpu())
    page.locator('[data-testid="stCaptionContainer"], [data-testid="stMarkdownContainer"]', has_text=f"{kind} by ana") \
        .first.wait_for(timeout=wait_s * 1000)
    seen_at = time.time()
    created = [c for c in repo.list_commands(db, run_id) if c.kind == kind][-1].created_at
    return seen_at - created.replace(tzinfo=created.tzinfo or timezone.utc).timestamp()


def _until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def _open_expander(page, label: str, inside) -> None:
    """Open an expander and wait for ``inside`` to show. A click that lands while the page is
    being redrawn (the pin above was just applied) can be lost by the browser; then the expander
    is still shut, and one more click opens it (a shut expander after the wait is a failure)."""
    for attempt in range(2):
        page.get_by_text(label).click()
        try:
            inside.wait_for(state="visible", timeout=10_000)
            return
        except PlaywrightTimeout:
            if attempt:
                raise


def _load_per_cpu() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


def _check_latencies(seen: dict[str, float]) -> None:
    """The commands show in the other browser within 2 s as a rule (median: its state fragment
    refreshes every 0.5 s from reads cached 0.25 s), none later than 6 s: an edit makes the
    engine start a validation pass on the same two cores, and was seen after 5.3 s once (load
    2.5 on 2 cores). The latencies are saved with the screenshots. On a machine busier than its
    CPU count (other test suites beside this one) the bounds grow with the load per CPU:
    scheduling delay is not the studio's."""
    ARTIFACTS.mkdir(exist_ok=True)
    load = _load_per_cpu()
    (ARTIFACTS / "steering-latency.json").write_text(json.dumps({"seen_after_s": seen, "load_per_cpu": load}, indent=1))
    assert statistics.median(seen.values()) <= SEEN_WITHIN_S * max(1.0, load), (seen, f"load per CPU {load:.1f}")
    assert max(seen.values()) <= SEEN_AT_MOST_S * max(1.0, load), (seen, f"load per CPU {load:.1f}")


def test_two_people_see_each_others_pins_vetoes_and_edits(studio, browser):
    db = studio.db
    run_id = submit_run(db, toy_config(8, name="shared run"), owner="ana")
    send_command(db, run_id, "step", {}, author="ana", reason="one step, then we look together")
    _wait_status(db, run_id, "paused")
    cand = next(c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.origin == "reflection")
    link = f"{studio.url}/candidate?run={run_id}&candidate={cand.id}"
    ana, bob = new_page(browser, studio.url, who="ana"), new_page(browser, studio.url, who="bob")
    for p in (ana, bob):
        p.goto(link)
        ready(p)
    # First a comment from ana, which bob sees in the thread of the Comments tab. It also lets both
    # pages finish their first render: just after opening, a page on this busy machine spends
    # seconds rendering (measured without any engine: a command seen 2.4 s after it was sent when
    # it came 1.5 s after the page opened, 0.3-0.9 s once the page had settled). The 2 s bound is
    # about an open page, so the timed commands come after.
    ana.get_by_role("tab", name="Comments").click()
    bob.get_by_role("tab", name="Comments").click()
    by_key(ana, f"steer_comment_{cand.id}").locator("textarea").fill("this one keeps the first fix")
    by_key(ana, "steer_comment_send").get_by_role("button").click()
    _until(lambda: repo.list_comments(db, run_id, cand.id), "ana's comment recorded")
    bob.get_by_text("this one keeps the first fix").wait_for(timeout=30_000)
    bob.get_by_text("this one keeps the first fix").scroll_into_view_if_needed()
    shot(bob, "e2e-steer-comment-other-browser")
    bob.locator('[data-testid="stMain"]').evaluate("el => el.scrollTo(0, 0)")
    assert repo.list_comments(db, run_id, cand.id)[-1].author == "ana"
    seen = {}

    # pin (with a reason)
    by_key(ana, "steer_cand_reason").locator("input").fill("keeps the first fix")
    by_key(ana, "steer_pin").get_by_role("button").click()
    seen["pin"] = _seen(bob, db, run_id, "pin")
    bob.get_by_text("pinned", exact=False).first.wait_for(timeout=20_000)  # applied by the engine

    # edit into a new human candidate
    editor = by_key(ana, f"steer_edit_{cand.id}_0").locator("textarea")
    _open_expander(ana, "Edit into a new candidate", editor)
    editor.fill(cand.content["text"] + " zulu")
    editor.press("Control+Enter")  # commit the text area (as a blur would): the diff preview follows
    by_key(ana, f"steer_edit_reason_{cand.id}").locator("input").fill("zulu is next")
    ana.get_by_text("Diff preview").wait_for()
    by_key(ana, "steer_edit_send").scroll_into_view_if_needed()
    shot(ana, "e2e-steer-edit")
    by_key(ana, "steer_edit_send").get_by_role("button").click()
    seen["edit"] = _seen(bob, db, run_id, "edit")
    bob.get_by_text("new candidate c", exact=False).first.wait_for(timeout=20_000)  # evaluated and entered

    # unpin, then veto
    by_key(ana, "steer_pin").get_by_role("button", name="Unpin", exact=True).wait_for(timeout=20_000)
    by_key(ana, "steer_pin").get_by_role("button").click()
    seen["unpin"] = _seen(bob, db, run_id, "unpin")
    by_key(ana, "steer_pin").get_by_role("button", name="Pin", exact=True).wait_for(timeout=20_000)
    by_key(ana, "steer_veto").get_by_role("button").click()
    seen["veto"] = _seen(bob, db, run_id, "veto")
    bob.get_by_text("vetoed — never chosen as a parent").wait_for(timeout=20_000)
    bob.mouse.move(0, 0)
    shot(bob, "e2e-steer-other-browser")

    _check_latencies(seen)
    human = [c for c in repo.list_candidates(db, run_id) if c.origin == "human"]
    assert len(human) == 1 and human[0].author == "ana" and human[0].parent_ids == [cand.id]
    assert repo.get_candidate(db, cand.id).vetoed
    cmds = repo.list_commands(db, run_id)
    assert [(c.kind, c.author, c.status) for c in cmds[1:]] == [
        ("pin", "ana", "applied"), ("edit", "ana", "applied"), ("unpin", "ana", "applied"), ("veto", "ana", "applied")]

    # what bob sees on the dashboard and in the lineage: the log, the vetoed node greyed
    bob.goto(f"{studio.url}/dashboard?run={run_id}")
    ready(bob)
    bob.get_by_text("Change the budget of this run").wait_for()
    bob.locator(".js-plotly-plot").nth(1).wait_for()
    shot(bob, "e2e-steer-dashboard-top")
    bob.get_by_role("heading", name="Pareto frontier").scroll_into_view_if_needed()
    bob.wait_for_timeout(800)
    shot(bob, "e2e-steer-dashboard-frontier")
    bob.get_by_role("heading", name="Commands").scroll_into_view_if_needed()
    bob.wait_for_timeout(800)
    shot(bob, "e2e-steer-dashboard-log")
    bob.goto(f"{studio.url}/lineage?run={run_id}")
    ready(bob)
    bob.locator(".js-plotly-plot").first.wait_for()
    bob.wait_for_timeout(500)
    shot(bob, "e2e-steer-lineage")
    for p in (ana, bob):
        p.context.close()
