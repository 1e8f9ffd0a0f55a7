"""Steering from the studio (issue 5): the page logic with AppTest, the pure helpers, and the
engine continuing a finished run after "budget + resume" sent the way the studio sends them.

Every command the studio sends must arrive as a Command row through ``send_command`` (author =
the sidebar name, reason, payload), refusals must show next to the control, and nothing is
written when the input is bad.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine.access import local_actor
from storage import leases, queries, repo
from storage.db import Database
from storage.models import Candidate, Evaluation
from tests.support.synthetic import generate_run
from tests.support.synthetic_live import rescored
from tests.support.studio import open_page, studio_database
from ui import interventions as iv, keys as K, submission

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 60


@pytest.fixture
def studio(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    live = generate_run(db, n_candidates=30, n_val=8, n_train=10, status="running", name="Live")
    done = generate_run(db, n_candidates=30, n_val=8, n_train=10, seed=3, name="Done")
    return db, live, done



def _button(at: AppTest, base_key: str):
    """A command control, found by its base key (its widget key carries the submission token)."""
    found = [b for b in at.button if str(b.key).split(submission.SEP)[0] == base_key]
    assert len(found) == 1, (base_key, [b.key for b in at.button])
    return found[0]


def _commands(db: Database, run_id: str) -> list:
    return repo.list_commands(db, run_id)


def _accepted(db: Database, run_id: str) -> list[Candidate]:
    return [c for c in repo.list_candidates(db, run_id, ["accepted"]) if not c.vetoed]


def _alerts(at: AppTest) -> str:
    return "\n".join([e.value for e in at.error] + [s.value for s in at.success] + [i.value for i in at.info]
                     + [c.value for c in at.caption])


# ---------------------------------------------------------------- dashboard


def test_pause_step_resume_from_the_dashboard(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", run=live)
    assert not _button(at, K.RUN_PAUSE).disabled
    assert _button(at, K.RUN_RESUME).disabled  # a running run cannot be resumed
    at.text_input(key=K.RUN_REASON).set_value("lunch")
    _button(at, K.RUN_PAUSE).click().run()
    cmds = _commands(db, live)
    new = [c for c in cmds if c.kind == "pause" and c.status == "pending"]
    assert len(new) == 1 and new[0].author == "ana" and new[0].reason == "lunch"
    assert "pause queued" in _alerts(at)
    assert "1 command(s) pending" in _alerts(at) and "no engine worker is running" in _alerts(at)
    _button(at, K.RUN_STEP).click().run()
    assert [c.kind for c in _commands(db, live) if c.status == "pending"] == ["pause", "step"]


def test_stop_asks_for_confirmation(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", run=live)
    before = len(_commands(db, live))
    assert not [b for b in at.button if str(b.key).startswith(K.RUN_STOP_CONFIRM)]
    at.button(key=K.RUN_STOP).click().run()  # asks first, in the page (not a popover a refresh can close)
    assert at.button(key=K.RUN_STOP).disabled and len(_commands(db, live)) == before
    at.button(key=K.RUN_STOP_CANCEL).click().run()
    assert not [b for b in at.button if str(b.key).startswith(K.RUN_STOP_CONFIRM)]
    at.button(key=K.RUN_STOP).click().run()
    _button(at, K.RUN_STOP_CONFIRM).click().run()
    cmds = _commands(db, live)
    assert len(cmds) == before + 1 and cmds[-1].kind == "stop" and cmds[-1].author == "ana"
    assert not [b for b in at.button if str(b.key).startswith(K.RUN_STOP_CONFIRM)]  # asked and answered: gone


def test_without_a_name_nothing_can_be_sent(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", who="", run=live)
    assert _button(at, K.RUN_PAUSE).disabled
    assert iv.NO_NAME in _alerts(at)


def test_budget_of_a_live_run(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", run=live)
    at.number_input(key=K.RUN_BUDGET_FIELD.format(run=live, name="max_metric_calls")).set_value(9999)
    _button(at, K.RUN_BUDGET_SEND).click().run()
    cmd = _commands(db, live)[-1]
    assert cmd.kind == "budget" and cmd.payload["max_metric_calls"] == 9999 and cmd.author == "ana"


def test_continue_a_finished_run_needs_a_larger_budget(studio):
    db, _, done = studio
    at = open_page("pages/dashboard.py", run=done)
    assert _button(at, K.RUN_PAUSE).disabled and "continue it with a new budget" in _alerts(at)
    used = repo.get_run(db, done).metric_calls
    field = at.number_input(key=K.RUN_BUDGET_FIELD.format(run=done, name="max_metric_calls"))
    assert field.value > used  # suggested: the same allowance again
    before = len(_commands(db, done))
    field.set_value(used)
    _button(at, K.RUN_BUDGET_SEND).click().run()
    assert "already used" in _alerts(at) and len(_commands(db, done)) == before  # refused, nothing written
    at.number_input(key=K.RUN_BUDGET_FIELD.format(run=done, name="max_metric_calls")).set_value(used + 50)
    _button(at, K.RUN_BUDGET_SEND).click().run()
    assert [c.kind for c in _commands(db, done)[before:]] == ["budget", "resume"]


def test_command_log_and_steps_table(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", run=live)
    frames = [d.value for d in at.dataframe]
    log = next(f for f in frames if "applied at step" in getattr(f, "columns", []))
    assert {"who", "when", "why", "status", "result"} <= set(log.columns)
    steps = next(f for f in frames if "parents (why chosen)" in getattr(f, "columns", []))
    assert steps["step"].is_monotonic_decreasing and {"predicted ×", "measured ×"} <= set(steps.columns)


# ---------------------------------------------------------------- candidate page


def _candidate(db: Database, run_id: str) -> Candidate:
    return next(c for c in _accepted(db, run_id) if c.origin != "seed")


def test_pin_and_veto_from_the_candidate_page(studio):
    db, live, _ = studio
    cand = _candidate(db, live)
    at = open_page("pages/candidate.py", run=live, candidate=cand.id)
    at.text_input(key=K.CAND_REASON).set_value("promising")
    _button(at, K.CAND_PIN).click().run()
    pin = _commands(db, live)[-1]
    assert (pin.kind, pin.payload, pin.author, pin.reason) == ("pin", {"candidate_id": cand.id}, "ana", "promising")
    _button(at, K.CAND_VETO).click().run()
    assert _commands(db, live)[-1].kind == "veto"
    assert "pending" in _alerts(at)  # the commands about it, live


def test_vetoing_the_last_eligible_parent_is_refused_next_to_the_button(studio):
    db, live, _ = studio
    keep = _accepted(db, live)[0]
    for c in _accepted(db, live)[1:]:
        repo.update_candidate(db, c.id, vetoed=True)
    at = open_page("pages/candidate.py", run=live, candidate=keep.id)
    before = len(_commands(db, live))
    _button(at, K.CAND_VETO).click().run()
    assert any("last candidate that can be a parent" in e.value for e in at.error)
    assert len(_commands(db, live)) == before


def test_edit_is_checked_at_its_fields_then_sent_per_component(studio):
    db, live, _ = studio
    cand = _candidate(db, live)
    names = list(cand.content)
    assert len(names) == 2  # the synthetic run has two components
    at = open_page("pages/candidate.py", run=live, candidate=cand.id)
    before = len(_commands(db, live))
    # unchanged: refused
    at.text_input(key=K.EDIT_REASON.format(cand=cand.id)).set_value("why not")
    _button(at, K.EDIT_SEND).click().run()
    assert any("Nothing changed" in e.value for e in at.error)
    # one component emptied: refused at that field
    at.text_area(key=K.EDIT_TEXT.format(cand=cand.id, i=0)).set_value("   ")
    _button(at, K.EDIT_SEND).click().run()
    assert any("This component is empty" in e.value for e in at.error)
    assert len(_commands(db, live)) == before
    # a real change without a reason: refused at the reason
    at.text_area(key=K.EDIT_TEXT.format(cand=cand.id, i=0)).set_value("Be brief.")
    at.text_input(key=K.EDIT_REASON.format(cand=cand.id)).set_value("")
    at.run()
    assert any(c.language == "diff" and "+Be brief." in c.value for c in at.code)  # the diff preview
    _button(at, K.EDIT_SEND).click().run()
    assert any("Say why" in e.value for e in at.error) and len(_commands(db, live)) == before
    at.text_input(key=K.EDIT_REASON.format(cand=cand.id)).set_value("shorter")
    _button(at, K.EDIT_SEND).click().run()
    cmd = _commands(db, live)[-1]
    assert cmd.kind == "edit" and cmd.author == "ana" and cmd.reason == "shorter"
    assert cmd.payload == {"candidate_id": cand.id, "content": {names[0]: "Be brief.", names[1]: cand.content[names[1]]}}
    assert at.text_area(key=K.EDIT_TEXT.format(cand=cand.id, i=0)).value == cand.content[names[0]]  # editor reset


def test_editing_a_candidate_of_a_finished_run_continues_the_run(studio):
    db, _, done = studio
    cand = _candidate(db, done)
    at = open_page("pages/candidate.py", run=done, candidate=cand.id)
    assert _button(at, K.CAND_PIN).disabled  # pins steer a running search
    at.text_area(key=K.EDIT_TEXT.format(cand=cand.id, i=1)).set_value("Q: 1+1? A: 2")
    at.text_input(key=K.EDIT_REASON.format(cand=cand.id)).set_value("simpler example")
    _button(at, K.EDIT_CONTINUE).click().run()
    cmds = _commands(db, done)
    assert [c.kind for c in cmds[-3:]] == ["budget", "resume", "edit"]
    assert cmds[-1].payload["content"][list(cand.content)[1]] == "Q: 1+1? A: 2"
    assert any("the engine continues the run" in s.value for s in at.success)


def test_feedback_comment_and_inject(studio):
    db, live, _ = studio
    cand = _candidate(db, live)
    at = open_page("pages/candidate.py", run=live, candidate=cand.id)
    _button(at, K.FEEDBACK_SEND).click().run()
    assert any("feedback is empty" in e.value for e in at.error)
    at.text_area(key=K.FEEDBACK_TEXT.format(cand=cand.id)).set_value("too verbose; keep the JSON format")
    _button(at, K.FEEDBACK_SEND).click().run()
    fb = _commands(db, live)[-1]
    assert fb.kind == "feedback" and fb.payload["text"] == "too verbose; keep the JSON format"
    assert any("too verbose" in t.value for t in at.text)  # shown in the thread as pending feedback
    at.text_area(key=K.COMMENT_TEXT.format(cand=cand.id)).set_value("<b>looks good</b>")
    _button(at, K.COMMENT_SEND).click().run()
    comments = repo.list_comments(db, live, cand.id)
    assert comments[-1].author == "ana" and comments[-1].text == "<b>looks good</b>"
    assert any(t.value == "<b>looks good</b>" for t in at.text)  # as text, not HTML
    at.text_area(key=K.INJECT_TEXT.format(run=live, i=0)).set_value("You are terse.")
    _button(at, K.INJECT_SEND).click().run()
    assert any("This component is empty" in e.value for e in at.error)  # the second component is missing
    at.text_area(key=K.INJECT_TEXT.format(run=live, i=1)).set_value("Q: 3+3? A: 6")
    _button(at, K.INJECT_SEND).click().run()
    inj = _commands(db, live)[-1]
    assert inj.kind == "inject" and set(inj.payload["content"]) == set(cand.content)


def test_unknown_ids_in_the_url(studio):
    _, live, _ = studio
    at = open_page("pages/candidate.py", run="rnope", candidate="cnope")
    assert any("no run with id" in e.value for e in at.error)
    at = open_page("pages/candidate.py", run=live, candidate="cnope")
    assert any("has no candidate" in w.value for w in at.warning)
    at = open_page("pages/lineage.py", run="rnope")
    assert any("no run with id" in e.value for e in at.error)


# ---------------------------------------------------------------- pure helpers


def test_check_edit_and_payloads():
    assert iv.check_edit({"text": "a"}, {"text": "a"}) == {iv.ALL: "Nothing changed: edit the text before sending."}
    assert "text" in iv.check_edit({"text": "a"}, {"text": "  "})
    assert iv.check_edit({"text": "a"}, {"text": "b"}) == {}
    assert iv.check_edit({}, {"x": "b"}, need_change=False) == {}
    assert iv.content_payload({"text": "b"}) == "b"
    assert iv.content_payload({"a": "1", "b": "2"}) == {"a": "1", "b": "2"}
    assert "+b" in iv.diff_text("a", "b", "text")
    assert iv.budget_payload({"max_metric_calls": 10, "max_cost_usd": 0}) == {
        "max_metric_calls": 10, "max_cost_usd": None, "max_seconds": None, "stop_at_score": None, "max_steps": None}


def test_budget_problems_and_suggestion():
    run = {"metric_calls": 100, "cost_usd": 0.5, "seconds": 30.0, "steps_done": 4, "best_val_mean": 0.9,
           "config": {"budget": {"max_metric_calls": 100, "stop_at_score": 0.9}}}
    assert iv.suggested_budget(run)["max_metric_calls"] == 200 and iv.suggested_budget(run)["stop_at_score"] is None
    assert iv.budget_problems(run, iv.budget_payload(iv.suggested_budget(run))) == []
    problems = iv.budget_problems(run, iv.budget_payload({"max_metric_calls": 100, "stop_at_score": 0.8}))
    assert any("already used 100 metric calls" in p for p in problems) and any("stop-at-score" in p for p in problems)
    assert iv.budget_problems(run, iv.budget_payload({}))[-1].startswith("Set at least one limit")


def test_degenerate_members_are_those_of_analyze():
    cands = pd.DataFrame({"id": ["s", "a", "b", "c", "h"], "origin": ["seed"] + ["reflection"] * 4,
                          "val_mean": [0.5, 0.25, 0.75, 0.25, 0.5], "vetoed": [False, False, False, True, False]})
    matrix = pd.DataFrame({"v0": [1.0, 0.0, 1.0, 0.0, 0.5], "v1": [0.0, 0.5, 1.0, 0.5, 0.5],
                           "v2": [0.5, 0.25, 0.25, 0.25, 0.5], "v3": [0.5, 0.25, 0.75, 0.25, 0.5]},
                          index=["s", "a", "b", "c", "h"])
    weak = iv.degenerate_members(cands, matrix, ["a", "b", "h"])
    # h: 0.5 everywhere, best on v2 and v3 only by answering alike; a: best nowhere; c: already vetoed
    assert list(weak["id"]) == ["h"] and weak["why"].iloc[0] == "the same score on every example"
    assert weak["seed_mean"].iloc[0] == 0.5


def test_step_rows_say_why_each_parent_was_chosen(studio):
    db, live, _ = studio
    steps = queries.step_rows(db, live)
    table = iv.step_rows(steps.assign(parent_reasons=[{p: "pinned (every 3 steps)" for p in ps}
                                                      for ps in steps["parent_ids"]],
                                      applied_command_ids=[[1]] + [[]] * (len(steps) - 1)),
                         pd.DataFrame({"id": [1], "kind": ["pin"]}))
    assert "pinned (every 3 steps)" in table["parents (why chosen)"].iloc[0]
    assert table.iloc[-1]["commands applied"] == "#1 pin"


# ---------------------------------------------------------------- the engine continues a finished run


def test_budget_resume_and_edit_continue_a_finished_run(sqlite_db, tmp_path):
    from tests.support.harness import run_optimizer, run_toy, toy_config

    db = sqlite_db
    run_id, _ = run_toy(db, tmp_path, toy_config(budget={"max_steps": 1, "stop_at_score": None}))
    run = queries.run_overview(db, run_id)
    assert run["status"] == "completed" and run["steps_done"] == 1
    best = run["best_candidate_id"]
    # the studio's sequence: a new budget, a resume, then the edit (allowed because a resume is queued)
    out = iv.continue_run(db, run, iv.budget_payload({"max_steps": 2}), local_actor("ana"),
                          then=("edit", {"candidate_id": best, "content": "alpha bravo charlie"}, "seed it"))
    assert out.ok, out.message
    assert leases.claim_run(db, "other", 60) == run_id  # a worker picks the finished run up
    leases.release_run(db, run_id, "other")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    after = repo.get_run(db, run_id)
    assert after.steps_done == 2 and after.finished_at is not None
    assert [c.status for c in repo.list_commands(db, run_id)] == ["applied"] * 3
    human = [c for c in repo.list_candidates(db, run_id) if c.origin == "human"]
    assert len(human) == 1 and human[0].parent_ids == [best] and human[0].author == "ana"
    assert human[0].reason == "seed it" and human[0].val_mean is not None


def test_candidate_live_state_is_three_statements(studio):
    from sqlalchemy import event

    db, live, _ = studio
    cand = _candidate(db, live)
    send_ids = iv.send(db, live, "pin", {"candidate_id": cand.id}, local_actor("ana"), "x").command_ids
    repo.add_comment(db, live, cand.id, "bob", "nice")
    seen = []
    listener = lambda *a: seen.append(a[2]) if not a[2].lstrip().upper().startswith(("BEGIN", "PRAGMA")) else None
    event.listen(db.reader, "before_cursor_execute", listener)
    try:
        state = queries.candidate_live(db, live, cand.id)
    finally:
        event.remove(db.reader, "before_cursor_execute", listener)
    assert len(seen) == 3
    assert state["run_status"] == "running" and state["candidate"]["id"] == cand.id
    assert [c["id"] for c in state["commands"]] == list(send_ids) and state["comments"][-1]["text"] == "nice"
    assert queries.candidate_live(db, live, "cnope") is None


def test_degenerate_frontier_member_is_one_click_from_a_veto(studio):
    from ui import analysis

    db, live, _ = studio
    front = analysis.frontier(queries.val_scores(db, live), queries.candidate_rows(db, live))
    seed = next(c for c in repo.list_candidates(db, live) if c.origin == "seed")
    weak = next(m for m in front.members if m != seed.id)
    _lower_everywhere_but_one(db, live, weak)  # best somewhere, worse than the seed on average
    at = open_page("pages/dashboard.py", run=live)
    assert any("degenerate frontier member" in w.value for w in at.warning)
    _button(at, K.DEGENERATE_VETO.format(cand=weak)).click().run()
    cmd = _commands(db, live)[-1]
    assert (cmd.kind, cmd.payload, cmd.author) == ("veto", {"candidate_id": weak}, "ana")
    assert cmd.reason.startswith("degenerate frontier member: below the seed on average (mean")


def _lower_everywhere_but_one(db: Database, run_id: str, cand_id: str) -> None:
    """Its validation scores 0 on every example but one where it holds the best (a frontier member)."""
    from sqlmodel import select

    with db.write() as s:
        evs = [e for e in s.exec(select(Evaluation).where(Evaluation.candidate_id == cand_id))]
        keep = max(evs, key=lambda e: e.score)
        for e in evs:
            if e.id != keep.id:
                e.score = 0.0
                s.add(e)
    rescored(db, run_id)  # its mean and the frontier as the engine would have recorded them


def test_a_queued_note_becomes_the_commands_fate_once_the_engine_applied_it(studio):
    db, live, _ = studio
    at = open_page("pages/dashboard.py", run=live)
    _button(at, K.RUN_PAUSE).click().run()
    cmd = next(c for c in _commands(db, live) if c.kind == "pause")
    assert "pause queued" in _alerts(at)
    repo.finish_command(db, cmd.id, "applied", "run paused", 3)  # what the engine does at the boundary
    import streamlit as st

    st.cache_data.clear()  # the command log as it is now
    at.run()
    assert "pause queued" not in _alerts(at) and f"pause applied (command {cmd.id}): run paused" in _alerts(at)


def test_a_paused_runs_lm_settings_are_changed_from_the_dashboard(studio):
    db, live, _ = studio
    repo.transition_run(db, live, "paused", "paused: the reflection LM failed 5 times in a row (…). Fix the LM settings")
    at = open_page("pages/dashboard.py", run=live)
    field = at.text_input(key=K.RUN_LM_FIELD.format(run=live, section="reflection_lm", name="api_base"))
    field.set_value("http://127.0.0.1:8000/v1")
    _button(at, K.RUN_LM_SEND).click().run()
    cmd = _commands(db, live)[-1]
    assert (cmd.kind, cmd.author, cmd.payload) == ("lm", "ana", {"reflection_lm": {"api_base": "http://127.0.0.1:8000/v1"}})
    assert "lm queued" in _alerts(at)
    repo.finish_command(db, cmd.id, "rejected", "refused, the LM did not answer: reflection_lm.api_base: nothing answers", 3)
    import streamlit as st

    st.cache_data.clear()  # the command log as it is now
    at.run()
    assert f"lm rejected (command {cmd.id}): refused, the LM did not answer" in _alerts(at)
    # a running run has no such editor: its step keeps the settings it started with
    repo.transition_run(db, live, "running", "")
    st.cache_data.clear()
    at = open_page("pages/dashboard.py", run=live)
    assert not [t for t in at.text_input if str(t.key).startswith("steer_lm_")]
