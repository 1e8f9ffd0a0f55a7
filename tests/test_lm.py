"""engine.lm.client: retries, errors, cache, key hygiene, concurrency limit, cost, default model.

All calls go to the in-process ``scripted`` provider (or litellm's own mock), never the network.
"""

from __future__ import annotations

import stat
import threading

from engine.lm.client import LMClient, default_lm_config, default_model, default_model_reason, is_retryable  # first: offline price map

import litellm  # noqa: E402
import pytest  # noqa: E402

from engine.config import LOCAL_MODEL, LMConfig  # noqa: E402
from engine.lm.defaults import OVERRIDE_ENV, PROVIDER_DEFAULTS  # noqa: E402
from tests.support.scripted_lm import install_script, uninstall_script  # noqa: E402

MESSAGES = [{"role": "user", "content": "improve this text please"}]


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def client(tmp_path, sleeps):
    return LMClient(tmp_path / "lm-cache", sleep=sleeps.append, backoff_base=0.5)


def _rate_limited(times: int, answer: str = "fine"):
    calls = {"n": 0}

    def script(messages, params):
        calls["n"] += 1
        if calls["n"] <= times:
            raise litellm.RateLimitError("slow down", llm_provider="scripted", model="t")
        return answer

    return script, calls


def test_rate_limit_is_retried_with_growing_backoff_then_succeeds(client, sleeps):
    script, calls = _rate_limited(2)
    install_script(script)
    result = client.complete(LMConfig(model="scripted/retry", num_retries=3), MESSAGES)
    assert result.ok and result.text == "fine"
    assert calls["n"] == 3
    assert len(sleeps) == 2
    # exponential back-off with jitter in [0.5, 1.0] x base x 2^attempt
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0


def test_final_failure_returns_error_text_not_exception(client, sleeps):
    script, calls = _rate_limited(100)
    install_script(script)
    result = client.complete(LMConfig(model="scripted/fail", num_retries=2), MESSAGES)
    assert not result.ok and result.text == ""
    assert "RateLimitError" in result.error and "slow down" in result.error
    assert "after 3 attempts" in result.error
    assert calls["n"] == 3 and len(sleeps) == 2
    assert result.cost_usd == 0 and result.cached is False


@pytest.mark.parametrize("exc", [
    litellm.AuthenticationError("bad key", llm_provider="scripted", model="t"),
    litellm.BadRequestError("malformed", llm_provider="scripted", model="t"),
    litellm.ContextWindowExceededError("too long", llm_provider="scripted", model="t"),
    litellm.NotFoundError("no such model", llm_provider="scripted", model="t"),
])
def test_client_errors_are_not_retried(client, sleeps, exc):
    calls = []

    def script(messages, params):
        calls.append(1)
        raise exc

    install_script(script)
    result = client.complete(LMConfig(model="scripted/noretry", num_retries=3), MESSAGES)
    assert len(calls) == 1 and sleeps == []
    assert type(exc).__name__ in result.error


@pytest.mark.parametrize("exc,retry", [
    (litellm.Timeout("t", model="m", llm_provider="p"), True),
    (litellm.InternalServerError("x", llm_provider="p", model="m"), True),
    (litellm.ServiceUnavailableError("x", llm_provider="p", model="m"), True),
    (litellm.APIConnectionError("x", llm_provider="p", model="m"), True),
    (litellm.ContextWindowExceededError("x", llm_provider="p", model="m"), False),
    (ValueError("not a provider error"), False),
])
def test_which_errors_retry(exc, retry):
    assert is_retryable(exc) is retry


def test_cache_hit_costs_nothing_and_is_marked(client):
    stats = install_script(lambda m, p: f"answer {p['sample_index']}", price_per_token=1e-3)
    cfg = LMConfig(model="scripted/cache", temperature=0.5)
    first = client.complete(cfg, MESSAGES)
    again = client.complete(cfg, MESSAGES)
    assert first.cost_usd > 0 and not first.cached
    assert again.cached and again.cost_usd == 0 and again.text == first.text
    assert again.tokens_in == first.tokens_in and again.tokens_out == first.tokens_out
    assert len(stats.calls) == 1
    other_sample = client.complete(cfg, MESSAGES, sample_index=1)
    assert not other_sample.cached and other_sample.text == "answer 1"
    other_temperature = client.complete(cfg, MESSAGES, temperature=0.9)
    assert not other_temperature.cached
    uncached = client.complete(cfg, MESSAGES, use_cache=False)
    assert not uncached.cached
    assert len(stats.calls) == 4


def test_an_answer_goes_back_before_its_cache_entry_is_written(client, monkeypatch):
    """The store's write (10 ms and more when a wide step's answers arrived together) is not
    between an answer and its caller: the entry is written by a thread of its own, and the cache
    answers from it at once in this process."""
    install_script(lambda m, p: "stored later")
    store = client.cache._cache
    writing, release = threading.Event(), threading.Event()
    real_set = store.set

    def slow_set(*args, **kwargs):
        writing.set()
        release.wait(10)
        return real_set(*args, **kwargs)

    monkeypatch.setattr(store, "set", slow_set)
    cfg = LMConfig(model="scripted/later")
    first = client.complete(cfg, MESSAGES)  # returns while the write waits
    assert first.ok and writing.wait(10)
    again = client.complete(cfg, MESSAGES)
    assert again.cached and again.text == "stored later"
    release.set()
    client.cache.flush()
    assert len([k for k in store.iterkeys()]) == 1


def test_failures_are_not_cached(client):
    script, calls = _rate_limited(1)
    install_script(script)
    cfg = LMConfig(model="scripted/nocache-fail", num_retries=0)
    assert not client.complete(cfg, MESSAGES).ok
    assert client.complete(cfg, MESSAGES).ok
    assert calls["n"] == 2


def test_cache_directory_is_private(tmp_path):
    LMClient(tmp_path / "c")
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700


def test_api_key_reaches_provider_but_never_the_cache_or_the_error(client, monkeypatch, tmp_path):
    secret = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("TEST_SECRET_API_KEY", secret)
    seen = []

    class Spy(litellm.llms.custom_llm.CustomLLM):  # records the key the provider received
        def completion(self, *args, **kwargs):
            seen.append(kwargs.get("api_key", args[8] if len(args) > 8 else None))
            response = args[4] if len(args) > 4 else kwargs["model_response"]
            response.choices[0].message.content = "ok " + secret[:3]
            return response

    from engine.lm.providers import register_provider
    register_provider("spy", Spy())
    cfg = LMConfig(model="spy/m", api_key_env="TEST_SECRET_API_KEY")
    assert client.complete(cfg, MESSAGES).ok
    assert seen == [secret]
    client.cache.flush()  # entries are written by a thread of their own
    for key in client.cache._cache.iterkeys():
        assert secret not in repr(key) + repr(client.cache._cache.get(key))
    for path in (tmp_path / "lm-cache").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes()

    def leaky(messages, params):
        raise litellm.AuthenticationError(f"Incorrect API key provided: {secret}", llm_provider="s", model="m")

    install_script(leaky)
    failed = client.complete(LMConfig(model="scripted/leak", api_key_env="TEST_SECRET_API_KEY"), MESSAGES)
    assert "AuthenticationError" in failed.error and secret not in failed.error and "***" in failed.error


def test_missing_key_variable_is_a_clear_error_without_a_call(client, monkeypatch):
    monkeypatch.delenv("ABSENT_API_KEY", raising=False)
    stats = install_script(lambda m, p: "never")
    result = client.complete(LMConfig(model="scripted/k", api_key_env="ABSENT_API_KEY"), MESSAGES)
    assert "ABSENT_API_KEY" in result.error and "not set" in result.error
    assert stats.calls == []


def test_concurrency_limit_per_model_holds(client):
    stats = install_script(lambda m, p: "x", latency=0.05)
    cfg = LMConfig(model="scripted/concurrency", max_concurrency=2)
    threads = [threading.Thread(target=client.complete, args=(cfg, [{"role": "user", "content": f"q{i}"}]))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stats.calls) == 8
    assert stats.max_in_flight == 2


def test_tokens_and_cost_from_the_provider_usage(client):
    install_script(lambda m, p: "one two three", price_per_token=0.01)
    result = client.complete(LMConfig(model="scripted/cost"), MESSAGES)
    assert (result.tokens_in, result.tokens_out) == (4, 3)
    assert result.cost_usd == pytest.approx(0.07)
    assert result.seconds >= 0


def test_cost_from_litellm_price_map_for_a_known_model(client, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used-by-the-mock")
    # litellm's own mock, asked for where the client sends each request (patching litellm.completion
    # itself held in this process alone, and failed on CI after other tests: a real request went out)
    from engine.lm import client as client_module

    send = client_module._send
    monkeypatch.setattr(client_module, "_send", lambda kwargs: send({**kwargs, "mock_response": "a mock answer"}))
    result = client.complete(LMConfig(model="openai/gpt-4.1-mini"), MESSAGES)
    assert result.ok and result.text == "a mock answer"
    assert result.tokens_in > 0 and result.tokens_out > 0
    price_in, price_out = litellm.cost_per_token(model="gpt-4.1-mini", prompt_tokens=result.tokens_in,
                                                 completion_tokens=result.tokens_out)
    assert result.cost_usd == pytest.approx(price_in + price_out)


def test_unknown_model_costs_zero(client):
    from engine.lm.client import _cost
    response = litellm.ModelResponse(model="nobody-knows/this-model")
    assert _cost(response, "nobody-knows/this-model") == 0.0


def test_check_reports_answer_and_latency_or_exact_error(client, monkeypatch):
    install_script(lambda m, p: "ready")
    ok = client.check(LMConfig(model="scripted/check"))
    assert ok["ok"] and ok["answer"] == "ready" and ok["error"] is None and ok["seconds"] >= 0
    assert not any("key" in k for k in ok)
    monkeypatch.delenv("NOT_SET_ANYWHERE_API_KEY", raising=False)
    bad = client.check(LMConfig(model="openai/gpt-4.1-mini", api_key_env="NOT_SET_ANYWHERE_API_KEY"))
    assert not bad["ok"] and "NOT_SET_ANYWHERE_API_KEY" in bad["error"]


@pytest.fixture
def no_provider_keys(monkeypatch):
    for env, _ in PROVIDER_DEFAULTS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    return monkeypatch


def test_default_is_the_local_model_without_keys(no_provider_keys):
    assert default_model() == LOCAL_MODEL
    assert "no provider API key" in default_model_reason() and LOCAL_MODEL in default_model_reason()
    cfg = default_lm_config()
    assert cfg.model == LOCAL_MODEL and cfg.api_key_env is None


def test_default_uses_a_configured_provider_key(no_provider_keys):
    no_provider_keys.setenv("OPENAI_API_KEY", "sk-whatever")
    assert default_model() == "openai/gpt-4.1-mini"
    cfg = default_lm_config(temperature=0.2)
    assert cfg.api_key_env == "OPENAI_API_KEY" and cfg.temperature == 0.2
    assert "sk-whatever" not in default_model_reason() and "OPENAI_API_KEY" in default_model_reason()


def test_default_anthropic_and_explicit_override(no_provider_keys):
    no_provider_keys.setenv("ANTHROPIC_API_KEY", "k")
    assert default_model().startswith("anthropic/")
    no_provider_keys.setenv(OVERRIDE_ENV, "ollama/qwen2.5-coder")
    assert default_model() == "ollama/qwen2.5-coder"


def test_check_lm_command_prints_answer_or_exact_error(client, capsys, monkeypatch):
    from engine.lm.check import check_lm_command

    install_script(lambda m, p: "ready")
    assert check_lm_command("scripted/cli", client=client) == 0
    assert "ok: answered in" in capsys.readouterr().out
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert check_lm_command("openai/gpt-4.1-mini", client=client) == 1
    assert "OPENAI_API_KEY not set" in capsys.readouterr().err
    assert check_lm_command("   ", client=client) == 2
    assert "model:" in capsys.readouterr().err


def test_missing_provider_key_fails_fast_instead_of_retrying(client, sleeps, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = client.complete(LMConfig(model="anthropic/claude-haiku-4-5", num_retries=3), MESSAGES)
    assert "ANTHROPIC_API_KEY" in result.error and sleeps == []


def test_context_window_and_token_count(client):
    from engine.lm import local as local_lm

    assert client.context_window(LMConfig(model=LOCAL_MODEL)) == local_lm.context_window()
    assert client.context_window(LMConfig(model="openai/gpt-4.1-mini")) > 100_000
    assert client.context_window(LMConfig(model="scripted/unknown")) is None
    assert client.count_tokens(LMConfig(model="openai/gpt-4.1-mini"), MESSAGES) > 3


def test_scripted_provider_loads_its_script_from_the_environment(client, tmp_path, monkeypatch):
    (tmp_path / "refract_env_script.py").write_text(
        "def answer(messages, params):\n    return 'from env ' + str(params['sample_index'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REFRACT_SCRIPTED_LM", "refract_env_script:answer")
    monkeypatch.setenv("REFRACT_SCRIPTED_PRICE", "0.5")
    result = client.complete(LMConfig(model="scripted/env"), MESSAGES, sample_index=3)
    assert result.text == "from env 3" and result.cost_usd == pytest.approx(0.5 * (4 + 3))


def test_scripted_provider_without_a_script_says_how_to_install_one(client, monkeypatch):
    monkeypatch.delenv("REFRACT_SCRIPTED_LM", raising=False)
    result = client.complete(LMConfig(model="scripted/none"), MESSAGES)
    assert "install_script" in result.error and "REFRACT_SCRIPTED_LM" in result.error


def test_lm_plugins_are_imported_by_name_and_a_typo_is_an_error():
    from engine.lm.providers import PLUGINS_ENV, is_in_process, load_plugins

    assert load_plugins({PLUGINS_ENV: " tests.support.scripted_lm , "}) == ["tests.support.scripted_lm"]
    assert is_in_process("scripted/x") and not is_in_process("openai/gpt-4.1-mini")
    with pytest.raises(ValueError, match=f"{PLUGINS_ENV}: cannot import 'tests.support.no_such_plugin'"):
        load_plugins({PLUGINS_ENV: "tests.support.no_such_plugin"})


WARM_CHECK = r'''
import sys, tempfile
from engine.lm.client import LMClient, warm_up
from engine.config import LMConfig
from tests.support.scripted_lm import install_script
install_script(lambda messages, params: "fine", latency=0.0)
if sys.argv[1] == "warm":
    warm_up()
before = set(sys.modules)
res = LMClient(tempfile.mkdtemp()).complete(LMConfig(model="scripted/warm-check"), [{"role": "user", "content": "hi"}])
assert res.ok, res.error
print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("litellm", "tiktoken", "tiktoken_ext")))
'''


def test_warm_up_loads_most_of_what_the_first_completion_would(tmp_path):
    """A long-lived worker warms the client (engine.worker): its first reflection then loads
    almost nothing more of litellm, and not its tokenizer (together about 0.6 s on a 2-core
    machine). Without it, the first call loads them."""
    import subprocess
    import sys
    from pathlib import Path

    # both processes at once: each spends most of its time importing litellm
    procs = {mode: subprocess.Popen([sys.executable, "-c", WARM_CHECK, mode], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
             for mode in ("cold", "warm")}

    def first_call_loads(mode: str) -> list[str]:
        out, err = procs[mode].communicate(timeout=180)
        assert procs[mode].returncode == 0, err[-2000:]
        return eval(out.strip().splitlines()[-1])

    cold, warm = first_call_loads("cold"), first_call_loads("warm")
    assert any(m.startswith("tiktoken") for m in cold) and not any(m.startswith("tiktoken") for m in warm)
    # measured: 22 modules against 65-67 (the 22 are two providers' modules that litellm loads on a
    # custom provider's first call): "a third" failed when the cold call loaded 65, so half
    assert len(warm) * 2 < len(cold), (len(warm), len(cold))
