"""The local model: joining and verifying the parts (with small fake parts), resource checks,
the provider's errors, and one test with the real model (marked ``local_model``)."""

from __future__ import annotations

import hashlib
import importlib

import engine.lm.client  # noqa: F401  (first: litellm must load its offline price map)

import pytest  # noqa: E402

from engine.lm import local as local_lm  # noqa: E402
from engine.lm import local_model
from engine.config import LOCAL_MODEL, LMConfig  # noqa: E402
from engine.lm.client import LMClient  # noqa: E402
from engine.lm.local_model import INSTALL_HINT, LocalModelError, ModelSpec, ensure_model_file  # noqa: E402
from engine.search.reflection import build_prompt  # noqa: E402

CHUNKS = [b"GGUF-fake-part-one|", b"part-two|", b"and the last part"]


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three installed fake part packages laid out like the real ones; returns (spec, files)."""
    site = tmp_path / "site"
    files = []
    for i, chunk in enumerate(CHUNKS, start=1):
        package = site / f"refract_fake_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        path = package / "data" / f"part{i:02d}.bin"
        path.write_bytes(chunk)
        files.append(path)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    joined = b"".join(CHUNKS)
    spec = ModelSpec(filename="fake.gguf", sha256=hashlib.sha256(joined).hexdigest(), size=len(joined),
                     part_packages=tuple(f"refract_fake_part{i}" for i in range(1, 4)))
    return spec, files


def test_join_verifies_and_is_done_once(fake_parts, tmp_path):
    spec, files = fake_parts
    seen = []
    path = ensure_model_file(spec, tmp_path / "models", progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == b"".join(CHUNKS)
    assert seen[-1] == (spec.size, spec.size)
    for f in files:  # a verified file is reused: the parts are not needed any more
        f.unlink()
    assert ensure_model_file(spec, tmp_path / "models") == path
    assert not list((tmp_path / "models").glob(".*partial*"))


def test_a_tampered_model_file_is_rebuilt(fake_parts, tmp_path):
    spec, _ = fake_parts
    path = ensure_model_file(spec, tmp_path / "models")
    path.write_bytes(b"X" * spec.size)  # same size, new mtime: the stamp no longer matches
    assert ensure_model_file(spec, tmp_path / "models").read_bytes() == b"".join(CHUNKS)


def test_corrupt_part_is_refused_and_the_partial_file_deleted(fake_parts, tmp_path):
    spec, files = fake_parts
    files[1].write_bytes(b"PART-TWO|")  # same length, different bytes
    models = tmp_path / "models"
    with pytest.raises(LocalModelError) as err:
        ensure_model_file(spec, models)
    message = str(err.value)
    assert "SHA-256" in message and spec.sha256 in message and "requirements-model.txt" in message
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []


def test_part_of_the_wrong_size_is_refused(fake_parts, tmp_path):
    spec, files = fake_parts
    files[2].write_bytes(b"truncated")
    with pytest.raises(LocalModelError, match="add up to"):
        ensure_model_file(spec, tmp_path / "models")
    assert not (tmp_path / "models" / spec.filename).exists()


def test_missing_part_names_the_install_command(fake_parts, tmp_path):
    spec, _ = fake_parts
    spec = ModelSpec(spec.filename, spec.sha256, spec.size, spec.part_packages + ("refract_absent_part4",))
    with pytest.raises(LocalModelError) as err:
        ensure_model_file(spec, tmp_path / "models")
    message = str(err.value)
    assert "refract-absent-part4" in message and "1 of 4 parts missing" in message
    assert "make setup" in message and "pip install -r requirements-model.txt" in message
    assert INSTALL_HINT in message


def test_too_little_disk_is_refused_before_writing(fake_parts, tmp_path, monkeypatch):
    spec, _ = fake_parts
    monkeypatch.setattr(local_model, "free_disk_bytes", lambda directory: 10)
    with pytest.raises(LocalModelError, match="not enough disk space"):
        ensure_model_file(spec, tmp_path / "models")
    assert not (tmp_path / "models" / spec.filename).exists()


def test_too_little_memory_is_refused_before_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(local_lm, "ensure_model_file", lambda: tmp_path / "model.gguf")
    monkeypatch.setattr(local_lm, "available_memory_bytes", lambda: 100 * 1024 * 1024)
    with pytest.raises(LocalModelError, match="not enough free memory.*GB needed"):
        local_lm.LocalRuntime(n_ctx=4096)


def test_context_window_is_known_without_loading(monkeypatch):
    monkeypatch.setattr(local_lm, "_runtime", None)
    monkeypatch.delenv("REFRACT_LOCAL_CTX", raising=False)
    assert local_lm.context_window() == local_lm.DEFAULT_CONTEXT
    monkeypatch.setenv("REFRACT_LOCAL_CTX", "4096")
    assert local_lm.context_window() == 4096


def test_provider_errors_reach_the_caller_as_clear_text(monkeypatch, tmp_path):
    client = LMClient(tmp_path / "cache", sleep=lambda s: None)
    unknown = client.complete(LMConfig(model="local/llama-70b"), [{"role": "user", "content": "hi"}])
    assert "unknown local model" in unknown.error and LOCAL_MODEL in unknown.error

    def not_installed():
        raise LocalModelError(f"the local model's weights are not installed. To install them {INSTALL_HINT}.")

    monkeypatch.setattr(local_lm, "_runtime", None)
    monkeypatch.setattr(local_lm, "ensure_model_file", not_installed)
    missing = client.complete(LMConfig(model=LOCAL_MODEL), [{"role": "user", "content": "hi"}])
    assert "requirements-model.txt" in missing.error and "after" not in missing.error  # not retried


@pytest.mark.local_model
@pytest.mark.timeout(600)
def test_real_local_model_answers_through_litellm(tmp_path):
    client = LMClient(tmp_path / "cache")
    cfg = LMConfig(model=LOCAL_MODEL, max_tokens=24, temperature=0.0)
    messages = [{"role": "user", "content": "What is 2 + 3? Answer with the number only."}]
    result = client.complete(cfg, messages)
    assert result.ok, result.error
    assert "5" in result.text
    assert result.tokens_in > 5 and 0 < result.tokens_out <= 24 and result.cost_usd == 0
    assert local_lm.count_tokens(messages) == result.tokens_in
    too_long = [{"role": "user", "content": "word " * (local_lm.context_window() + 100)}]
    overflow = client.complete(cfg, too_long)
    assert "ContextWindowExceededError" in overflow.error and "context window" in overflow.error
    # two reflections on different parents, one after the other: the runtime reads their common
    # head (instructions, objective, kind) once and keeps it for the next call
    first, second = (build_prompt(kind="a regex", objective="Match ISO dates.", background="", component="text",
                                  components=["text"], current_text=text, feedback=[], human_feedback=[], tried=[],
                                  compact=True).messages for text in (r"\d+", r"[0-9]{4}"))
    runtime = local_lm.get_runtime()
    runtime.chat({"messages": first, "max_tokens": 2, "temperature": 0.0})
    timings = runtime.chat({"messages": second, "max_tokens": 2, "temperature": 0.0})["timings"]
    head = local_lm.count_tokens([first[0]])  # the system message (+ the few tokens opening the answer)
    assert timings["cache_n"] >= head - 5
    # the loop guard (DRY sampling): asked to write a short sequence over and over, the runtime with
    # the guard turned off does; through the provider (the runtime adds the guard to every request),
    # the repeats break off
    ask = [{"role": "user", "content": "Write the line `a-b-c` 10 times, one after the other without spaces or newlines."}]
    bare = runtime.chat({"messages": ask, "max_tokens": 64, "temperature": 0.0, "dry_multiplier": 0.0})
    bare = bare["choices"][0]["message"]["content"]
    guarded = client.complete(cfg.model_copy(update={"max_tokens": 64}), ask)
    assert guarded.ok, guarded.error
    assert bare.count("a-b-c") >= 8, bare
    assert guarded.text.count("a-b-c") < 8, guarded.text


@pytest.mark.local_model
@pytest.mark.timeout(600)
def test_an_abandoned_answer_stops_at_once_and_leaves_the_runtime_free(tmp_path):
    # a pause or the time limit cuts a reflection: the runtime used to write the dropped answer to
    # its end (here 1,500 tokens, well over a minute on one core) while every later call waited
    import threading
    import time

    from engine.interrupt import Interrupt

    client = LMClient(tmp_path / "cache")
    cfg = LMConfig(model=LOCAL_MODEL, max_tokens=1500, temperature=0.7)
    story = [{"role": "user", "content": "Write a very long story about a dragon, at least 3000 words."}]
    cancel = Interrupt()
    threading.Timer(3.0, cancel.set, args=("paused by a test",)).start()
    cut = client.complete(cfg, story, cancel=cancel)
    assert cut.error_kind == "interrupted", cut.error
    deadline = time.monotonic() + 10
    while local_lm.generating() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not local_lm.generating(), "the runtime still writes the abandoned answer"
    after = client.complete(cfg.model_copy(update={"max_tokens": 24, "temperature": 0.0}),
                            [{"role": "user", "content": "What is 2 + 3? Answer with the number only."}])
    assert after.ok and "5" in after.text, after.error
    # a request abandoned while it waits for the runtime leaves the queue without being written
    runtime, gone = local_lm.get_runtime(), threading.Event()
    gone.set()
    with runtime._lock:  # another answer is being written
        with pytest.raises(local_lm.Abandoned):
            runtime.chat({"messages": story, "max_tokens": 8}, abandon=gone)


def test_generating_is_true_only_while_the_runtime_holds_an_answer(monkeypatch):
    # python -m engine leaves with os._exit while it is true (a teardown under it crashed)
    import threading
    from types import SimpleNamespace

    runtime = SimpleNamespace(_lock=threading.Lock())
    monkeypatch.setattr(local_lm, "_runtime", None)
    assert not local_lm.generating()
    monkeypatch.setattr(local_lm, "_runtime", runtime)
    assert not local_lm.generating()
    with runtime._lock:
        assert local_lm.generating()


@pytest.mark.local_model
@pytest.mark.timeout(600)
def test_at_exit_an_answer_being_written_stops_before_the_interpreter_shuts_down():
    # The runtime calls back into Python at every token from the requesting thread (a daemon): a
    # process that exited under an answer aborted ("FATAL: exception not rethrown", seen once in
    # 12 exits 1-2 s into an answer). The exit hook stops the answer and waits for its thread.
    import threading
    import time

    runtime = local_lm.get_runtime()
    outcome: list = []

    def write() -> None:
        try:
            outcome.append(runtime.chat({"messages": [{"role": "user", "content": "Count from 1 to 500, one number a line."}],
                                         "max_tokens": 1500, "temperature": 0.0}))
        except local_lm.Abandoned as exc:
            outcome.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while not local_lm.generating():
        time.sleep(0.01)
    time.sleep(1.5)  # into the answer (a sampled story once ended after 14 tokens, before this)
    assert writer.is_alive(), outcome
    started = time.monotonic()
    try:
        local_lm._stop_writing(runtime)
        waited = time.monotonic() - started
        writer.join(timeout=5)
    finally:
        local_lm._closing.clear()
    assert not writer.is_alive() and not local_lm.generating()
    assert isinstance(outcome[0], local_lm.Abandoned) and waited < 2, (outcome, waited)
