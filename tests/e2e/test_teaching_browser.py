"""The teaching views in a real browser on a finished run of the scripted LM: the step explained
(each phase shows that step's own parents, prompt, children and scores), the runtime
playground, and who wrote each line of a candidate (a person's edit among reflections).
Screenshots at 1440×900 in test-artifacts/."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from engine.commands import send_command
from storage import explain_queries, repo
from storage.db import Database
from tests.support import toy
from engine.runs import submit_run
from tests.support.harness import run_optimizer, run_toy, toy_config

from .conftest import new_page, shot, start_studio, stop_studio

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]
expect.set_options(timeout=30_000)  # a busy machine (other suites beside this one) renders slowly

# the toy task with one word per line (the built-in toy_words insists on one line), so that
# provenance has lines to tell apart
EVALUATOR = '''
def evaluate(candidate, example):
    words = set(candidate.split())
    return (1.0 if example["word"] in words else 0.0), {"expected": example["word"], "got": sorted(words)[:20]}
'''


def one_word_per_line(messages: list[dict], params: dict) -> str:
    prompt = messages[1]["content"]
    current = toy.current_version(prompt)
    missing = [w for w in toy.missing_words(prompt) if w not in current.split()]
    if not missing:
        return "Nothing is missing.\n```\n" + current + "\n```"
    word = missing[min(params.get("sample_index", 0), len(missing) - 1)]
    return f"Adding {word} on its own line.\n```\n{current}\n{word}\n```"


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("teaching")
    url = f"sqlite:///{tmp}/teaching.db"
    db = Database(url)
    db.create_all()
    cfg = toy_config(8, evaluator=EVALUATOR, budget={"max_metric_calls": 90, "stop_at_score": None})
    run_id, _ = run_toy(db, tmp, cfg, script=one_word_per_line)
    # a teacher adds a heading to the best candidate, then the run goes on
    best = repo.get_run(db, run_id).best_candidate_id
    text = repo.get_candidate(db, best).content["text"]
    send_command(db, run_id, "budget", {"max_metric_calls": 130}, author="teacher")
    send_command(db, run_id, "resume", {}, author="teacher")
    send_command(db, run_id, "edit", {"candidate_id": best, "content": "# the words to know\n" + text},
                 author="teacher", reason="a heading")
    run_optimizer(db, run_id, tmp)
    assert repo.get_run(db, run_id).status == "completed"
    proc, studio = start_studio(tmp, url, worker=False)
    studio.run_id, studio.db = run_id, db
    yield studio
    stop_studio(proc)


def _ready(page):
    page.wait_for_selector('[data-testid="stApp"]')
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000)
    exc = page.locator('[data-testid="stException"]')
    assert exc.count() == 0, exc.first.inner_text()


def _tab(page, name: str):
    # a DOM click: on the candidate page the last tab sits past the tab bar's edge, where
    # Playwright's scroll-then-click waits on live fragments that keep re-rendering the page
    page.get_by_role("tab", name=name).evaluate("el => el.click()")
    page.wait_for_timeout(400)
    return page.get_by_role("tabpanel").filter(visible=True)


def test_explain_shows_the_steps_real_data(studio, page):
    db, run_id = studio.db, studio.run_id
    index = 1
    detail = explain_queries.step_detail(db, run_id, index)
    step, cands = detail["step"], detail["candidates"]
    kids = [cands[c] for c in step["proposal_ids"]]
    page.goto(f"{studio.url}/explain?run={run_id}&step={index}")
    _ready(page)
    page.get_by_role("heading", name="Step explained").wait_for()
    panel = _tab(page, "1 · Parents")
    for pid in step["parent_ids"]:  # data grids draw on a canvas; their cells are in a hidden accessible table
        expect(panel.get_by_text(pid, exact=True).first).to_be_attached()
    shot(page, "teaching-explain-parents")

    panel = _tab(page, "2 · Minibatch")
    keys = kids[0]["minibatch_keys"]
    assert keys and all(panel.get_by_text(re.compile(rf"^{k} · score")).count() for k in keys)

    panel = _tab(page, "3 · Reflection")
    call = detail["lm_calls"][kids[0]["lm_call_id"]]
    first_line = call["messages"][1]["content"].splitlines()[0]
    panel.get_by_text(first_line, exact=False).first.wait_for()
    panel.get_by_text(call["answer"].splitlines()[0], exact=False).first.wait_for()
    shot(page, "teaching-explain-reflection")

    panel = _tab(page, "4 · Proposals")
    table = panel.locator('[data-testid="stDataFrame"]').first
    table.wait_for()
    page.wait_for_timeout(500)
    for k in kids:
        row = panel.locator("tr").filter(has=page.get_by_text(k["id"], exact=True))
        expect(row.first).to_be_attached()
        if k["minibatch_score"] is not None:
            expect(row.first.get_by_text(f"{k['minibatch_score']:g}", exact=True).first).to_be_attached()

    expect(_tab(page, "5 · Acceptance").get_by_text(kids[0]["id"], exact=True).first).to_be_attached()
    panel = _tab(page, "6 · Frontier update")
    panel.get_by_text("Metric calls", exact=True).wait_for()
    assert panel.get_by_text(str(step["metric_calls"]), exact=True).count() >= 1
    page.get_by_text("Runtime model", exact=True).wait_for()
    page.get_by_text(re.compile("LM-bound|evaluator-bound")).first.wait_for()
    shot(page, "teaching-explain-frontier")

    page.get_by_role("button", name="Next step").click()
    expect(page).to_have_url(re.compile(rf"step={index + 1}$"), timeout=30_000)
    _ready(page)
    following = explain_queries.step_detail(db, run_id, index + 1)["step"]["parent_ids"]
    expect(_tab(page, "1 · Parents").get_by_text(following[0], exact=True).first).to_be_attached()


def test_dashboard_links_every_step_to_explain(studio, page):
    page.goto(f"{studio.url}/dashboard?run={studio.run_id}")
    _ready(page)
    page.get_by_role("heading", name="Steps").wait_for()
    n = len(explain_queries.step_indexes(studio.db, studio.run_id))
    page.get_by_role("heading", name="Steps").scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    # link cells are drawn on a canvas; the hidden accessible table holds their URLs
    expect(page.locator("td").filter(has_text=re.compile(rf"/explain\?run={studio.run_id}&step=\d+$"))).to_have_count(n)


def test_playground(studio, page):
    page.goto(f"{studio.url}/playground")
    _ready(page)
    page.get_by_text("Speed-up, async").wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    before = page.get_by_test_id("stMetricValue").nth(0).inner_text()
    slider = page.get_by_role("slider").nth(3)  # LM latency
    slider.focus()
    for _ in range(10):
        slider.press("ArrowRight")
    expect(page.get_by_test_id("stMetricValue").nth(0)).not_to_have_text(before, timeout=30_000)
    _ready(page)
    # latencies that vary: a synchronous step waits for its slowest reflection, and the page says how long
    expect(page.get_by_text("for the slowest of its")).to_have_count(0)
    sync_run = page.get_by_test_id("stMetricValue").nth(0).inner_text()
    spread = page.get_by_role("slider").nth(4)  # LM latency spread
    spread.focus()
    for _ in range(10):
        spread.press("ArrowRight")
    expect(page.get_by_text(re.compile(r"the step waits [\d.]+ s for the slowest of its 4 reflections"))).to_be_visible(
        timeout=30_000)
    expect(page.get_by_test_id("stMetricValue").nth(0)).not_to_have_text(sync_run)  # the sync run takes longer
    _ready(page)
    shot(page, "teaching-playground")


def test_blame_view_credits_the_teachers_edit(studio, page):
    human = next(c for c in repo.list_candidates(studio.db, studio.run_id) if c.origin == "human")
    page.goto(f"{studio.url}/candidate?run={studio.run_id}&candidate={human.id}")
    _ready(page)
    panel = _tab(page, "Who wrote each line")
    panel.get_by_text("a person's edit at step").wait_for()
    expect(panel.get_by_text("# the words to know", exact=True)).to_have_count(1)
    panel.locator('[data-testid="stDataFrame"]').scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    shot(page, "teaching-blame")


@pytest.fixture
def live_studio(worker_studio):
    return worker_studio


def _wait_paused_after(db: Database, run_id: str, steps: int, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not ((run := repo.get_run(db, run_id)).status == "paused" and run.steps_done >= steps):
        assert time.monotonic() < deadline, f"run {run_id} is {run.status} after {run.steps_done} step(s)"
        time.sleep(0.2)


def test_run_one_step_opens_the_new_step(live_studio, browser):
    db = live_studio.db
    run_id = submit_run(db, toy_config(8, name="class demo"), owner="teacher")
    send_command(db, run_id, "step", {}, author="teacher", reason="the first step, before class")
    _wait_paused_after(db, run_id, 1)
    page = new_page(browser, live_studio.url, who="teacher")
    page.goto(f"{live_studio.url}/explain?run={run_id}")
    _ready(page)
    page.get_by_role("heading", name="Step explained").wait_for(timeout=60_000)
    first = explain_queries.step_indexes(db, run_id)[-1]
    page.get_by_role("button", name="Run one step").click(timeout=60_000)
    expect(page).to_have_url(re.compile(rf"step={first + 1}$"), timeout=90_000)
    _ready(page)
    assert repo.get_run(db, run_id).status == "paused"
    step = explain_queries.step_detail(db, run_id, first + 1)["step"]
    assert step["ended_at"] is not None
    shot(page, "teaching-run-one-step")
    panel = _tab(page, "1 · Parents")
    for pid in step["parent_ids"]:
        expect(panel.get_by_text(pid, exact=True).first).to_be_attached()
    page.context.close()
