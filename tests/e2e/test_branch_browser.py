"""Branch from here, in a real browser against a real engine (the supervised worker, the toy task,
the scripted LM): from a finished run's candidate page to a running branch in two clicks, the
New run form filled with the branch on the way, and no evaluation of the base run paid twice.

Screenshots at 1440×900 go to test-artifacts/ (branch-*.png).
"""

from __future__ import annotations

import re

import pytest

from engine.runs import submit_run
from storage import branches, repo
from tests.support import toy
from tests.support.harness import paid_twice, toy_config

from .conftest import by_key, new_page, ready, shot, until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
TEST = [{"id": f"te{i}", "word": w} for i, w in enumerate(toy.WORDS[:8])]


def test_branch_from_here_to_a_running_branch_in_two_clicks(worker_studio, browser):
    db, url = worker_studio.db, worker_studio.url
    cfg = toy_config(8, name="branch base", testset=TEST, budget={"max_steps": 1, "stop_at_score": None})
    base_id = submit_run(db, cfg, owner="ana")
    base = until(lambda: (r := repo.get_run(db, base_id)).status == "completed" and r, "the base run to end", 90)
    page = new_page(browser, url, who="ana")
    page.goto(f"{url}/candidate?run={base_id}&candidate={base.best_candidate_id}")
    ready(page)

    clicks = 0
    by_key(page, "branch_send_candidate").get_by_role("button").click()
    clicks += 1
    page.wait_for_url(re.compile(r"/new"), timeout=60_000)
    ready(page)
    page.get_by_text(f"A branch of run {base_id}").wait_for()
    seed = by_key(page, "new_seed_text").locator("textarea")
    assert seed.input_value() == repo.get_candidate(db, base.best_candidate_id).content["text"]
    shot(page, "branch-form")
    by_key(page, "new_submit").get_by_role("button").click()
    clicks += 1
    page.wait_for_url(re.compile(r"/dashboard\?run="), timeout=60_000)
    branch_id = re.search(r"run=(\w+)", page.url).group(1)
    branch = repo.get_run(db, branch_id)
    assert branch_id != base_id and branch.branch_of == base_id and branch.owner == "ana"
    until(lambda: repo.get_run(db, branch_id).status in ("running", "completed"), "the branch to run", 90)
    assert clicks <= 3
    ready(page)
    page.get_by_text(f"A branch of run {base_id}").first.wait_for()
    until(lambda: repo.get_run(db, branch_id).status == "completed", "the branch to end (one step, as its base)", 90)
    assert paid_twice(db, base_id, branch_id) == 0 and sum(branches.reused_counts(db, branch_id).values()) >= 8
    page.reload()
    ready(page)
    page.get_by_text(re.compile(r"[1-9]\d* evaluation\(s\) reused from it, not charged")).wait_for()
    shot(page, "branch-dashboard")
