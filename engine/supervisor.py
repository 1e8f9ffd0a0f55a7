"""Keeps exactly one engine worker running for a database while the studio server runs.

``WorkerSupervisor.start()`` takes an exclusive lock file named after the database URL (in the
data directory), starts ``python -m engine worker --db URL`` in its own process group and
restarts it with back-off if it dies. ``stop()`` sends SIGTERM to the group, waits, then
SIGKILL, and releases the lock. A second studio server on the same database finds the lock
taken and only watches: it takes over if the first one goes away. This module does not
import Streamlit; ``app.py`` calls it from the server's lifespan hook.

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
        while not self._stop.is_set():
            if not self._acquire():
                self._stop.wait(5.0)  # another server supervises this database's worker
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
        log.info("starting engine worker: %s", " ".join(self.command))
        self.proc = subprocess.Popen(self.command, cwd=self.cwd, start_new_session=True, stdin=subprocess.DEVNULL)

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
