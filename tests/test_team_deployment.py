"""A team deployment on one machine, every part its own process started by the scripts in
scripts/team/: PostgreSQL, the studio (behind sign-in), two engine workers, a Dask scheduler and
a Dask worker. A small run whose evaluations go to the Dask scheduler is submitted and runs to the
end; every part's health check passes. It runs in the default test command (about 30-45 s on two
busy cores: the parts start at once and are polled every 0.1 s). What one machine cannot show (workers and Dask workers on
other machines, TLS) is stated in the README's "Deploying for a team"."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from engine.runs import submit_run
from storage import repo
from storage.activity import worker_beats
from storage.db import Database
from tests.support.harness import subprocess_env, toy_config

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parent.parent
TEAM = ROOT / "scripts" / "team"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(script: str, env: dict, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(TEAM / script), *args], cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _health(part: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([str(TEAM / "health.sh"), part], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=1).read().strip() == b"ok"
    except OSError:
        return False


def _until(check, what: str, timeout: float = 60.0) -> None:
    """Poll ``check`` every 0.1 s (each poll is cheap: no process is started for it)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_studio_refuses_a_network_address_without_sign_in(tmp_path):
    env = dict(os.environ, REFRACT_DB=f"sqlite:///{tmp_path}/x.db", REFRACT_SECRETS=str(tmp_path / "none.toml"),
               REFRACT_PORT=str(_port()), REFRACT_DATA=str(tmp_path))
    done = subprocess.run([str(TEAM / "studio.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 2
    assert "Refusing to serve the studio on 0.0.0.0 without sign-in" in done.stdout + done.stderr


def test_postgres_studio_two_workers_and_dask_as_separate_processes(pg_server, tmp_path):
    """Every part started at once (each waits for what it needs: a Dask worker retries the
    scheduler), readiness polled in the test, the health scripts run together at the end."""
    name, url = pg_server.create_database()
    sched, dash, studio_port = _port(), _port(), _port()
    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text(f'[auth]\nredirect_uri = "http://127.0.0.1:{studio_port}/oauth2callback"\n'
                            f'cookie_secret = "{secrets.token_hex(32)}"\nclient_id = "refract"\nclient_secret = "x"\n'
                            'server_metadata_url = "http://127.0.0.1:9/.well-known/openid-configuration"\n'
                            '[roles]\neditors = ["@example.com"]\n')
    env = subprocess_env(tmp_path, REFRACT_DB=url, DASK_PORT=str(sched), DASK_DASHBOARD_PORT=str(dash),
                         DASK_SCHEDULER=f"tcp://127.0.0.1:{sched}", DASK_DASHBOARD_URL=f"http://127.0.0.1:{dash}",
                         REFRACT_ADDRESS="127.0.0.1", REFRACT_PORT=str(studio_port), REFRACT_SECRETS=str(secrets_file),
                         REFRACT_STUDIO_URL=f"http://127.0.0.1:{studio_port}")
    db = Database(url)
    db.create_all()  # before the workers start, so that none of them races to create the tables
    procs = [_start("dask-scheduler.sh", env, tmp_path / "scheduler.log"),
             _start("dask-worker.sh", env, tmp_path / "dask-worker.log"),
             _start("studio.sh", env, tmp_path / "studio.log")]
    procs += [_start("worker.sh", env, tmp_path / f"worker{i}.log", "--lease", "5", "--poll", "0.1") for i in (1, 2)]
    try:
        cfg = toy_config(4, executor={"backend": "dask", "address": f"tcp://127.0.0.1:{sched}", "workers": 2,
                                      "timeout_seconds": 30}, budget={"max_steps": 1, "stop_at_score": None})
        run_id = submit_run(db, cfg, owner="ana@example.com")  # queued until a worker claims it
        # the health checks run while the run does: they need every part up, not the run done
        _until(lambda: _answers(f"http://127.0.0.1:{studio_port}/_stcore/health"), "the studio")
        _until(lambda: len([b for b in worker_beats(db) if b["age_s"] < 30]) == 2, "both workers' heartbeats")
        checks = {part: _health(part, env) for part in ("database", "studio", "dask", "worker")}
        _until(lambda: repo.get_run(db, run_id).status in ("completed", "failed"), "the run to finish", 120)
        run = repo.get_run(db, run_id)
        assert (run.status, run.metric_calls > 0) == ("completed", True), run.status_reason
        out = {part: proc.communicate(timeout=60)[0] for part, proc in checks.items()}
        assert {part: proc.returncode for part, proc in checks.items()} == dict.fromkeys(checks, 0), out
        assert "healthy: 2 engine worker(s) alive" in out["worker"]

        from distributed import Client

        with Client(f"tcp://127.0.0.1:{sched}", timeout=30) as client:  # the evaluations went through Dask
            assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.task_prefixes)) > 0
    finally:
        db.dispose()
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        pg_server.drop_database(name)
