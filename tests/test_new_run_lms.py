"""The New run form's LMs: the task LM and the judge are "the same as the reflection LM" (its
model, API base and key variable) or have their own; Start asks every LM one short request (a
job the engine worker runs) and creates the run only when they answered, each problem shown
under its field; a try that failed because the task LM did not answer says so at the task LM.
The LMs are real OpenAI-compatible requests to a server of this test on 127.0.0.1."""

from __future__ import annotations

import pytest

import engine  # noqa: F401  first: offline price map
from engine.worker.jobs import JobRunner
from engine.lm.params import evaluator_lm
from storage import repo
from tests.support.studio import open_page, studio_database
from tests.support.lm_server import _Server, _closed_port
from ui import form_carry, keys as K, lm_form, run_form


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.stop()


def _prompt_draft(**over) -> dict:
    d = run_form.default_draft("openai/good")
    d.update({K.NEW_NAME: "tickets", K.NEW_SEED_TEXT: "Route the ticket.", K.NEW_EVAL_KIND: "prompt",
              K.NEW_PROMPT_USER: "Ticket: {text}", K.NEW_DATA_SOURCE: run_form.DATA_SOURCES[2],
              K.NEW_DATA_TEXT: '{"text": "my card was charged twice", "label": "billing"}\n' * 4,
              K.NEW_API_BASE: "http://127.0.0.1:8000/v1", K.NEW_API_KEY_ENV: "MY_SERVER_API_KEY", **over})
    return d


def test_the_task_lm_is_the_reflection_lm_with_its_address_and_key_unless_it_has_its_own():
    cfg, errors = run_form.validate(_prompt_draft())
    assert not errors and cfg.task_lm is None and cfg.judge_lm is None
    task, purpose = evaluator_lm(cfg, None, {})  # what the generated evaluator's lm() reaches
    assert (task.model, task.api_base, task.api_key_env, purpose) == ("openai/good", "http://127.0.0.1:8000/v1",
                                                                       "MY_SERVER_API_KEY", "task")
    own = _prompt_draft(**{K.NEW_TASK_SAME: False, K.NEW_TASK_MODEL: "openai/small", K.NEW_TASK_API_BASE: "http://h:1/v1",
                           K.NEW_JUDGE_SAME: False, K.NEW_JUDGE_MODEL: "openai/judge"})
    cfg, errors = run_form.validate(own)
    assert not errors
    assert (cfg.task_lm.model, cfg.task_lm.api_base, cfg.task_lm.api_key_env) == ("openai/small", "http://h:1/v1", None)
    assert evaluator_lm(cfg, "judge", {})[0].model == "openai/judge"
    # and back: a loaded config (an example, a duplicated run) fills the same fields
    back = run_form.draft_from_config(cfg.stored(), "x")
    assert (back[K.NEW_TASK_SAME], back[K.NEW_TASK_API_BASE], back[K.NEW_JUDGE_SAME]) == (False, "http://h:1/v1", False)
    assert run_form.draft_from_config(run_form.validate(_prompt_draft())[0].stored(), "x")[K.NEW_TASK_SAME] is True
    # an LM the form edits is never listed as carried
    assert "task_lm" not in form_carry.carried(cfg.stored()) and "judge_lm" not in form_carry.carried(cfg.stored())


def test_a_draft_saved_before_the_toggle_keeps_its_own_task_model():
    old = {K.NEW_MODEL: "openai/good", K.NEW_TASK_MODEL: "openai/other"}
    assert lm_form.upgraded_draft(old)[K.NEW_TASK_SAME] is False
    assert lm_form.upgraded_draft({K.NEW_MODEL: "m", K.NEW_TASK_MODEL: "m"})[K.NEW_TASK_SAME] is True


def _form(tmp_path, monkeypatch, draft: dict):
    """The New run page holding ``draft``, as if typed in."""
    db = studio_database(tmp_path, monkeypatch)
    at = open_page("pages/new_run.py")
    for key, value in draft.items():
        if key != K.NEW_COMPONENTS:
            at.session_state[key] = value
    at.run()
    return db, at


def test_start_asks_the_lms_then_creates_the_run_or_says_why_not_under_the_field(tmp_path, monkeypatch, server):
    draft = _prompt_draft(**{K.NEW_MODEL: "openai/good", K.NEW_API_BASE: server.api_base, K.NEW_API_KEY_ENV: "",
                             K.NEW_TASK_SAME: False, K.NEW_TASK_MODEL: "openai/good",
                             K.NEW_TASK_API_BASE: f"http://127.0.0.1:{_closed_port()}/v1"})
    db, at = _form(tmp_path, monkeypatch, draft)
    assert at.toggle(key=K.NEW_TASK_SAME).value is False and at.text_input(key=K.NEW_TASK_API_BASE).value
    at.button(key=K.NEW_SUBMIT).click().run()
    assert any("Asking each LM of the run one short question" in i.value for i in at.info)
    assert repo.list_runs(db) == []  # nothing yet: the engine worker asks them first
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    assert repo.list_runs(db) == []
    (shown,) = [e.value for e in at.error if e.value.startswith("nothing answers at")]
    assert "start the server there" in shown
    assert any(e.value.startswith("Not started: 1 problem(s)") and "task LM's API base" in e.value for e in at.error)
    # fixed: the task LM is the reflection LM again, which answers
    at.toggle(key=K.NEW_TASK_SAME).set_value(True).run()
    assert not [e.value for e in at.error if e.value.startswith("nothing answers at")]  # the message went with the change
    at.button(key=K.NEW_SUBMIT).click().run()
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    (run,) = repo.list_runs(db)
    assert run.config["reflection_lm"]["api_base"] == server.api_base and run.config["task_lm"] is None
    assert "good" in server.requests


def test_a_preview_whose_task_lm_did_not_answer_refuses_start_at_the_task_lm(tmp_path, monkeypatch):
    closed = f"http://127.0.0.1:{_closed_port()}/v1"
    draft = _prompt_draft(**{K.NEW_TASK_SAME: False, K.NEW_TASK_MODEL: "openai/good", K.NEW_TASK_API_BASE: closed,
                             K.NEW_API_KEY_ENV: ""})
    db, at = _form(tmp_path, monkeypatch, draft)
    at.button(key=K.NEW_PREVIEW).click().run()
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    at.button(key=K.NEW_SUBMIT).click().run()
    refusal = [e.value for e in at.error if e.value.startswith("Not started: the task LM did not answer")]
    assert refusal and "The evaluator is fine" in refusal[0] and "Connection error" in refusal[0], [e.value for e in at.error]
    assert repo.list_runs(db) == []
