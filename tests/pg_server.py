"""A throwaway PostgreSQL server for the test suite.

``PostgresServer.start()`` runs ``initdb`` and ``postgres`` from Debian's
``/usr/lib/postgresql/<version>/bin`` (15 preferred; ``$REFRACT_PG_BIN`` overrides) in a fresh temporary directory, on a free
port of 127.0.0.1, with trust authentication and durability switched off (it is thrown away).
PostgreSQL refuses to run as root, so when we are root both run as the ``postgres`` user
(created by Debian's package), or ``nobody`` when that user does not exist.

The server gets ``PR_SET_PDEATHSIG`` so that it dies with the test process even when pytest is
killed; ``stop()`` shuts it down and removes its directory.

Run by hand for a scratch server: ``.venv/bin/python tests/pg_server.py`` prints a URL and
serves until Ctrl-C.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

PREFERRED_VERSION = "15"
START_TIMEOUT_S = 30.0


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why and what to install."""


def find_bin_dir() -> Path:
    """$REFRACT_PG_BIN if set, else Debian's server binaries: version 15 if installed, else the newest."""
    override = os.environ.get("REFRACT_PG_BIN")
    if override:
        if not (Path(override) / "postgres").is_file():
            raise PostgresUnavailable(f"REFRACT_PG_BIN={override} holds no `postgres` binary")
        return Path(override)
    root = Path("/usr/lib/postgresql")
    candidates = [d / "bin" for d in root.glob("*") if (d / "bin" / "postgres").is_file()] if root.is_dir() else []
    if not candidates:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin "
            "(install them with `apt-get install postgresql`, which `make setup` does as root)"
        )
    preferred = [c for c in candidates if c.parent.name == PREFERRED_VERSION]
    return preferred[0] if preferred else max(candidates, key=lambda c: float(c.parent.name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run as, or None when we are not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root, but neither a `postgres` nor a `nobody` user exists to run PostgreSQL")


def _die_with_parent() -> None:
    # runs in the child after the uid switch (which would otherwise clear the setting)
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGQUIT)


class PostgresServer:
    def __init__(self, bin_dir: Path, base: Path, port: int, user: pwd.struct_passwd | None) -> None:
        self.bin_dir = bin_dir
        self.base = base
        self.port = port
        self.user = user
        self.proc: subprocess.Popen | None = None
        self.alive_after = "(no test yet)"  # the last test after which it still ran (tests/conftest.py)

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def log_file(self) -> Path:
        return self.base / "postgres.log"

    @property
    def version(self) -> str:
        with self._admin() as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def start(cls) -> "PostgresServer":
        bin_dir = find_bin_dir()
        user = _server_user()
        base = Path(tempfile.mkdtemp(prefix="refract-pg-"))
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
        server = cls(bin_dir, base, _free_port(), user)
        try:
            server._initdb()
            server._launch()
        except BaseException:
            server.stop()
            raise
        return server

    def _run_as(self) -> dict:
        kwargs: dict = {"cwd": self.base, "env": {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TZ": os.environ.get("TZ", "UTC")}}
        if self.user is not None:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
            kwargs["env"]["HOME"] = str(self.base)
        return kwargs

    def _initdb(self) -> None:
        cmd = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
               "-E", "UTF8", "--locale=C", "--no-sync"]
        res = subprocess.run(cmd, capture_output=True, text=True, **self._run_as())
        if res.returncode != 0:
            raise PostgresUnavailable(f"initdb failed (exit {res.returncode}): {res.stderr.strip() or res.stdout.strip()}")

    def _launch(self) -> None:
        cmd = [
            str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=200", "-c", "shared_buffers=64MB",
        ]
        with open(self.log_file, "ab") as log:
            if self.user is not None:
                os.chown(self.log_file, self.user.pw_uid, self.user.pw_gid)
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent, **self._run_as())
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        last_error = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PostgresUnavailable(f"postgres exited with code {self.proc.returncode}: {self._log_tail()}")
            try:
                with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                                     connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                last_error = str(exc).strip()
                time.sleep(0.1)
        raise PostgresUnavailable(f"postgres did not accept connections within {START_TIMEOUT_S:.0f} s "
                                  f"({last_error}); log: {self._log_tail()}")

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: disconnects clients
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------ databases

    def _admin(self):
        import psycopg

        if self.proc is not None and self.proc.poll() is not None:
            # say why instead of a bare "connection refused" in every later test
            raise PostgresUnavailable(f"postgres exited with code {self.proc.returncode}; it was alive after "
                                      f"{self.alive_after}: {self._log_tail()}")
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True)

    def create_database(self) -> tuple[str, str]:
        """A new empty database: (name, SQLAlchemy URL)."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self.url(name)

    def drop_database(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    server = PostgresServer.start()
    print(server.url(), flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
