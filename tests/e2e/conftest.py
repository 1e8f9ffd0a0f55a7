"""Browser end-to-end fixtures: a real ``streamlit run app.py`` in its own process group on a free
port, and headless Debian Chromium driven by Playwright (never ``playwright install``).

Screenshots go to ``test-artifacts/`` at 1440×900.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# how every browser of the tests and benchmarks is started: headless in a container (no sandbox, no
# GPU, no small /dev/shm) and quiet (no first-run pages, no background fetches timing would feel)
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
               "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 900}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Studio:
    def __init__(self, url: str, db_url: str, log: Path):
        self.url, self.db_url, self.log = url, db_url, log


def start_studio(tmp: Path, db_url: str, worker: bool, env: dict | None = None,
                 args: tuple[str, ...] = ()) -> tuple[subprocess.Popen, Studio]:
    """``env`` adds variables for the server and its supervised worker (e.g. a scripted LM);
    ``args`` adds options to ``streamlit run`` (e.g. ``--secrets.files=…``)."""
    port = _free_port()
    env = dict(os.environ, REFRACT_DB=db_url, REFRACT_DATA=str(tmp), REFRACT_WORKER="1" if worker else "0", **(env or {}))
    log = tmp / "streamlit.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless=true",
         f"--server.port={port}", "--server.address=127.0.0.1", "--server.fileWatcherType=none",
         "--browser.gatherUsageStats=false", *args],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                return proc, Studio(url, db_url, log)
        except OSError:
            time.sleep(0.3)
    stop_studio(proc)
    raise RuntimeError(f"streamlit did not become healthy in 60 s:\n{log.read_text()[-3000:]}")


def stop_studio(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def studio_with_worker(tmp: Path, latency: float, script: str = "tests.support.toy:script"):
    """A studio with its supervised engine worker on a fresh SQLite database, the scripted LM
    ``script`` (the toy's by default) answering after ``latency`` seconds; returns (process, studio) once the worker has beaten
    its first heartbeat (a test that clicks before the worker is up waits on its start-up, which
    on a loaded machine can take longer than the test's own timeouts)."""
    from storage import leases
    from storage.db import Database
    from tests.support.scripted_lm import SUBPROCESS_ENV

    url = f"sqlite:///{tmp}/e2e.db"
    db = Database(url)
    db.create_all()
    proc, studio = start_studio(tmp, url, worker=True, env={"REFRACT_SCRIPTED_LM": script,
                                                            "REFRACT_SCRIPTED_LATENCY": str(latency), **SUBPROCESS_ENV})
    studio.db = db
    deadline = time.monotonic() + 90
    while leases.latest_worker_beat(db) is None:
        if time.monotonic() > deadline:
            stop_studio(proc)
            raise RuntimeError(f"the studio's worker sent no heartbeat in 90 s:\n{studio.log.read_text()[-3000:]}")
        time.sleep(0.3)
    return proc, studio


@pytest.fixture(scope="session")
def worker_studio(tmp_path_factory):
    """One studio with its worker for every browser module that drives the toy task through the
    engine (each studio costs a Streamlit start and a worker's imports): the scripted toy LM
    answers after 0.2 s, or after the seconds a model string names (``scripted/toy@1.5``). The
    modules leave no run leased: each waits for its runs to complete or pause."""
    proc, studio = studio_with_worker(tmp_path_factory.mktemp("worker-studio"), latency=0.2)
    yield studio
    stop_studio(proc)


def ready(page) -> None:
    """The page has rendered (no status widget) without an exception. (Up to a minute for the app
    to show: on a loaded CI machine one page once took more than the default 30 s.)"""
    page.wait_for_selector('[data-testid="stApp"]', timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=30_000)
    assert page.locator('[data-testid="stException"]').count() == 0, \
        page.locator('[data-testid="stException"]').first.inner_text()


def until(check, what: str, timeout: float = 60.0):
    """``check()``'s first true value, asked every 0.25 s; fails saying ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.25)


def by_key(page, key: str):
    """A widget by its key; a control that sends commands carries its submission token after
    ``submission.SEP`` in its key (and so in its CSS class). Not a stale one: while a rerun moves
    a widget, the page holds its old element (``data-stale="true"``) beside the new one until the
    run ends (a toggle checked twice over failed a test in strict mode)."""
    from ui import submission

    fresh = ':not([data-stale="true"])'
    return page.locator(f'.st-key-{key}{fresh}, [class*="st-key-{key}{submission.SEP}"]{fresh}')


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `make setup` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=[*LAUNCH_ARGS,
                                    # several pages stand for several people, each with their page in
                                    # front: no page gets the throttled timers of a background tab
                                    "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                                    "--disable-backgrounding-occluded-windows"])
        yield b
        b.close()


def new_page(browser, studio_url: str | None = None, who: str | None = None):
    """A page in a fresh browser context (its own session); ``who`` is remembered as the sidebar
    name through the same cookie the sidebar sets."""
    ctx = browser.new_context(viewport=VIEWPORT)
    if who:
        ctx.add_cookies([{"name": "refract_user", "value": who, "url": studio_url}])
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    return pg


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed reports the state of each page still open, in its failure
    output (CI shows only text: a page that never drew the app should say whether it had a
    document, an app, a connection, an error)."""
    report = yield
    browser = item.funcargs.get("browser") if report.when == "call" and report.failed else None
    if browser is not None:
        report.sections.append(("pages open when it failed", _describe_pages(browser.contexts, item.name)))
        studio = item.funcargs.get("studio")
        if isinstance(studio, Studio) and studio.log.exists():
            report.sections.append(("the studio's log, last lines", studio.log.read_text()[-2000:]))
    return report


@pytest.fixture(autouse=True)
def _close_pages(request):
    """Every browser context a test opened is closed when it ends, failed or not: a page left open
    keeps its session re-running fragments in the studio and slows the tests that come after."""
    yield
    if "browser" in request.fixturenames:
        for ctx in request.getfixturevalue("browser").contexts:
            ctx.close()


def _describe_pages(contexts, test_name: str) -> str:
    lines = [f"load average {os.getloadavg()[0]:.1f}"]
    for i, ctx in enumerate(contexts):
        for j, pg in enumerate(ctx.pages):
            try:
                state = pg.evaluate("""() => ({ready: document.readyState,
                    app: document.querySelectorAll('[data-testid="stApp"]').length,
                    status: !!document.querySelector('[data-testid="stStatusWidget"]'),
                    connection: (document.querySelector('[data-testid="stApp"]') || {dataset: {}}).dataset.testConnectionState,
                    script: (document.querySelector('[data-testid="stApp"]') || {dataset: {}}).dataset.testScriptState,
                    exception: (document.querySelector('[data-testid="stException"]') || {}).innerText,
                    text: (document.body ? document.body.innerText : '').slice(0, 600)})""")
            except Exception as exc:  # a page that cannot answer is itself the finding
                state = f"no answer: {exc}"[:300]
            lines.append(f"context {i} page {j} {pg.url}: {state}")
            try:
                shot(pg, f"failed-{test_name}-{i}-{j}")
            except Exception:
                pass
    return "\n".join(lines)


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport=VIEWPORT)
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    ctx.close()


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
