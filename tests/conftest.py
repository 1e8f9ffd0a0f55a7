"""Shared fixtures: a database per test on every backend.

``db`` is parametrised over SQLite and PostgreSQL, so a storage test written once runs on both.
PostgreSQL comes from ``pg_server.PostgresServer``, started once per session on first use and
torn down at the end; each test gets a database of its own. When the server cannot be started
the PostgreSQL variants are skipped, with the reason in the skip message and in a banner at the
end of the run. Set REFRACT_REQUIRE_POSTGRES=1 to make that an error instead.
"""

from __future__ import annotations

import os

# Before anything imports litellm: use its bundled price list (offline; otherwise a test module
# that imports litellm first waits ~10 s for a download that cannot happen here).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The tests keep out of the checkout's data folder (REFRACT_DATA: the LM cache, the studio's drafts).
# In-process tests wrote their scripted LM's answers into the checkout's cache, where every later test
# and every later run of the suite found them (the cache key is the model's name and the messages, not
# the script that answered), and a developer's own cache filled with them. This folder is the
# session's (storage.db reads it once at import, for the drafts); ``_own_data_folder`` gives each test
# one of its own. The local model's file stays where ``make setup`` put it.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

_checkout_data = Path(os.environ.get("REFRACT_DATA", Path(__file__).resolve().parent.parent / "data"))
os.environ.setdefault("REFRACT_MODELS", str(_checkout_data / "models"))
os.environ["REFRACT_DATA"] = tempfile.mkdtemp(prefix="refract-tests-data-")
atexit.register(shutil.rmtree, os.environ["REFRACT_DATA"], True)

# Ctrl-C must work in the tests that press it. A shell without job control starts a background job
# (`make test &` in a script, `nohup`) with SIGINT ignored; Python keeps it ignored, and so do the
# processes it starts, so a Ctrl-C test's Ctrl-C did nothing: its run went on to its end (or to the
# 300 s timeout) and the test failed, for a reason that is not in the code under test.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402

from pg_server import PostgresServer, PostgresUnavailable  # noqa: E402
from storage.db import Database  # noqa: E402

_pg_failure: list[str] = []


@pytest.fixture(scope="session")
def pg_server():
    """The session's PostgreSQL server (skips the test when none can be started)."""
    try:
        server = PostgresServer.start()
    except (PostgresUnavailable, OSError) as exc:
        reason = f"PostgreSQL could not be started: {exc}"
        _pg_failure.append(reason)
        if os.environ.get("REFRACT_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason + " (REFRACT_REQUIRE_POSTGRES=1)", pytrace=False)
        pytest.skip("!!! " + reason)
    _servers.append(server)
    yield server
    _servers.remove(server)
    server.stop()


_servers: list[PostgresServer] = []


@pytest.fixture(autouse=True)
def _pg_watch(request):
    """Note the last test after which the session's PostgreSQL still ran: if it dies, the next
    PostgreSQL test's error names where."""
    yield
    for server in _servers:
        if server.proc is not None and server.proc.poll() is None:
            server.alive_after = request.node.nodeid


def _sqlite(tmp_path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'refract.db'}")


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _database(request, tmp_path, create: bool):
    name = None
    if request.param == "sqlite":
        database = _sqlite(tmp_path)
    else:
        server = request.getfixturevalue("pg_server")
        name, url = server.create_database()
        database = Database(url)
    if create:
        database.create_all()
    yield database
    database.dispose()
    if name is not None:
        server.drop_database(name)


@pytest.fixture(params=BACKENDS)
def db(request, tmp_path):
    """A fresh Database with its tables created, on SQLite and on PostgreSQL."""
    yield from _database(request, tmp_path, create=True)


@pytest.fixture(params=BACKENDS)
def blank_db(request, tmp_path):
    """A Database with no tables yet (to create an older schema in), on SQLite and PostgreSQL."""
    yield from _database(request, tmp_path, create=False)


@pytest.fixture
def sqlite_db(tmp_path):
    """A fresh SQLite Database with its tables created, for SQLite-only behaviour."""
    database = _sqlite(tmp_path)
    database.create_all()
    yield database
    database.dispose()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns the groups into its units of work
def pytest_collection_modifyitems(config, items):
    """The units of work of pytest-xdist (pytest.ini: two workers, ``--dist loadgroup``).

    - Every browser test is in one unit, run first, one test after another on one worker, as in a
      serial run: they share one Chromium and the session's studio, and their waits (a command
      seen in the other browser within seconds) are not meant for two studios, two engine
      workers and two Chromiums on two cores at once.
    - The ``local_model`` tests are one unit: each loads the 1.1 GB model on every core.
    - Every other module is a unit of its own, so a module-scoped fixture (a Dask cluster, a
      sandbox pool, a finished run) is built once, not once per worker.
    The browser unit is the longest (about 7 minutes in a full run), so it goes first. While it
    runs, the other worker takes the modules that run in one process (and a sandbox pool); those
    that start engine workers, studios, Dask clusters or the local model beside the test come
    after: with them beside it, the browser tests' waits were missed on a loaded CI machine.
    """
    for item in items:
        if item.get_closest_marker("browser"):
            group = "browser"
        elif item.get_closest_marker("local_model"):
            group = "local_model"
        else:
            group = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_unit_order)  # stable: the tests of a module keep their order


# modules that start processes of their own beside the test (besides a run's sandbox pool)
MANY_PROCESSES = {"test_api.py", "test_cli.py", "test_cli_interrupt.py", "test_concurrent_runs.py",
                  "test_dask_executor.py", "test_faults.py", "test_resume.py", "test_team_deployment.py"}


def _unit_order(item) -> int:
    if item.get_closest_marker("browser"):
        return 0
    if item.get_closest_marker("local_model") or item.nodeid.split("::")[0].split("/")[-1] in MANY_PROCESSES:
        return 2
    return 1


def pytest_terminal_summary(terminalreporter):
    if not _pg_failure:
        return
    terminalreporter.section("POSTGRESQL NOT TESTED", sep="!", red=True, bold=True)
    terminalreporter.line(_pg_failure[0], red=True, bold=True)
    terminalreporter.line("Every PostgreSQL variant of the storage tests was SKIPPED: SQLite alone was tested.",
                          red=True, bold=True)
    terminalreporter.line("Fix: run `make setup` as root (installs Debian's postgresql), then rerun `make test`.",
                          red=True)


@pytest.fixture(autouse=True)
def _own_data_folder(tmp_path, monkeypatch):
    """Each test's own LM cache (and drafts written through ``data_dir()``): see REFRACT_DATA above."""
    monkeypatch.setenv("REFRACT_DATA", str(tmp_path / "refract-data"))


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest runs its script as ``__main__`` and leaves it there; a later test in the
    same process that starts a ``spawn`` process (the storage concurrency tests) then had the child
    re-run that script (``AppTest.from_function``'s, which failed with a NameError)."""
    import sys

    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _close_databases():
    """Each test's databases opened through ``storage.db.open_db`` are closed after it: the
    process-wide table keeps them for the life of the process, and their pooled connections
    are open files (a worker of the suite passed 1024 of them, where ``select()`` stops working)."""
    yield
    from storage import db

    db.close_all()


_FD_LOG = os.environ.get("REFRACT_TEST_FD_LOG")


@pytest.fixture(autouse=True)
def _fd_watch(request):
    """With REFRACT_TEST_FD_LOG=FILE, append each test's change in this process's open files."""
    if not _FD_LOG:
        yield
        return
    before = _open_files()
    yield
    import gc

    gc.collect()
    after = _open_files()
    new = sorted(target for fd, target in after.items() if before.get(fd) != target)
    with open(_FD_LOG, "a") as log:
        log.write(f"{os.getpid()} {len(before)} {len(after)} {request.node.nodeid} {new} {_threads()}\n")


def _threads() -> list:
    import threading

    return sorted(t.name for t in threading.enumerate())


def _open_files() -> dict:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return found
