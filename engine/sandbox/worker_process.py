"""One sandboxed worker process seen from the engine: spawn, talk, time out, kill.

``SandboxSpec`` says how to isolate (limits, network, bubblewrap or plain process);
``WorkerProcess`` owns one warm worker and runs requests on it with a wall-clock deadline.
A failed worker raises ``WorkerFailed`` whose message is ready to show to the user; the
caller then discards the worker (``kill``) and starts a fresh one.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from engine.sandbox import isolation
from engine.sandbox.runtime import wire

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
STDERR_TAIL = 4000


@dataclass(frozen=True)
class SandboxSpec:
    """How every worker of an executor is isolated. ``isolation``: "auto" (bubblewrap when it
    works here, else a plain limited process), "bwrap" or "process"."""

    timeout_seconds: float = 30.0
    memory_mb: int = 1024
    network: bool = False
    isolation: str = "auto"
    capture_chars: int = 20_000
    open_files: int = 256
    processes: int = 128
    startup_seconds: float = 10.0  # allowance for interpreter start + evaluator imports
    python: str = field(default_factory=lambda: sys.executable)

    @property
    def file_mb(self) -> int:
        return min(self.memory_mb, 1024)


class WorkerFailed(Exception):
    """The worker timed out, crashed or broke the protocol; ``str()`` is the user message."""

    def __init__(self, message: str, side_info: Optional[dict] = None) -> None:
        super().__init__(message)
        self.side_info = side_info or {}


class TaskNotSendable(WorkerFailed):
    """The task itself is not JSON; the worker is unharmed and stays in service."""


class LoadError(Exception):
    """The evaluator file raised while loading (deterministic: every worker would fail)."""

    def __init__(self, message: str, traceback: str) -> None:
        super().__init__(message)
        self.traceback = traceback


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class SpawnedProcess:
    """A sandboxed worker process that has started (interpreter, bubblewrap, the worker's own
    runtime) and loaded nothing: no evaluator, no limits, no user input. ``WorkerProcess`` sends
    it its evaluator; ``engine.sandbox.warm`` keeps a few ready between runs. ``key`` says
    which specs it can serve (what is fixed at spawn time). The thread that creates one must
    outlive it: bubblewrap's --die-with-parent follows the thread that forked it."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.key = spawn_key(spec)
        self.started = time.monotonic()
        self.host_dir = tempfile.mkdtemp(prefix="refract-worker-")
        self.log = open(os.path.join(self.host_dir, "worker.log"), "w+b")
        try:
            argv, env, cwd, user = isolation.command(spec, RUNTIME_DIR / "worker.py", self.host_dir)
            self.sandboxed = argv[0].endswith("bwrap")
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=cwd,
                start_new_session=True, user=user, group=user, extra_groups=[] if user is not None else None,
            )
        except BaseException:
            self.log.close()
            shutil.rmtree(self.host_dir, ignore_errors=True)
            raise
        if self.sandboxed:  # the open log is all bubblewrap mode needs: nothing can leak on disk
            shutil.rmtree(self.host_dir, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def discard(self) -> None:
        """Kill it unused (its whole process group) and remove its files."""
        # Only while it is unreaped (dead or alive, its pid is still its own): once poll() (alive())
        # has reaped it, the pid is free, and after the pid numbers wrap a new process group can
        # have it (a PostgreSQL server, which starts a session of its own, was killed that way).
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            f.close()
        shutil.rmtree(self.host_dir, ignore_errors=True)


def spawn_key(spec: SandboxSpec) -> tuple:
    """What a spawned process is bound to before it loads anything (the interpreter, the
    isolation level, the network namespace, the size of its private /tmp); everything else
    (limits, timeout) is applied when it loads its evaluator."""
    return (spec.python, spec.isolation, spec.network, spec.file_mb)


class WorkerProcess:
    """A started, evaluator-loaded worker. Not thread-safe: one caller thread at a time.
    ``spawned``: a fresh ``SpawnedProcess`` for this spec to load the evaluator into (it must
    never have served anything); without it a new process is spawned here."""

    def __init__(self, spec: SandboxSpec, source: str, spawned: Optional[SpawnedProcess] = None) -> None:
        self.spec = spec
        self.started = time.monotonic()
        if spawned is None:
            spawned = SpawnedProcess(spec)
        elif spawned.key != spawn_key(spec):
            raise ValueError("this spawned process was started for another sandbox spec")
        self.proc, self.sandboxed, self._log, self._host_dir = spawned.proc, spawned.sandboxed, spawned.log, spawned.host_dir
        self._rfd, self._wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
        os.set_blocking(self._wfd, False)
        self._reader = wire.FrameReader()
        self._pending: list = []
        try:
            self._send({"type": "init", "source": source, "network": spec.network,
                        "capture_chars": spec.capture_chars, "pid_namespace": self.sandboxed,
                        "limits": {"memory_mb": spec.memory_mb, "file_mb": spec.file_mb,
                                   "open_files": spec.open_files, "processes": spec.processes}},
                       time.monotonic() + spec.startup_seconds)
            reply = self._recv(time.monotonic() + spec.startup_seconds + spec.timeout_seconds, "loading")
        except BaseException:
            self.close()
            raise
        if not isinstance(reply, dict):
            reply = {"type": type(reply).__name__}
        if reply.get("type") == "load_error":
            self.close()
            raise LoadError(str(reply.get("error")), str(reply.get("traceback", "")))
        if reply.get("type") != "ready":
            self.close()
            raise WorkerFailed(f"the worker sent {reply.get('type')!r} instead of 'ready'")
        self.has_validate = bool(reply.get("has_validate"))
        self.evaluate_shape = reply.get("evaluate_shape") if isinstance(reply.get("evaluate_shape"), dict) else {}
        self.cold_start_seconds = time.monotonic() - self.started

    def request(self, msg: dict, on_lm: Callable[[dict], dict]) -> dict:
        """Send one eval/validate request; answer its lm() calls with ``on_lm`` (time spent there
        does not count against the timeout); return the result frame. Raises WorkerFailed."""
        return self.result(msg["id"], self.send(msg), on_lm)

    def send(self, msg: dict) -> float:
        """The first half of ``request``: send it to the idle worker, which starts it at once;
        returns its deadline. Raises WorkerFailed (TaskNotSendable: the worker is unharmed)."""
        msg = dict(msg, cpu_seconds=self.spec.timeout_seconds * (os.cpu_count() or 1))
        deadline = time.monotonic() + self.spec.timeout_seconds
        self._send(msg, deadline)
        return deadline

    def result(self, msg_id: int, deadline: float, on_lm: Callable[[dict], dict]) -> dict:
        """The second half of ``request``: the result frame of the request ``msg_id`` sent."""
        while True:
            frame = self._recv(deadline, "evaluating")
            kind = frame.get("type") if isinstance(frame, dict) else None
            if kind == "lm":
                t0 = time.monotonic()
                answer = on_lm(frame)
                deadline += time.monotonic() - t0
                self._send(answer, deadline)
            elif kind == "result" and frame.get("id") == msg_id:
                return frame
            else:
                raise self._fail(f"the worker broke the protocol (sent {str(frame)[:80]!r})")

    def _send(self, obj: dict, deadline: float) -> None:
        try:
            data = wire.encode(obj)
        except (TypeError, ValueError) as exc:
            raise TaskNotSendable(f"cannot send to the evaluator: {exc} (candidates and examples must be JSON)") from None
        while data:
            if not select.select([], [self._wfd], [], max(0.0, deadline - time.monotonic()))[1]:
                raise self._fail(self._timeout_message())
            try:
                data = data[os.write(self._wfd, data):]
            except BlockingIOError:
                continue
            except OSError:
                raise self._fail(self._death_message()) from None

    def _recv(self, deadline: float, doing: str) -> dict:
        while not self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._rfd], [], [], remaining)[0]:
                raise self._fail(self._timeout_message(doing))
            try:
                chunk = os.read(self._rfd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                raise self._fail(self._death_message(doing))
            try:
                self._pending.extend(self._reader.feed(chunk))
            except wire.FrameError as exc:
                raise self._fail(f"the worker sent an invalid message ({exc})") from None
        return self._pending.pop(0)

    def _timeout_message(self, doing: str = "evaluating") -> str:
        if doing == "loading":
            limit = self.spec.timeout_seconds + self.spec.startup_seconds
            return f"evaluator.py timed out after {limit:g} s while loading (module-level code runs too long)"
        return (f"the evaluation timed out after {self.spec.timeout_seconds:g} s ([executor] timeout_seconds); "
                "its worker was killed and replaced")

    def _death_message(self, doing: str = "evaluating") -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "the worker closed its pipe unexpectedly"
        if self.sandboxed and code > 128:  # bubblewrap reports a child killed by signal N as 128+N
            code = -(code - 128)
        if code < 0:
            sig = -code
            if sig == signal.SIGSEGV:
                return "the evaluator crashed the worker (segmentation fault, SIGSEGV)"
            if sig == signal.SIGXCPU:
                return "the evaluator exceeded its CPU-time limit (SIGXCPU)"
            if sig == signal.SIGKILL:
                return "the worker was killed (SIGKILL), e.g. by the system running out of memory"
            return f"the worker died from {_signal_name(sig)}"
        if doing == "loading":
            return f"the worker exited with code {code} while starting (see side_info['stderr'])"
        return (f"the worker exited with code {code} during the evaluation "
                "(os._exit() or a fatal error in native code)")

    def _fail(self, message: str) -> WorkerFailed:
        self.kill()
        tail = self.stderr_tail()
        return WorkerFailed(message, {"stderr": tail} if tail else {})

    def stderr_tail(self) -> str:
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(0, size - STDERR_TAIL))
            return self._log.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal_kill(self) -> None:
        """SIGKILL the worker's whole process group (bubblewrap's --die-with-parent and its PID
        namespace take every process inside the sandbox down with it). Safe from any thread:
        the owner's pending read then sees end-of-file. Never once reaped (see ``discard``)."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """signal_kill, reap, close the pipes. Only the thread that owns the worker calls this."""
        self.signal_kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        self.kill()
        self._log.close()
        shutil.rmtree(self._host_dir, ignore_errors=True)
