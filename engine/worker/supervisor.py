"""Keeps exactly one engine worker running for a database while the studio server runs.

``WorkerSupervisor.start()`` takes an exclusive lock file named after the database URL (in the
data directory), starts ``python -m engine worker --db URL --parent PID`` in its own process
group and restarts it with back-off if it dies. ``stop()`` sends SIGTERM to the group, waits,
then SIGKILL, and releases the lock. This module does not import Streamlit; ``app.py`` calls it
from the server's lifespan hook.

The worker ends with the studio that started it, however the studio ends (``kill -9`` of its
process group included, which the worker's own session does not receive): ``--parent`` makes it
ask the kernel for SIGTERM when its parent dies (Linux's parent-death signal) and watch its parent
pid besides (``end_with_parent``). And the worker holds the lock too — it inherits the lock's
descriptor, and a lock lives as long as any process holds it — so a second studio server on the
same database finds the lock taken while the first studio *or its worker* lives, and only
watches: it starts a worker of its own once both are gone, never a second one beside a live one.

Not guaranteed: the lock is per machine, so two machines sharing one PostgreSQL database each
run a worker (which is safe — runs are leased — but is not "exactly one").
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("refract.supervisor")


class WorkerSupervisor:
    def __init__(self, db_url: str, lock_dir: Path, command: Optional[list[str]] = None, cwd: Optional[Path] = None,
                 min_backoff: float = 1.0, max_backoff: float = 30.0, stop_timeout: float = 10.0) -> None:
        self.db_url = db_url
        digest = hashlib.sha256(db_url.encode()).hexdigest()[:16]
        self.lock_path = Path(lock_dir) / f"worker-{digest}.lock"
        # the engine's own worker is told its parent (a test's stand-in command is not)
        self._engine_worker = command is None
        self.command = command or [sys.executable, "-m", "engine", "worker", "--db", db_url]
        self.cwd = cwd
        self.min_backoff, self.max_backoff, self.stop_timeout = min_backoff, max_backoff, stop_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.restarts = 0
        self.last_exit: Optional[int] = None
        self._lock_fd: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- public ------------------------------------------------------------------------------

    def start(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="refract-worker-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.stop_timeout + 5)
        self._terminate()
        self._release()

    @property
    def owns_worker(self) -> bool:
        return self._lock_fd is not None

    # -- internals ---------------------------------------------------------------------------

    def _loop(self) -> None:
        backoff = self.min_backoff
        watching = False
        while not self._stop.is_set():
            if not self._acquire():
                if not watching:
                    log.info("another studio or its engine worker holds %s: not starting a second worker for this "
                             "database; taking over when it ends", self.lock_path)
                    watching = True
                self._stop.wait(5.0)
                continue
            if self.proc is None or self.proc.poll() is not None:
                if self.proc is not None:
                    self.last_exit = self.proc.returncode
                    self.restarts += 1
                    log.warning("engine worker exited with %s; restarting in %.0f s", self.last_exit, backoff)
                    if self._stop.wait(backoff):
                        break
                    backoff = min(self.max_backoff, backoff * 2)
                started = time.monotonic()
                self._spawn()
                # a worker that stays up for a minute resets the back-off
                while not self._stop.is_set() and self.proc.poll() is None:
                    if time.monotonic() - started > 60:
                        backoff = self.min_backoff
                    self._stop.wait(0.5)

    def _spawn(self) -> None:
        command = self.command + (["--parent", str(os.getpid())] if self._engine_worker else [])
        log.info("starting engine worker: %s", " ".join(command))
        # its own session: a Ctrl-C of the terminal reaches the studio, which stops the worker in order;
        # the lock's descriptor: the worker holds the lock as long as it lives (see the module's docstring)
        self.proc = subprocess.Popen(command, cwd=self.cwd, start_new_session=True, stdin=subprocess.DEVNULL,
                                     pass_fds=(self._lock_fd,))

    def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def _acquire(self) -> bool:
        if self._lock_fd is not None:
            return True
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        return True

    def _release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent(parent: int, stop: threading.Event, poll_seconds: float = 1.0) -> None:
    """Set ``stop`` when process ``parent`` (the studio that started this worker) is gone: the
    kernel sends SIGTERM when it dies (Linux; the caller's SIGTERM handler sets ``stop``), and a
    thread watches the parent pid besides (other systems, and a parent that died before the
    request was made). Returns at once."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError) as exc:  # no libc prctl: the watch below still ends the worker
            log.warning("cannot ask for a parent-death signal (%s); watching the parent pid only", exc)

    def watch() -> None:
        while os.getppid() == parent:
            if stop.wait(poll_seconds):
                return
        log.warning("the studio that started this worker (pid %d) is gone: stopping", parent)
        stop.set()

    threading.Thread(target=watch, name="refract-parent-watch", daemon=True).start()
