"""Secrets stay with their server (issue 30, item 1): a run's config may name as an LM's key only a
variable the deployment allows (``REFRACT_API_KEYS``, default ``*_API_KEY``, never ``REFRACT_*``),
and a key tied to servers goes only there. Refused at submit, in the studio's form, in the Python
API and by the connection test, with ``<lm>.api_key_env: reason`` and no run created; the LM client
refuses too, so a config that reached the database another way sends nothing. The server is a real
OpenAI-compatible one that records the ``Authorization`` header it receives."""

from __future__ import annotations

import pytest

from engine import cli
from engine.config import ConfigError, LMConfig
from engine.lm.client import NO_KEY, LMClient
from engine.lm.keys import SETTING, bases_for, key_refusal
from tests.support.fault_server import FaultServer
from tests.support.harness import toy_project
from tests.support.snapshot import _snapshot

DB_SECRET = "postgresql+psycopg://refract:db-password-never-sent@db.internal/refract"
KEY_SECRET = "sk-spy-key-5e1f"
MESSAGES = [{"role": "system", "content": "You improve texts."}, {"role": "user", "content": "Say ok."}]


@pytest.fixture
def server():
    srv = FaultServer(rate=0.0).start()
    yield srv
    srv.stop()


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("REFRACT_DB_SECRET_FOR_TEST", DB_SECRET)
    monkeypatch.setenv("SPY_API_KEY", KEY_SECRET)
    monkeypatch.delenv(SETTING, raising=False)
    return monkeypatch


# ---------------------------------------------------------------- the rule


def test_the_default_allows_api_keys_and_never_the_engines_own_settings():
    env: dict = {}
    assert key_refusal("OPENAI_API_KEY", "http://anywhere/v1", env) is None
    assert key_refusal(None, "http://anywhere/v1", env) is None
    assert "one of the engine's own settings" in key_refusal("REFRACT_DB", None, env)
    assert "not an API key this deployment allows (allowed: *_API_KEY)" in key_refusal("HOME", None, env)
    # not even when the list says so
    assert "engine's own settings" in key_refusal("REFRACT_DB", None, {SETTING: "REFRACT_DB, *"})
    assert key_refusal("HOME", None, {SETTING: "*"}) is None


def test_a_key_tied_to_servers_goes_only_there():
    env = {SETTING: "VLLM_API_KEY=http://10.0.0.7:8000/v1 VLLM_API_KEY=http://10.0.0.8:8000/v1/, *_API_KEY"}
    assert key_refusal("VLLM_API_KEY", "http://10.0.0.8:8000/v1", env) is None  # a trailing / is the same URL
    assert key_refusal("VLLM_API_KEY", "http://10.0.0.7:8000/v1/", env) is None
    why = key_refusal("VLLM_API_KEY", "http://evil.example/v1", env)
    assert why.startswith("VLLM_API_KEY may only be sent to http://10.0.0.7:8000/v1 or http://10.0.0.8:8000/v1")
    assert "not to api_base http://evil.example/v1" in why
    assert "not to no api_base" in key_refusal("VLLM_API_KEY", None, env)  # litellm's default server is not assumed
    assert key_refusal("OPENAI_API_KEY", "http://evil.example/v1", env) is None  # the pattern: any server
    assert bases_for("VLLM_API_KEY", env) == ["http://10.0.0.7:8000/v1", "http://10.0.0.8:8000/v1"]


def test_the_default_model_goes_to_the_one_server_its_key_is_tied_to(monkeypatch):
    from engine.lm.defaults import PROVIDER_DEFAULTS, default_lm_config

    for env, _ in PROVIDER_DEFAULTS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.delenv("REFRACT_LM_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv(SETTING, "OPENAI_API_KEY=https://api.openai.com/v1")
    cfg = default_lm_config()
    assert (cfg.api_key_env, cfg.api_base) == ("OPENAI_API_KEY", "https://api.openai.com/v1")
    assert key_refusal(cfg.api_key_env, cfg.api_base) is None


# ---------------------------------------------------------------- where a run is made


LM_TABLES = {
    "reflection_lm": ('[reflection_lm]\nmodel = "scripted/toy"\napi_base = "{base}"\napi_key_env = "{env}"\n'),
    "task_lm": ('[reflection_lm]\nmodel = "scripted/toy"\n[task_lm]\nmodel = "openai/gpt-4.1-mini"\n'
                'api_base = "{base}"\napi_key_env = "{env}"\n'),
    "judge_lm": ('[reflection_lm]\nmodel = "scripted/toy"\n[judge_lm]\nmodel = "openai/gpt-4.1-mini"\n'
                 'api_base = "{base}"\napi_key_env = "{env}"\n'),
}


def test_submit_refuses_a_variable_that_is_not_an_allowed_key(db, tmp_path, server, secrets, capsys):
    before = _snapshot(db)
    for verb, table in [("submit", t) for t in LM_TABLES] + [("run", "reflection_lm"), ("validate", "task_lm")]:
        path = toy_project(tmp_path / f"{verb}-{table}", "steal", LM_TABLES[table].format(
            base=server.api_base, env="REFRACT_DB_SECRET_FOR_TEST"))
        code = cli.main([verb, str(path), "--db", db.url])
        out, err = capsys.readouterr()
        assert code == 2, (verb, table, out, err)
        assert err.startswith(f"error: {table}.api_key_env: REFRACT_DB_SECRET_FOR_TEST is one of the engine's own "
                              "settings, never an API key"), err
        assert DB_SECRET not in out + err and "Traceback" not in err
        assert _snapshot(db) == before, (verb, table)  # no run, no example
    assert server.authorizations == []


def test_submit_refuses_a_tied_key_sent_elsewhere_and_takes_it_to_its_server(db, tmp_path, server, secrets, capsys):
    secrets.setenv(SETTING, "SPY_API_KEY=http://127.0.0.1:9/v1")
    path = toy_project(tmp_path / "project", "elsewhere", LM_TABLES["reflection_lm"].format(
        base=server.api_base, env="SPY_API_KEY"))
    before = _snapshot(db)
    assert cli.main(["submit", str(path), "--db", db.url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: reflection_lm.api_key_env: SPY_API_KEY may only be sent to http://127.0.0.1:9/v1 "
                          f"({SETTING}), not to api_base {server.api_base}"), err
    assert _snapshot(db) == before
    secrets.setenv(SETTING, f"SPY_API_KEY={server.api_base}")
    assert cli.main(["submit", str(path), "--db", db.url]) == 0, capsys.readouterr().err


def test_the_python_api_refuses_before_a_run_exists(db, secrets, tmp_path):
    from engine import optimize_anything
    from tests.support import toy
    from tests.support.api_evaluators import words

    before = _snapshot(db)
    for table in ("reflection_lm", "task_lm", "judge_lm"):
        lm = {"model": "openai/gpt-4.1-mini", "api_base": "http://127.0.0.1:9/v1", "api_key_env": "REFRACT_DB"}
        config = {table: lm} if table == "reflection_lm" else {table: lm, "reflection_lm": {"model": "scripted/toy"}}
        with pytest.raises(ConfigError, match=f"^{table}.api_key_env: REFRACT_DB is one of the engine's own settings"):
            optimize_anything("start", evaluator=words, dataset=toy.dataset(4), db=db.url, config=config, progress=False)
    assert _snapshot(db) == before


def test_the_studio_form_shows_the_refusal_at_the_key_field_and_starts_nothing(tmp_path, monkeypatch):
    from tests.support.studio import open_page, studio_database
    from ui import keys as K

    db = studio_database(tmp_path, monkeypatch)
    before = _snapshot(db)
    at = open_page("pages/new_run.py")
    name = next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options if "iso_date_regex" in o)
    at.selectbox(key=K.NEW_TEMPLATE).set_value(name).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    at.text_input(key=K.NEW_MODEL).set_value("openai/gpt-4.1-mini")
    at.text_input(key=K.NEW_API_BASE).set_value("http://127.0.0.1:9/v1")
    at.text_input(key=K.NEW_API_KEY_ENV).set_value("REFRACT_DB").run()
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("REFRACT_DB is one of the engine's own settings") for e in errors), errors
    assert any("key variable" in e for e in errors), errors  # the summary names the field
    assert _snapshot(db) == before


# ---------------------------------------------------------------- where a key is read


def test_the_client_sends_no_refused_key_and_the_allowed_one_only_to_its_server(server, secrets, tmp_path):
    client = LMClient(tmp_path / "lm-cache", sleep=lambda _s: None)
    steal = LMConfig(model="openai/gpt-4.1-mini", api_base=server.api_base, api_key_env="REFRACT_DB_SECRET_FOR_TEST",
                     num_retries=0)
    res = client.complete(steal, MESSAGES)
    assert res.error.startswith("api_key_env: REFRACT_DB_SECRET_FOR_TEST is one of the engine's own settings")
    secrets.setenv(SETTING, "SPY_API_KEY=http://127.0.0.1:9/v1")
    res = client.complete(steal.model_copy(update={"api_key_env": "SPY_API_KEY"}), MESSAGES)
    assert "may only be sent to http://127.0.0.1:9/v1" in res.error
    assert server.authorizations == []  # nothing reached the server
    secrets.setenv(SETTING, f"SPY_API_KEY={server.api_base}")
    assert client.complete(steal.model_copy(update={"api_key_env": "SPY_API_KEY"}), MESSAGES).ok
    assert server.authorizations == [f"Bearer {KEY_SECRET}"]


def test_a_server_the_config_chooses_gets_no_key_from_the_environment(server, secrets, tmp_path):
    """Without api_key_env litellm would send OPENAI_API_KEY to whatever api_base says."""
    secrets.setenv("OPENAI_API_KEY", KEY_SECRET)
    client = LMClient(tmp_path / "lm-cache", sleep=lambda _s: None)
    assert client.complete(LMConfig(model="openai/gpt-4.1-mini", api_base=server.api_base, num_retries=0), MESSAGES).ok
    assert server.authorizations == [f"Bearer {NO_KEY}"]


def test_the_connection_test_refuses_without_asking(server, secrets):
    import io

    from engine.lm.check import check_lm_command

    out, err = io.StringIO(), io.StringIO()
    code = check_lm_command("openai/gpt-4.1-mini", api_base=server.api_base, api_key_env="REFRACT_DB_SECRET_FOR_TEST",
                            out=out, err=err)
    assert code == 2 and err.getvalue().startswith("error: api_key_env: REFRACT_DB_SECRET_FOR_TEST is one of the "
                                                   "engine's own settings")
    assert server.authorizations == [] and DB_SECRET not in out.getvalue() + err.getvalue()
