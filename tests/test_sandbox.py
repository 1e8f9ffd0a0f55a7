"""The evaluator sandbox and LocalPool, with real sandboxed subprocesses.

One shared pool runs an evaluator that misbehaves on request (the candidate names the bad
behaviour); after every bad case a good evaluation on the same pool must still work.
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import threading
import time
from concurrent.futures import as_completed

import pytest

from engine.executor import EvalTask
from engine.sandbox import EvaluatorCompileError, check_evaluator_source, make_executor
from engine.config import ExecutorConfig
from engine.sandbox import isolation
from engine.sandbox.pool import LocalPool
from engine.sandbox.worker_process import SandboxSpec

SECRET = "sk-refract-test-secret-1234"
TIMEOUT = 1.5

BAD = '''
import os, sys, time
import refract_evaluator as oa

def evaluate(candidate, example):
    if candidate == "ok":
        return 1.0, {"echo": example}
    if candidate == "loop":
        while True:
            pass
    if candidate == "sleep":
        time.sleep(60)
    if candidate == "alloc":
        block = bytearray(4 * 1024 ** 3)
        return 1.0
    if candidate == "forkbomb":
        while True:
            os.fork()
    if candidate == "bigfile":
        chunk = b"x" * (1 << 20)
        with open("big.bin", "wb") as f:
            for _ in range(4096):
                f.write(chunk)
        return 1.0
    if candidate == "env":
        return 1.0, {"key": os.environ["OPENAI_API_KEY"]}
    if candidate == "socket":
        socket_mod = __import__("socket")
        s = socket_mod.create_connection(("127.0.0.1", example), timeout=1)
        s.sendall(b"leak")
        return 1.0
    if candidate == "exit":
        sys.exit(3)
    if candidate == "os_exit":
        os._exit(4)
    if candidate == "segfault":
        import ctypes
        ctypes.string_at(0)
    if candidate == "unserialisable":
        return 0.5, {"thing": object()}
    if candidate == "junk":
        return "high"
    if candidate == "nan":
        return float("nan")
    if candidate == "print":
        for _ in range(100):
            print("x" * 1_000_000)
        return 1.0
    if candidate == "import":
        import refract_no_such_module
    raise ValueError("unknown case " + candidate)
'''


# Skipped only where bubblewrap is not installed (make setup installs it). Installed but not
# working is a failure, not a skip: a broken sandbox must not pass unnoticed.
needs_bwrap = pytest.mark.skipif(not os.path.exists(isolation.BWRAP), reason="isolation tests need bubblewrap (make setup installs it)")


def test_bubblewrap_works_where_it_is_installed():
    if not os.path.exists(isolation.BWRAP):
        pytest.skip("bubblewrap is not installed")
    assert isolation.mode(SandboxSpec()) == "bwrap"


@pytest.fixture(scope="module")
def pool():
    os.environ["OPENAI_API_KEY"] = SECRET  # the engine has a key; evaluators must never see it
    p = LocalPool(SandboxSpec(timeout_seconds=TIMEOUT, memory_mb=256), BAD, workers=2)
    p.wait_ready()
    yield p
    p.close()
    os.environ.pop("OPENAI_API_KEY", None)


def run(pool, candidate, example=0):
    return pool.submit(EvalTask(candidate=candidate, example=example)).result(timeout=30)


def still_works(pool):
    for _ in range(2):  # both workers
        out = run(pool, "ok", 7)
        assert out.error is None and out.score == 1.0 and out.side_info["echo"] == 7


@pytest.mark.parametrize("case, expected", [
    ("loop", "evaluation timed out after 1.5 s"),
    ("sleep", "timed out after 1.5 s"),
    ("alloc", "memory limit"),
    ("bigfile", "File too large"),
    ("env", "KeyError: 'OPENAI_API_KEY'"),
    ("exit", "sys.exit(3)"),
    ("os_exit", "exited with code 4"),
    ("segfault", "segmentation fault"),
    ("unserialisable", "builtins.object object, which cannot be stored as JSON"),
    ("junk", "returned 'high' (type str)"),
    ("nan", "finite number"),
    ("import", "No module named 'refract_no_such_module'"),
])
def test_bad_evaluator_is_contained(pool, case, expected):
    out = run(pool, case)
    assert out.error, f"{case} should be an error outcome"
    assert out.score == 0.0
    if expected:
        assert expected in out.error
    assert SECRET not in json.dumps(out.side_info)
    still_works(pool)


def test_fork_bomb_is_stopped_by_the_process_limit(pool):
    out = run(pool, "forkbomb")
    assert "BlockingIOError" in out.error or "timed out" in out.error
    still_works(pool)


def test_exception_has_traceback_and_line(pool):
    out = run(pool, "no-such-case")
    assert out.error.startswith("ValueError: unknown case no-such-case (evaluator.py, line")
    assert 'File "evaluator.py"' in out.side_info["traceback"]


def test_segfault_reports_native_traceback(pool):
    out = run(pool, "segfault")
    assert "Segmentation fault" in out.side_info.get("stderr", "")


def test_huge_output_is_truncated_visibly(pool):
    out = run(pool, "print")
    assert out.error is None and out.score == 1.0
    assert len(out.side_info["stdout"]) < 21_000
    assert "truncated: " in out.side_info["stdout"]


@needs_bwrap
def test_socket_is_blocked_without_network(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        out = run(pool, "socket", port)
        assert out.error and "network access is off" in out.error
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()
    still_works(pool)


def test_missing_module_at_load_fails_every_task_clearly():
    p = LocalPool(SandboxSpec(timeout_seconds=TIMEOUT), "import refract_absent_mod\ndef evaluate(c):\n    return 1.0\n", 1)
    try:
        for _ in range(2):
            out = p.submit(EvalTask("x")).result(timeout=30)
            assert out.error.startswith("evaluator.py failed to load: ModuleNotFoundError: No module named "
                                        "'refract_absent_mod' (evaluator.py, line 1)")
            assert "traceback" in out.side_info
    finally:
        p.close()


# --- the evaluator's world ------------------------------------------------------------------

def make_pool(source, workers=1, lm_handler=None, **spec):
    spec.setdefault("timeout_seconds", TIMEOUT)
    p = LocalPool(SandboxSpec(**spec), source, workers, lm_handler)
    p.wait_ready()
    return p


def test_worker_is_warm_and_compiles_the_evaluator_once():
    src = "import os\nLOADS = [os.getpid()]\nCALLS = 0\ndef evaluate(c):\n    global CALLS\n    CALLS += 1\n" \
          "    return CALLS, {'pid': LOADS[0]}\n"
    p = make_pool(src)
    try:
        outs = [p.submit(EvalTask("x")).result() for _ in range(5)]
        assert [o.score for o in outs] == [1, 2, 3, 4, 5]
        assert len({o.side_info["pid"] for o in outs}) == 1
        assert len(p.cold_starts) == 1
    finally:
        p.close()


def test_crashed_worker_is_replaced_and_only_its_task_fails():
    src = "import os\ndef evaluate(c):\n    if c == 'die':\n        os._exit(1)\n    return 1.0\n"
    p = make_pool(src, workers=2)
    try:
        futures = [p.submit(EvalTask(c)) for c in ["ok", "die", "ok", "die", "ok", "ok"]]
        errors = [f.result().error for f in futures]
        assert [e is None for e in errors] == [True, False, True, False, True, True]
        assert len(p.cold_starts) == 4  # two initial workers + one replacement per crash
        assert p.busy_seconds() > 0
    finally:
        p.close()


def test_results_stream_back_in_completion_order():
    src = "import time\ndef evaluate(c):\n    time.sleep(c)\n    return c\n"
    p = make_pool(src, workers=2)
    try:
        futures = {p.submit(EvalTask(d)): d for d in (0.8, 0.05)}
        assert [futures[f] for f in as_completed(futures)] == [0.05, 0.8]
    finally:
        p.close()


def test_validate_runs_the_optional_check():
    src = ("def validate(candidate):\n    if len(candidate) > 5:\n        return 'must be at most 5 characters'\n"
           "def evaluate(c):\n    return 1.0\n")
    p = make_pool(src)
    try:
        assert p.validate("short") is None
        assert p.validate("far too long") == "must be at most 5 characters"
    finally:
        p.close()
    p = make_pool("def evaluate(c):\n    return 1.0\n")
    try:
        assert p.validate("anything") is None
    finally:
        p.close()


def test_lm_is_proxied_to_the_engine_handler():
    calls = []

    def handler(messages, model, params, task):
        calls.append((messages, model, params, task.candidate_id, threading.current_thread().name))
        if messages[-1]["content"] == "fail":
            raise RuntimeError("budget exhausted")
        return {"text": "echo: " + messages[-1]["content"], "cost_usd": 0.25, "tokens_in": 3, "tokens_out": 2}

    src = ("from refract_evaluator import lm, LMError\n"
           "def evaluate(c):\n"
           "    answer = lm(c, model='task-model', temperature=0)\n"
           "    try:\n        lm('fail')\n    except LMError as e:\n        refusal = str(e)\n"
           "    try:\n        lm('x', api_base='http://attacker.example')\n    except LMError as e:\n"
           "        redirect = str(e)\n"
           "    return 1.0, {'answer': answer, 'refusal': refusal, 'redirect': redirect[:34]}\n")
    p = make_pool(src, lm_handler=handler)
    try:
        out = p.submit(EvalTask("hello", candidate_id="c1")).result()
        assert out.error is None
        assert out.side_info == {"answer": "echo: hello", "refusal": "RuntimeError: budget exhausted",
                                 "redirect": "lm() does not accept api_base; all"}
        assert len(calls) == 2  # the redirect never reached the engine
        assert calls[0][:4] == ([{"role": "user", "content": "hello"}], "task-model", {"temperature": 0}, "c1")
        assert out.lm_cost_usd == 0.25 and out.lm_tokens_in == 3 and out.lm_tokens_out == 2
    finally:
        p.close()


def test_lm_without_a_task_lm_says_so():
    p = make_pool("from refract_evaluator import lm\ndef evaluate(c):\n    return len(lm('hi'))\n")
    try:
        out = p.submit(EvalTask("x")).result()
        assert "LMError: lm() is not available: this run has no task LM" in out.error
    finally:
        p.close()


def test_log_stdout_stderr_and_scores_land_in_side_info():
    src = ("import sys\nimport refract_evaluator as oa\n"
           "def evaluate(c):\n    oa.log('checked', c, 42)\n    print('to stdout')\n"
           "    print('to stderr', file=sys.stderr)\n"
           "    return 0.5, {'scores': {'length': 3, 'style': 0.25}}\n")
    p = make_pool(src)
    try:
        out = p.submit(EvalTask("abc")).result()
        assert out.error is None and out.score == 0.5
        assert out.side_info == {"scores": {"length": 3, "style": 0.25}, "log": "checked abc 42\n",
                                 "stdout": "to stdout\n", "stderr": "to stderr\n"}
    finally:
        p.close()


def test_both_signatures_and_all_return_forms():
    single = "def evaluate(candidate):\n    return {'score': len(candidate), 'note': 'dict form'}\n"
    p = make_pool(single)
    try:
        out = p.submit(EvalTask("abcd")).result()
        assert (out.score, out.side_info, out.error) == (4.0, {"note": "dict form"}, None)
        out = p.submit(EvalTask("abcd", example={"x": 1})).result()
        assert "define evaluate(candidate, example)" in out.error
    finally:
        p.close()
    gepa_style = ("import refract_evaluator as oa\n"
                  "def evaluate(candidate, example, opt_state=None):\n"
                  "    assert opt_state.best_example_evals == []\n"
                  "    return float(candidate == example['answer'])\n")
    p = make_pool(gepa_style)
    try:
        assert p.submit(EvalTask("42", example={"answer": "42"})).result().score == 1.0
        assert p.submit(EvalTask({"a": "x"}, example={"answer": "42"})).result().score == 0.0
    finally:
        p.close()


def test_images_become_json_safe_markers():
    src = ("import io\nfrom PIL import Image\n"
           "def evaluate(c):\n    img = Image.new('RGB', (4, 3), 'red')\n"
           "    buf = io.BytesIO()\n    img.save(buf, format='PNG')\n"
           "    return 1.0, {'pil': img, 'png': buf.getvalue()}\n")
    p = make_pool(src, memory_mb=512)
    try:
        out = p.submit(EvalTask("x")).result()
        assert out.error is None
        for key in ("pil", "png"):
            marker = out.side_info[key]
            assert marker["__image__"] == "png"
            from PIL import Image
            assert Image.open(io.BytesIO(base64.b64decode(marker["data"]))).size == (4, 3)
    finally:
        p.close()


def test_process_isolation_fallback_keeps_limits_and_scrubs_env():
    os.environ["OPENAI_API_KEY"] = SECRET
    try:
        p = make_pool("import os, time\ndef evaluate(c):\n    if c == 'sleep':\n        time.sleep(30)\n"
                      "    return 1.0, {'env': dict(os.environ), 'cwd': os.getcwd()}\n",
                      isolation="process", timeout_seconds=1.0)
    finally:
        os.environ.pop("OPENAI_API_KEY", None)
    try:
        out = p.submit(EvalTask("ok")).result()
        assert SECRET not in json.dumps(out.side_info) and "OPENAI_API_KEY" not in out.side_info["env"]
        assert out.side_info["cwd"].startswith(out.side_info["env"]["HOME"])
        t0 = time.monotonic()
        assert "timed out after 1 s" in p.submit(EvalTask("sleep")).result().error
        assert time.monotonic() - t0 < 5
        assert p.submit(EvalTask("ok")).result().error is None
    finally:
        p.close()


def test_a_workers_next_task_is_sent_before_the_finished_one_is_announced(monkeypatch):
    """Announcing a result runs the engine's callbacks (recording it, dispatching the next
    evaluation); the worker's next queued task is already on its way by then, so the worker does
    not idle through them (1.7 ms per evaluation on a busy 2-core machine)."""
    from engine.sandbox.worker_process import WorkerProcess

    sent: list = []
    real_send = WorkerProcess._send

    def send(self, obj, deadline):
        if obj.get("type") == "eval":
            sent.append(obj["candidate"])
        return real_send(self, obj, deadline)

    monkeypatch.setattr(WorkerProcess, "_send", send)
    p = make_pool("import time\ndef evaluate(c):\n    time.sleep(c)\n    return 1.0\n")
    try:
        seen_when_announced: list = []
        first = p.submit(EvalTask(0.3))
        second = p.submit(EvalTask(0.0))
        first.add_done_callback(lambda _f: seen_when_announced.append(list(sent)))
        assert first.result().score == 1.0 and second.result().score == 1.0
        assert seen_when_announced == [[0.3, 0.0]]
    finally:
        p.close()


def test_close_cancels_queued_tasks():
    p = make_pool("import time\ndef evaluate(c):\n    time.sleep(c)\n    return 1.0\n")
    running = p.submit(EvalTask(0.5))
    queued = [p.submit(EvalTask(0.5)) for _ in range(3)]
    time.sleep(0.1)
    p.close()
    assert all(f.cancelled() for f in queued)
    assert running.result().error  # killed mid-evaluation: an outcome, not an exception
    with pytest.raises(RuntimeError):
        p.submit(EvalTask(0))


# --- check_evaluator_source / make_executor ---------------------------------------------------

def test_syntax_error_names_file_and_line():
    with pytest.raises(EvaluatorCompileError, match=r"^evaluator.py, line 3: invalid syntax"):
        check_evaluator_source("import math\n\nx = = 1\ndef evaluate(c):\n    return 1\n")
    # the offending line is not echoed: the "evaluator" may be any file (issue 13, defect 3)
    with pytest.raises(EvaluatorCompileError, match=r"^evaluator.py, line 2: expected ':'$"):
        check_evaluator_source("import math\ndef evaluate(c) return 1\n")


def test_missing_evaluate_function_is_refused():
    with pytest.raises(EvaluatorCompileError, match="defines no function evaluate"):
        check_evaluator_source("def evaluat(c):\n    return 1\n")
    check_evaluator_source("try:\n    from fast import evaluate\nexcept ImportError:\n    def evaluate(c):\n        return 0\n")


def test_make_executor_builds_a_local_pool_from_config():
    with pytest.raises(EvaluatorCompileError):
        make_executor(ExecutorConfig(), "def evaluate(:\n")
    ex = make_executor(ExecutorConfig(workers=1, timeout_seconds=5, memory_mb=256),
                       "def evaluate(c, e):\n    return c * e\n")
    try:
        assert ex.workers == 1
        assert ex.submit(EvalTask(2, 3)).result().score == 6.0
    finally:
        ex.close()


def test_unsendable_task_fails_alone_and_keeps_the_worker():
    p = make_pool("def evaluate(c):\n    return 1.0\n")
    try:
        out = p.submit(EvalTask(object())).result()
        assert "cannot send to the evaluator" in out.error and "must be JSON" in out.error
        assert p.submit(EvalTask("x")).result().score == 1.0
        assert len(p.cold_starts) == 1
    finally:
        p.close()


@needs_bwrap
def test_network_true_lets_the_evaluator_connect():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    p = make_pool("import socket\ndef evaluate(c, port):\n    socket.create_connection(('127.0.0.1', port), 2).close()\n"
                  "    return 1.0\n", network=True)
    try:
        assert p.submit(EvalTask("x", port)).result().error is None
    finally:
        p.close()
        server.close()


@needs_bwrap
def test_host_files_are_invisible_and_the_worker_is_unprivileged(tmp_path):
    secret = tmp_path / "refract.db"
    secret.write_text("customer data")
    src = ("import os\ndef evaluate(path):\n    seen = {}\n"
           "    for p in (path, '" + os.path.abspath(__file__) + "', '" + os.path.expanduser("~/.bash_history") + "'):\n"
           "        try:\n            seen[p] = open(p).read(20) if os.path.isfile(p) else os.listdir(p)\n"
           "        except OSError as e:\n            seen[p] = type(e).__name__\n"
           "    return 1.0, {'seen': seen, 'uid': os.getuid()}\n")
    p = make_pool(src)
    try:
        out = p.submit(EvalTask(str(secret))).result()
        assert set(out.side_info["seen"].values()) <= {"FileNotFoundError", "PermissionError"}
        if os.geteuid() == 0:
            assert out.side_info["uid"] == 65534
    finally:
        p.close()


@pytest.mark.parametrize("mode", ["auto", "process"])
def test_subprocesses_that_finish_are_fine_and_leftovers_replace_the_worker(mode):
    src = ("import subprocess, sys\n"
           "def evaluate(c):\n"
           "    if c == 'leave':\n        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
           "        return 0.5\n"
           "    out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True)\n"
           "    return float(out.stdout)\n")
    p = make_pool(src, isolation=mode)
    try:
        assert p.submit(EvalTask("run")).result().score == 42.0
        assert p.submit(EvalTask("run")).result().score == 42.0
        assert len(p.cold_starts) == 1
        assert p.submit(EvalTask("leave")).result().score == 0.5  # its result still counts
        assert p.submit(EvalTask("run")).result().score == 42.0
        assert len(p.cold_starts) == 2  # the worker with a stray child was replaced
    finally:
        p.close()


def test_an_image_url_is_refused_in_the_sandbox_and_a_captured_key_the_evaluator_used_is_prefixed():
    src = ("import refract_evaluator as oa\n"
           "def evaluate(c):\n    oa.log('mine too')\n"
           "    if c == 'url':\n        return 0.5, {'picture': oa.Image(url='https://example.com/x.png')}\n"
           "    return 0.5, {'log': 'the evaluator s own'}\n")
    p = make_pool(src)
    try:
        out = p.submit(EvalTask("url")).result()
        assert "is an image that cannot be stored" in out.error and "the sandbox has no network" in out.error
        out = p.submit(EvalTask("log")).result()
        assert out.error is None and out.side_info == {"log": "the evaluator s own", "_gepa_log": "mine too\n"}
    finally:
        p.close()
