"""The sandboxed evaluator worker: compiles the evaluator once, then serves requests forever.

Run as ``python -I -B worker.py [--uid N]`` by ``engine.sandbox.worker_process``. Protocol on
fds 0/1 (frames of ``wire``); the worker moves them aside at start so that user code writing
to fd 1 cannot corrupt them (fd 1 then goes to fd 2, a log file the engine reads on a crash).

  engine → {"type":"init", source, limits…}          ← {"type":"ready"} | {"type":"load_error"}
  engine → {"type":"eval"|"validate", id, …}         ← {"type":"lm", …} → {"type":"lm_result"|"lm_error"}
                                                       ← {"type":"result", id, score, side_info, error, recycle}
Only the standard library and this folder are used; nothing here trusts the evaluator.
"""

from __future__ import annotations

import faulthandler
import inspect
import linecache
import os
import resource
import signal
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import outcome  # noqa: E402
import refract_evaluator  # noqa: E402
import wire  # noqa: E402

NOBODY = 65534


class Channel:
    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.reader = wire.FrameReader()
        self.pending: list = []
        self.pid = os.getpid()

    def send(self, obj) -> None:
        if os.getpid() != self.pid:  # a forked child of the evaluator must never answer
            os._exit(0)
        data = wire.encode(obj)
        while data:
            data = data[os.write(self.wfd, data):]

    def recv(self):
        while not self.pending:
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                os._exit(0)  # the engine went away
            self.pending.extend(self.reader.feed(chunk))
        return self.pending.pop(0)


def drop_privileges(uid: int) -> None:
    """Become an unprivileged user before any user input is read (engine runs as root)."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def apply_limits(limits: dict) -> None:
    mb = 1 << 20
    processes = limits["processes"]
    if os.getuid() != NOBODY:
        # RLIMIT_NPROC counts every process of the uid: a normal user's desktop may already run
        # hundreds, so a tight limit would break threads; the timeout still ends a fork bomb.
        processes = max(processes, 4096)
    for name, value in (("RLIMIT_AS", limits["memory_mb"] * mb), ("RLIMIT_FSIZE", limits["file_mb"] * mb),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0),
                        ("RLIMIT_NPROC", processes)):
        resource.setrlimit(getattr(resource, name), (value, value))


def cpu_limit_for_next_call(seconds: float) -> None:
    """RLIMIT_CPU counts the whole life of a warm worker, so each call gets used + budget
    (children inherit it, which bounds a stray child that escaped the process group)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    total = used.ru_utime + used.ru_stime
    resource.setrlimit(resource.RLIMIT_CPU, (int(total + seconds) + 1, resource.RLIM_INFINITY))


class Evaluator:
    def __init__(self, source: str) -> None:
        linecache.cache[outcome.EVALUATOR_FILE] = (len(source), None, source.splitlines(True), outcome.EVALUATOR_FILE)
        module = types.ModuleType("evaluator")
        module.__file__ = outcome.EVALUATOR_FILE
        sys.modules["evaluator"] = module
        exec(compile(source, outcome.EVALUATOR_FILE, "exec"), module.__dict__)
        self.evaluate = getattr(module, "evaluate", None)
        if not callable(self.evaluate):
            raise NameError("evaluator.py defines no function evaluate(candidate) or evaluate(candidate, example)")
        self.validate = getattr(module, "validate", None)
        params = inspect.signature(self.evaluate).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "opt_state"]
        self.takes_example = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)
        self.wants_opt_state = any(p.name == "opt_state" for p in params)
        # what the engine checks against the run's mode before it accepts the run
        self.shape = {"positional": len(positional), "varargs": any(p.kind == p.VAR_POSITIONAL for p in params),
                      "required": sum(1 for p in positional if p.default is p.empty),
                      "required_keywords": [p.name for p in params if p.kind == p.KEYWORD_ONLY
                                            and p.default is p.empty and p.name != "opt_state"]}

    def call(self, msg: dict):
        if not self.takes_example and msg["has_example"]:
            raise TypeError("this run has a dataset but evaluate() takes only the candidate: "
                            "define evaluate(candidate, example)")
        args = (msg["candidate"], msg["example"]) if self.takes_example else (msg["candidate"],)
        best = msg.get("opt_state") or []
        kwargs = {"opt_state": refract_evaluator.OptimizationState(best)} if self.wants_opt_state else {}
        return self.evaluate(*args, **kwargs)

    def check(self, candidate):
        if self.validate is None:
            return None
        verdict = self.validate(candidate)
        if verdict is None or verdict is True:
            return None
        return "validate() returned False" if verdict is False else str(verdict)


class Worker:
    def __init__(self, chan: Channel, init: dict) -> None:
        self.chan = chan
        self.capture = init["capture_chars"]
        self.network = init["network"]
        self.in_pid_namespace = init["pid_namespace"]
        self.forked = False
        os.register_at_fork(after_in_parent=self._note_fork)
        refract_evaluator._lm_transport = self._lm
        refract_evaluator._url_images_allowed = self.network

    def _note_fork(self) -> None:
        self.forked = True

    def _lm(self, messages, model, params):
        self.chan.send({"type": "lm", "messages": messages, "model": model, "params": params})
        reply = self.chan.recv()
        if reply.get("type") != "lm_result":
            raise refract_evaluator.LMError(reply.get("error") or "the engine did not answer the lm() call")
        return reply["text"]

    def strays(self) -> bool:
        """True if the evaluator left processes behind (then the engine replaces this worker)."""
        me, group = os.getpid(), os.getpgrp()
        if not self.in_pid_namespace:
            try:  # cheap: direct children still running (subprocess.Popen does not run at-fork hooks)
                with open(f"/proc/self/task/{me}/children") as f:
                    if f.read().strip():
                        return True
            except OSError:
                pass
            if not self.forked:
                return False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in (me, 1):
                continue
            if self.in_pid_namespace:
                return True
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[2]) == group:
                        return True
            except (OSError, IndexError, ValueError):
                continue
        return False

    def handle(self, evaluator: Evaluator, msg: dict) -> dict:
        log, out, err = (refract_evaluator.BoundedText(self.capture) for _ in range(3))
        refract_evaluator.set_log_context(log)
        sys.stdout, sys.stderr = out, err
        cpu_limit_for_next_call(msg["cpu_seconds"])
        self.forked = False
        reply = {"type": "result", "id": msg["id"], "score": 0.0, "side_info": {}, "error": None, "recycle": False}
        try:
            if msg["type"] == "validate":
                reply["error"] = evaluator.check(msg["candidate"])
            else:
                reply["score"], reply["side_info"] = outcome.normalise(evaluator.call(msg))
        except outcome.NotJSON as exc:
            reply["error"] = str(exc)
        except BaseException as exc:  # SystemExit too: user code must not stop the worker
            reply["error"], trace = outcome.describe(exc, self.network)
            reply["side_info"] = {"traceback": trace}
            reply["recycle"] = isinstance(exc, MemoryError)
        finally:
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            refract_evaluator.set_log_context(None)
        refract_evaluator.add_captured(reply["side_info"], {"log": log.getvalue(), "stdout": out.getvalue(),
                                                            "stderr": err.getvalue()})
        reply["recycle"] = reply["recycle"] or self.strays()
        return reply


def main() -> None:
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    faulthandler.enable()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes raise OSError instead
    if "--uid" in sys.argv:
        drop_privileges(int(sys.argv[sys.argv.index("--uid") + 1]))
    chan = Channel(rfd, wfd)
    init = chan.recv()
    apply_limits(init["limits"])
    worker = Worker(chan, init)
    try:
        evaluator = Evaluator(init["source"])
    except BaseException as exc:
        message, tb = outcome.describe(exc, init["network"])
        chan.send({"type": "load_error", "error": f"evaluator.py failed to load: {message}", "traceback": tb})
        return
    chan.send({"type": "ready", "has_validate": evaluator.validate is not None, "evaluate_shape": evaluator.shape})
    while True:
        msg = chan.recv()
        reply = worker.handle(evaluator, msg)
        try:
            chan.send(reply)
        except (TypeError, ValueError, MemoryError) as exc:
            chan.send({"type": "result", "id": msg["id"], "score": 0.0, "side_info": {}, "recycle": False,
                       "error": f"the evaluation's side_info could not be sent: {exc}"})


if __name__ == "__main__":
    main()
