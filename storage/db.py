"""Database setup: SQLite by default, any SQLAlchemy URL through REFRACT_DB.

Contract for callers (every backend keeps it; the storage tests run on SQLite and PostgreSQL):
- ``db.write()`` is the only way to change data. On SQLite it begins ``IMMEDIATE``, so
  concurrent read-modify-write cycles in different processes serialise instead of silently
  losing updates (pysqlite's default deferred transactions lose them); the writers of one
  process take turns on a lock first (``_writer_turn``). The block commits on success, rolls
  back on error: it is atomic.
- ``db.read()`` is a session on a separate reader engine that cannot write: SQLite connections
  run with ``PRAGMA query_only=ON`` and a plain ``BEGIN`` (readers never queue behind the
  writer), PostgreSQL connections default to read-only transactions. A write through it raises
  ``ReadOnly``. ``db.read(time_limit=s)`` also interrupts any statement that runs longer than
  ``s`` seconds (SQLite: a progress handler; PostgreSQL: ``statement_timeout``) with
  ``TimedOut``. Every studio read goes through ``studio_read(db)`` (each statement within
  ``studio_time_limit()``); a read the studio makes through the engine's functions (the report
  download) gets the same limit from ``studio_view(db)``.
- Opening a database (``open_db``, ``create_all``) creates the missing tables and upgrades an
  older schema in place (``storage.schema``).
- SQLAlchemy errors leaving these blocks are translated into ``storage.errors``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import Session, create_engine

from storage.errors import Conflict, ReadOnly, StorageError, TimedOut, Unavailable
from storage.schema import create_or_upgrade
from storage import settings

STUDIO_TIME_LIMIT_ENV = "REFRACT_STUDIO_QUERY_SECONDS"
STUDIO_TIME_LIMIT_DEFAULT = 10.0
_TIME_LIMIT = "refract_time_limit"  # key in a connection's info dict while a limited read runs
_PROGRESS_STEPS = 10_000  # SQLite VM instructions between two looks at the clock

def data_dir() -> Path:
    """The folder for the default database, the LM cache and the local model (REFRACT_DATA,
    read at each call so that tests and tools can point it elsewhere)."""
    return Path(os.environ.get("REFRACT_DATA", Path(__file__).resolve().parent.parent / "data"))


DEFAULT_DATA_DIR = data_dir()


def default_url() -> str:
    url = os.environ.get("REFRACT_DB")
    if url:
        return url
    folder = data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'refract.db'}"


def studio_time_limit() -> float:
    """Seconds one statement of a studio read may run (REFRACT_STUDIO_QUERY_SECONDS, default 10;
    0 means no limit), so that one heavy page cannot hold a database connection for long."""
    value = settings.value(STUDIO_TIME_LIMIT_ENV)
    return STUDIO_TIME_LIMIT_DEFAULT if value is None else value


# SQLite has one writer at a time. A writer that finds the database locked is put to sleep by
# SQLite's busy handler for 1, 2, 5, 10 … ms before it looks again, however soon the lock is
# free: when the threads of a wide step wrote at once (each proposal's LM call rows, counters,
# its child), a write that holds the lock for half a millisecond made the others sleep for 5 to
# 35 ms, on the path between a reflection's answer and its child's minibatch test. The threads
# of one process therefore take turns on a lock of their own, which wakes the next at once;
# other processes still meet the busy handler. Re-entrant, as SQLite itself would let a nested
# write of the same thread wait (and fail) as before; after the busy timeout a writer goes on
# to SQLite without its turn, so a writer that never returns stops nothing it did not stop before.
_WRITER_TURNS: dict[str, threading.RLock] = {}
_WRITER_TURNS_LOCK = threading.Lock()
BUSY_SECONDS = 30


def _writer_turn(url: str) -> threading.RLock:
    """The lock the writers of this process take turns on, one per SQLite URL."""
    with _WRITER_TURNS_LOCK:
        return _WRITER_TURNS.setdefault(url, threading.RLock())


@contextmanager
def _turn(lock: "threading.RLock | None") -> Iterator[None]:
    held = lock is not None and lock.acquire(timeout=BUSY_SECONDS)
    try:
        yield
    finally:
        if held:
            lock.release()


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _make_sqlite_engine(url: str, reader: bool) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": BUSY_SECONDS})
    event.listen(engine, "connect", _sqlite_pragmas)

    # pysqlite's own transaction handling is disabled so that we can say BEGIN ourselves.
    @event.listens_for(engine, "connect")
    def _no_autobegin(dbapi_conn, _record):
        dbapi_conn.isolation_level = None
        if reader:
            dbapi_conn.execute("PRAGMA query_only=ON")

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN" if reader else "BEGIN IMMEDIATE")

    if reader:
        @event.listens_for(engine, "before_cursor_execute")
        def _arm_time_limit(conn, _cursor, _statement, _params, _context, _many):
            # each statement gets the whole limit; without one the handler is removed
            seconds = conn.info.get(_TIME_LIMIT)
            dbapi_conn = conn.connection.dbapi_connection
            if not seconds:
                dbapi_conn.set_progress_handler(None, 0)
                return
            deadline = time.monotonic() + seconds
            dbapi_conn.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_STEPS)

    return engine


def _make_pg_engine(url: str, reader: bool) -> Engine:
    engine = create_engine(url, pool_pre_ping=True)
    if reader:
        @event.listens_for(engine, "connect")
        def _read_only(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            cur.close()
            dbapi_conn.commit()

    return engine


def studio_read(db: "Database"):
    """A read of the studio: ``db.read`` with ``studio_time_limit()``, so one heavy page raises
    ``TimedOut`` instead of holding a connection. The one way studio queries open a read."""
    return db.read(time_limit=studio_time_limit())


class _StudioView:
    """``db`` whose every read is a ``studio_read`` (writes unchanged): for studio work that goes
    through functions written for the engine, such as building the report."""

    def __init__(self, db: "Database") -> None:
        self._db = db

    def __getattr__(self, name: str):
        return getattr(self._db, name)

    def read(self, time_limit: float | None = None):
        return self._db.read(time_limit=time_limit if time_limit is not None else studio_time_limit())


def studio_view(db: "Database") -> "Database":
    """``db`` with the studio's time limit on every read (``_StudioView``)."""
    return _StudioView(db)  # type: ignore[return-value]


class Database:
    """One database, addressed by URL, with a writer and a read-only reader engine."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.is_sqlite = self.url.startswith("sqlite")
        self._turns = _writer_turn(self.url) if self.is_sqlite else None  # PostgreSQL: writers run side by side
        make = _make_sqlite_engine if self.is_sqlite else _make_pg_engine
        try:
            self.writer = make(self.url, reader=False)
            self.reader = make(self.url, reader=True)
        except (SQLAlchemyError, ImportError) as exc:
            raise Unavailable(f"cannot use the database URL {self.safe_url}: {exc}. Give a SQLAlchemy URL such as "
                              "sqlite:///data/refract.db or postgresql+psycopg://user@host/refract") from None

    def create_all(self) -> list[str]:
        """Create the missing tables and add the columns an older schema lacks (atomic,
        idempotent: see ``storage.schema``); returns the added ``table.column`` names."""
        try:
            return create_or_upgrade(self.writer)
        except SQLAlchemyError as exc:
            raise Unavailable(f"cannot create or upgrade the tables in {self.safe_url}: {exc}") from exc

    @property
    def safe_url(self) -> str:
        """The URL without its password, safe to show."""
        from sqlalchemy.engine import make_url

        try:
            return make_url(self.url).render_as_string(hide_password=True)
        except SQLAlchemyError:
            return "(an unparsable URL)"

    @contextmanager
    def write(self) -> Iterator[Session]:
        with _turn(self._turns), _translated(self.safe_url):
            with Session(self.writer, expire_on_commit=False) as session:
                with session.begin():
                    yield session

    @contextmanager
    def read(self, time_limit: float | None = None) -> Iterator[Session]:
        """A read-only session; with ``time_limit``, each statement may run that many seconds."""
        with _translated(self.safe_url, time_limit):
            # closing (not rolling back) ends the read transaction without expiring the
            # loaded objects, so callers can use them after the block
            with Session(self.reader, expire_on_commit=False) as session:
                if not time_limit:
                    yield session
                    return
                conn = session.connection()
                if self.is_sqlite:
                    conn.info[_TIME_LIMIT] = time_limit
                else:  # SET LOCAL: ends with this read transaction
                    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(time_limit * 1000))}")
                try:
                    yield session
                finally:
                    if conn.info.pop(_TIME_LIMIT, None) is not None:  # no expired handler back into the pool
                        conn.connection.dbapi_connection.set_progress_handler(None, 0)

    def dispose(self) -> None:
        self.writer.dispose()
        self.reader.dispose()


def _driver_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """The drivers' own exception bases and their "operational" kinds: raw cursor reads
    (``queries._fetch_raw``) raise them without SQLAlchemy's wrapping. psycopg's only once it is
    loaded (a PostgreSQL URL loads it): importing it costs a SQLite process a quarter second."""
    errors: list[type[Exception]] = [sqlite3.Error]
    operational: list[type[Exception]] = [sqlite3.OperationalError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        errors.append(psycopg.Error)
        operational.append(psycopg.OperationalError)
    return tuple(errors), tuple(operational)


@contextmanager
def _translated(where: str, time_limit: float | None = None) -> Iterator[None]:
    try:
        yield
    except IntegrityError as exc:
        raise Conflict(f"conflicting write in {where}: {exc.orig}") from exc
    except DBAPIError as exc:
        raise _from_driver(exc.orig, isinstance(exc, OperationalError), where, time_limit) from exc
    except SQLAlchemyError as exc:
        raise StorageError(f"database error in {where}: {exc}") from exc
    except _driver_errors()[0] as exc:
        raise _from_driver(exc, isinstance(exc, _driver_errors()[1]), where, time_limit) from exc


def _from_driver(orig: BaseException, operational: bool, where: str, time_limit: float | None) -> StorageError:
    message, sqlstate = str(orig), getattr(orig, "sqlstate", None) or ""
    if sqlstate == "57014" or message == "interrupted":  # query_canceled / SQLite's progress handler
        return TimedOut(f"a query on {where} took longer than its limit of {time_limit or 0:g} s and was stopped; "
                        f"reload to try again, or raise {STUDIO_TIME_LIMIT_ENV}")
    if sqlstate == "25006" or "readonly database" in message:  # read_only_sql_transaction
        return ReadOnly(f"refused to write through the read-only reader of {where}: {message}")
    if operational:
        return Unavailable(f"database {where} is unavailable: {message}")
    return StorageError(f"database error in {where}: {message}")


_OPEN: dict[str, Database] = {}


def open_db(url: str | None = None) -> Database:
    """The process-wide Database for a URL, created (with its tables) on first use."""
    url = url or default_url()
    if url not in _OPEN:
        db = Database(url)
        db.create_all()
        _OPEN[url] = db
    return _OPEN[url]


def close_all() -> None:
    """Dispose of every Database ``open_db`` made (their pooled connections are open files; a
    process that opens many URLs, as the test suite does, would otherwise run out)."""
    while _OPEN:
        _OPEN.popitem()[1].dispose()
