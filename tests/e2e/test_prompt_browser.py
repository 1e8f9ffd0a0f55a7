"""The prompt path in a real browser: from an empty New run form to a preview of the seed prompt
on three examples and a running prompt run, then the compare view of that run and the best
candidate's answers beside its parent's. A real engine worker with the scripted LM of
tests/support/prompt_task.py as task LM, judge and reflection LM."""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from storage import repo
from tests.support.prompt_task import BETTER, ROWS

from .conftest import by_key, ready, shot, stop_studio, studio_with_worker

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    proc, studio = studio_with_worker(tmp_path_factory.mktemp("prompt-studio"), 0.0, "tests.support.prompt_task:script")
    yield studio
    stop_studio(proc)


def _fill(page, label: str, text: str) -> None:
    box = page.locator("input, textarea").and_(page.get_by_label(label, exact=True))
    for _ in range(20):  # a rerun may briefly keep the stale element beside the new one
        if box.count() == 1:
            break
        page.wait_for_timeout(250)
    box.fill(text)
    box.press("Tab")  # a text input or area commits its value on blur
    ready(page)


def test_from_an_empty_form_to_a_previewed_running_prompt_run(studio, page):
    # a newcomer's first page, before any run: what a run is, and the examples one click from the form
    page.goto(studio.url)
    ready(page)
    expect(page.get_by_text("Refract improves a text by trying changes and keeping what scores better.")).to_be_visible()
    page.locator(".st-key-runs_example_ticket_routing").get_by_role("button", name="Open in the form").click()
    page.wait_for_url("**/new", timeout=30_000)
    ready(page)
    expect(page.get_by_text(re.compile(r"Loaded the example Ticket routing prompt: every section below"))).to_be_visible()
    expect(page.get_by_label("Run name")).to_have_value("Ticket routing prompt")
    page.get_by_role("button", name="Clear the form").click()  # and from here, a prompt of one's own
    ready(page)
    expect(page.get_by_label("Run name")).to_have_value("")
    expect(page.get_by_text("Loaded the example")).to_have_count(0)
    page.get_by_text("Start from a built-in example").wait_for()
    _fill(page, "Run name", "ticket routing")
    _fill(page, "Seed candidate", "Classify the support ticket.")
    page.get_by_text("prompt: a task LM and assertions").click()
    ready(page)
    _fill(page, "User message", "Ticket: {text}")
    # the task LM with its own model (an API base and a key variable could follow); the judge stays the reflection LM
    by_key(page, "new_task_same").locator("label").click()
    ready(page)
    expect(by_key(page, "new_task_same").locator("input")).not_to_be_checked()
    expect(by_key(page, "new_judge_same").locator("input")).to_be_checked()
    _fill(page, "Task LM model (litellm string)", "scripted/task")
    _fill(page, "Model (litellm string)", "scripted/reflect")
    page.get_by_text("paste text").click()
    ready(page)
    _fill(page, "Examples", "".join(json.dumps(r) + "\n" for r in ROWS))
    expect(page.get_by_text("Columns: label, text.")).to_be_visible()
    page.get_by_text("User message").first.scroll_into_view_if_needed()
    shot(page, "prompt-form")
    page.get_by_role("button", name="Preview on three examples").click()
    expect(page.get_by_text("Task LM output").first).to_be_attached(timeout=90_000)
    panel = page.get_by_text("Preview: the seed prompt's answers").locator("xpath=ancestor::div[@data-testid='stVerticalBlock'][1]")
    expect(panel.get_by_text("· score 1.000").first).to_be_visible(timeout=60_000)  # a "bug" ticket passes icontains
    expect(panel.get_by_text("· score 0.000").first).to_be_visible()  # a billing ticket answered "refund request"
    for label in panel.get_by_text("· score 0.000").all():  # open each failed example
        label.click()
    answers = panel.locator('[data-testid="stExpander"]').get_by_text("Category: refund request ticket")
    expect(answers.first).to_be_visible()
    shot(page, "prompt-preview")

    page.get_by_role("button", name="Start run").click()  # nobody named yet: no run that nobody could steer
    expect(page.get_by_text("Who am I: enter your name in the sidebar first")).to_be_visible()
    assert repo.list_runs(studio.db) == []
    _fill(page, "Who am I", "ana")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url("**/dashboard?run=*", timeout=60_000)
    run_id = page.url.split("run=")[1].split("&")[0]
    deadline = time.monotonic() + 120
    while repo.get_run(studio.db, run_id).status not in ("running", "completed", "stopped"):
        assert time.monotonic() < deadline, repo.get_run(studio.db, run_id).status
        time.sleep(0.5)
    cfg = repo.get_run(studio.db, run_id).config
    assert cfg["prompt_evaluator"]["user"] == "Ticket: {text}" and cfg["task_lm"]["model"] == "scripted/task"
    ready(page)
    shot(page, "prompt-run-dashboard")

    while repo.get_run(studio.db, run_id).status not in ("completed", "stopped", "failed"):
        assert time.monotonic() < deadline + 120
        time.sleep(0.5)
    run = repo.get_run(studio.db, run_id)  # the scripted reflection's prompt wins; if not, say what the run did
    assert repo.get_candidate(studio.db, run.best_candidate_id).origin != "seed", (
        run.status, run.status_reason, [(c.origin, c.status, c.reason) for c in repo.list_candidates(studio.db, run_id)])
    page.goto(f"{studio.url}/dashboard?run={run_id}")
    ready(page)
    heading = page.get_by_text("Assertions: pass rate of the best candidate vs the seed (validation)")
    heading.scroll_into_view_if_needed(timeout=30_000)
    shot(page, "prompt-dashboard-pass-rates")
    page.goto(f"{studio.url}/compare?run={run_id}")
    ready(page)
    expect(page.get_by_text(f"+{BETTER}").first).to_be_visible(timeout=30_000)  # the diff: the seed against the best
    expect(page.get_by_text(re.compile(r"A 0\.\d+ · B 1\.000 · B − A \+0\.\d+ over the \d example")).first).to_be_visible(timeout=30_000)
    shot(page, "prompt-compare")
    best = repo.get_run(studio.db, run_id).best_candidate_id
    page.goto(f"{studio.url}/candidate?run={run_id}&candidate={best}")  # its answers beside its parent's
    ready(page)
    heading = page.get_by_text("Answers against the parent")
    heading.scroll_into_view_if_needed(timeout=30_000)
    expect(page.get_by_text(re.compile(r"score up on [1-9]")).first).to_be_visible(timeout=30_000)
    shot(page, "prompt-candidate-answers")
