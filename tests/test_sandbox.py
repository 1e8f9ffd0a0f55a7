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
    ("loop", "timed out after 1.5 s"),
    ("sleep", "timed out after 1.5 s"),
    ("alloc", "memory limit"),
    ("forkbomb", None),
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


@pytest.mark.skipif(isolation.mode(SandboxSpec()) != "bwrap", reason="network isolation needs bubblewrap")
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
