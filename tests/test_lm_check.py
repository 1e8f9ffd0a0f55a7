"""A run's LMs answer one short request before the run exists (engine/lm/check.py): at submit,
in the Python API and at Start in the studio (a ``check_lm`` job). Each problem is said at its
field — the model, the api_base, the key variable — and nothing is stored. Real requests: an
OpenAI-compatible server of this test on 127.0.0.1, and a port where nothing listens."""

from __future__ import annotations


import pytest

from engine.config import ConfigError, LMConfig
from engine.worker.jobs import JobRunner, request_job
from engine.access import local_actor
from engine.lm.check import run_lm_problems
from engine.lm.client import LMClient
from storage import jobs, repo
from tests.support import toy
from tests.support.harness import toy_config
from tests.support.scripted_lm import install_script
from tests.support.lm_server import _Server, _closed_port


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.stop()


def _cfg(**lms):
    return toy_config(4, **{name: lm for name, lm in lms.items()})


def test_each_lm_is_asked_once_and_each_problem_is_said_at_its_field(server, monkeypatch, tmp_path):
    monkeypatch.delenv("NOT_SET_ANYWHERE_API_KEY", raising=False)
    good = {"model": "openai/good", "api_base": server.api_base}
    client = LMClient(tmp_path / "cache")
    assert run_lm_problems(_cfg(reflection_lm=good, task_lm=good), client) == []
    assert server.requests == ["good"]  # the same settings: asked once
    problems = run_lm_problems(_cfg(
        reflection_lm=good,
        task_lm={"model": "openai/gpt-4.1-mnii", "api_base": server.api_base},  # a typo in the model
        judge_lm={"model": "openai/good", "api_base": f"http://127.0.0.1:{_closed_port()}/v1"}), client)
    assert len(problems) == 2, problems
    assert problems[0].startswith("task_lm.model: 'openai/gpt-4.1-mnii' did not answer: ") and "does not exist" in problems[0]
    assert problems[1].startswith("judge_lm.api_base: nothing answers at http://127.0.0.1:")
    assert all("\n" not in p for p in problems)  # one line each: the form puts each under its field
    # without a request: an address without its scheme, a key variable that is not set
    problems = run_lm_problems(_cfg(reflection_lm={"model": "openai/good", "api_base": "127.0.0.1:8000/v1"},
                                    task_lm={"model": "openai/good", "api_base": server.api_base,
                                             "api_key_env": "NOT_SET_ANYWHERE_API_KEY"}), client)
    assert problems[0].startswith("reflection_lm.api_base: '127.0.0.1:8000/v1' needs http:// or https://")
    assert problems[1].startswith("task_lm.api_key_env: the environment variable NOT_SET_ANYWHERE_API_KEY")
    assert sorted(server.requests) == ["good", "good", "gpt-4.1-mnii"]  # none for the last two


def test_lms_served_in_this_process_are_not_asked(tmp_path):
    stats = install_script(toy.script)
    assert run_lm_problems(toy_config(4), LMClient(tmp_path / "cache")) == []
    assert stats.calls == []


def test_a_refused_connection_is_a_connection_error_not_a_5xx(tmp_path):
    res = LMClient(tmp_path / "cache").complete(
        LMConfig(model="openai/any", api_base=f"http://127.0.0.1:{_closed_port()}/v1", num_retries=0),
        [{"role": "user", "content": "hi"}], use_cache=False)
    assert res.error_kind == "connection", res.error


def test_the_python_api_refuses_a_run_whose_lm_does_not_answer(sqlite_db):
    from engine import optimize_anything

    with pytest.raises(ConfigError, match=r"^reflection_lm\.api_base: nothing answers at http://127\.0\.0\.1:"):
        optimize_anything("start", evaluator=lambda c, e: 1.0, dataset=toy.dataset(4), db=sqlite_db.url, progress=False,
                          config={"reflection_lm": {"model": "openai/any",
                                                    "api_base": f"http://127.0.0.1:{_closed_port()}/v1"}})
    assert repo.list_runs(sqlite_db) == []


def test_the_studios_start_check_is_a_job_that_answers_at_the_fields(sqlite_db, server):
    """What Start asks the engine worker before it creates a run: the run's LMs, checked."""
    db = sqlite_db
    cfg = toy_config(4, reflection_lm={"model": "openai/good", "api_base": server.api_base},
                     task_lm={"model": "openai/nope", "api_base": server.api_base})
    job = request_job(db, "check_lm", {"config": cfg.stored()}, local_actor("ana"))
    assert JobRunner(db, "w").run_once() == job
    result = jobs.job_view(db, job)["result"]
    assert not result["ok"] and len(result["problems"]) == 1
    assert result["problems"][0].startswith("task_lm.model: 'openai/nope' did not answer")
    assert repo.list_runs(db) == []
