"""Database setup: SQLite by default, any SQLAlchemy URL through REFRACT_DB.

Contract for callers:
- ``db.write()`` is the only way to change data. On SQLite it begins ``IMMEDIATE``, so
  concurrent read-modify-write cycles in different processes serialise instead of silently
  losing updates (see NOTES.md). The block commits on success, rolls back on error.
- ``db.read()`` is a read-only session on a separate engine with a plain ``BEGIN``, so readers
  (the studio) never queue behind the writer.
- SQLAlchemy errors leaving these blocks are translated into ``storage.errors``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from storage import models  # noqa: F401  (registers the tables)
from storage.errors import Conflict, StorageError, Unavailable

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


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _make_sqlite_engine(url: str, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_pragmas)

    # pysqlite's own transaction handling is disabled so that we can say BEGIN ourselves.
    @event.listens_for(engine, "connect")
    def _no_autobegin(dbapi_conn, _record):
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """One database, addressed by URL, with a writer and a reader engine."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self.is_sqlite = self.url.startswith("sqlite")
        try:
            if self.is_sqlite:
                self.writer = _make_sqlite_engine(self.url, immediate=True)
                self.reader = _make_sqlite_engine(self.url, immediate=False)
            else:
                self.writer = create_engine(self.url, pool_pre_ping=True)
                self.reader = self.writer
        except (SQLAlchemyError, ImportError) as exc:
            raise Unavailable(f"cannot use the database URL {self.safe_url}: {exc}. Give a SQLAlchemy URL such as "
                              "sqlite:///data/refract.db or postgresql+psycopg://user@host/refract") from None

    def create_all(self) -> None:
        try:
            SQLModel.metadata.create_all(self.writer)
        except SQLAlchemyError as exc:
            raise Unavailable(f"cannot create the tables in {self.safe_url}: {exc}") from exc

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
        with _translated(self.safe_url):
            with Session(self.writer, expire_on_commit=False) as session:
                with session.begin():
                    yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        with _translated(self.safe_url):
            # closing (not rolling back) ends the read transaction without expiring the
            # loaded objects, so callers can use them after the block
            with Session(self.reader, expire_on_commit=False) as session:
                yield session

    def dispose(self) -> None:
        self.writer.dispose()
        if self.reader is not self.writer:
            self.reader.dispose()


@contextmanager
def _translated(where: str) -> Iterator[None]:
    try:
        yield
    except IntegrityError as exc:
        raise Conflict(f"conflicting write in {where}: {exc.orig}") from exc
    except OperationalError as exc:
        raise Unavailable(f"database {where} is unavailable: {exc.orig}") from exc
    except SQLAlchemyError as exc:
        raise StorageError(f"database error in {where}: {exc}") from exc


_OPEN: dict[str, Database] = {}


def open_db(url: str | None = None) -> Database:
    """The process-wide Database for a URL, created (with its tables) on first use."""
    url = url or default_url()
    if url not in _OPEN:
        db = Database(url)
        db.create_all()
        _OPEN[url] = db
    return _OPEN[url]
