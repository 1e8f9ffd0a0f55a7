"""The storage boundary on SQLite and PostgreSQL: the reader cannot write, studio reads have a
statement time limit, and an older schema is upgraded in place when the database is opened."""

from __future__ import annotations

import pytest
from sqlalchemy import MetaData, Table, inspect, text
from sqlmodel import SQLModel

from storage import queries, repo
from storage.db import STUDIO_TIME_LIMIT_ENV, Database, studio_time_limit
from storage.errors import ReadOnly, StorageError, TimedOut
from storage.models import Run
from storage.schema import _model_default

# counts to a billion: minutes of work for the database, so only a time limit ends it in time
ENDLESS = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) "
              "SELECT count(*) FROM c",
    "postgresql": "SELECT count(*) FROM generate_series(1, 1000000000)",
}


def _backend(db: Database) -> str:
    return "sqlite" if db.is_sqlite else "postgresql"


# ---------------------------------------------------------------- read-only reader


def test_a_write_through_the_reader_fails_and_the_database_is_unchanged(db):
    run_id = repo.create_run(db, "kept", "ana", {}, [])
    with pytest.raises(ReadOnly, match="read-only reader"):
        with db.read() as s:
            s.add(Run(name="smuggled"))
            s.flush()
    with pytest.raises(ReadOnly):
        with db.read() as s:
            s.connection().execute(text("UPDATE run SET name = 'changed'"))
    assert [r.name for r in repo.list_runs(db)] == ["kept"]
    assert repo.get_run(db, run_id).name == "kept"  # the reader still reads


def test_the_reader_is_a_separate_engine(db):
    assert db.reader is not db.writer


# ---------------------------------------------------------------- time limit


def test_a_statement_over_the_time_limit_is_stopped_with_a_storage_error(db):
    with pytest.raises(TimedOut, match=f"limit of 0.3 s.*{STUDIO_TIME_LIMIT_ENV}"):
        with db.read(time_limit=0.3) as s:
            s.connection().execute(text(ENDLESS[_backend(db)])).all()
    # the limit ended with that read: the same pooled connection runs a long-ish statement freely
    with db.read() as s:
        assert s.connection().execute(text("SELECT 1")).scalar() == 1
    with db.read(time_limit=30) as s:
        assert s.connection().execute(text("SELECT count(*) FROM run")).scalar() == 0


def test_the_studio_time_limit_setting(monkeypatch):
    monkeypatch.delenv(STUDIO_TIME_LIMIT_ENV, raising=False)
    assert studio_time_limit() == 10.0
    monkeypatch.setenv(STUDIO_TIME_LIMIT_ENV, "2.5")
    assert studio_time_limit() == 2.5
    monkeypatch.setenv(STUDIO_TIME_LIMIT_ENV, "soon")
    with pytest.raises(ValueError, match=f"{STUDIO_TIME_LIMIT_ENV}: 'soon' is not a number"):
        studio_time_limit()
    monkeypatch.setenv(STUDIO_TIME_LIMIT_ENV, "-1")
    with pytest.raises(ValueError, match="must be 0"):
        studio_time_limit()


def test_studio_queries_run_under_the_time_limit(sqlite_db, monkeypatch):
    from tests.support.synthetic import generate_run

    run_id = generate_run(sqlite_db, n_candidates=40, n_val=20)
    assert len(queries.val_scores(sqlite_db, run_id)) > 0
    monkeypatch.setenv(STUDIO_TIME_LIMIT_ENV, "0.000001")  # every statement is over the limit at once
    with pytest.raises(TimedOut):
        queries.val_scores(sqlite_db, run_id)
    assert len(repo.list_candidates(sqlite_db, run_id)) > 0  # the engine's reads have no limit


def test_every_studio_read_and_the_report_download_have_the_studio_time_limit(sqlite_db, monkeypatch):
    from engine.records.report import build_report
    from storage import access, activity, compare_queries, explain_queries, jobs
    from storage.db import studio_view
    from tests.support.synthetic import generate_run

    run_id = generate_run(sqlite_db, n_candidates=12, n_val=4)
    cands = [c.id for c in repo.list_candidates(sqlite_db, run_id)]
    job_id = jobs.submit_job(sqlite_db, "check_lm", {})
    limits: list = []
    read = Database.read

    def recording(self, time_limit=None):
        limits.append(time_limit)
        return read(self, time_limit)

    monkeypatch.setattr(Database, "read", recording)
    monkeypatch.setenv(STUDIO_TIME_LIMIT_ENV, "7")
    studio_reads = {
        "step_detail": lambda: explain_queries.step_detail(sqlite_db, run_id, 1),
        "step_indexes": lambda: explain_queries.step_indexes(sqlite_db, run_id),
        "run_lineage": lambda: explain_queries.run_lineage(sqlite_db, run_id),
        "pair_evaluations": lambda: compare_queries.pair_evaluations(sqlite_db, run_id, cands[0], cands[1]),
        "first_seed": lambda: compare_queries.first_seed(sqlite_db, run_id, cands[0]),
        "run_activity": lambda: activity.run_activity(sqlite_db, run_id),
        "worker_beats": lambda: activity.worker_beats(sqlite_db),
        "list_refusals": lambda: access.list_refusals(sqlite_db, run_id),
        "val_objectives": lambda: queries.val_objectives(sqlite_db, run_id),
        "job_view": lambda: jobs.job_view(sqlite_db, job_id),
        "report": lambda: build_report(studio_view(sqlite_db), run_id),
    }
    for name, call in studio_reads.items():
        limits.clear()
        call()
        assert limits and set(limits) == {7.0}, (name, limits)
    limits.clear()
    repo.list_candidates(sqlite_db, run_id)
    assert limits == [None]  # the engine's own reads have none


# ---------------------------------------------------------------- schema upgrade


def _older_schema() -> tuple[MetaData, dict[str, set[str]]]:
    """Today's tables without every column a release could have added later (those with a
    default or nullable that no key, index or constraint needs); and what was left out."""
    old, dropped = MetaData(), {}
    for table in SQLModel.metadata.sorted_tables:
        needed = {c.name for c in table.columns if c.primary_key or c.foreign_keys}
        for item in list(table.indexes) + list(table.constraints):
            needed |= {c.name for c in item.columns}
        keep = [c for c in table.columns
                if c.name in needed or (not c.nullable and _model_default(table, c) is None)]
        dropped[table.name] = {c.name for c in table.columns} - {c.name for c in keep}
        Table(table.name, old, *[c._copy() for c in keep])
    return old, dropped


def test_an_older_database_gets_the_new_columns_with_their_defaults(blank_db):
    old, dropped = _older_schema()
    assert {"config", "metric_calls", "step_mode", "best_val_mean"} <= dropped["run"]
    assert {"parent_ids", "pinned", "minibatch_keys"} <= dropped["candidate"]
    old.create_all(blank_db.writer)
    with blank_db.writer.begin() as conn:
        conn.execute(old.tables["run"].insert().values(id="rold", name="from an old release"))
        conn.execute(old.tables["candidate"].insert().values(id="cold", run_id="rold", content_hash="h", origin="seed"))

    added = blank_db.create_all()

    assert sorted(added) == sorted(f"{t}.{c}" for t, cols in dropped.items() for c in cols)
    insp = inspect(blank_db.writer)
    for table in SQLModel.metadata.sorted_tables:
        assert {c["name"] for c in insp.get_columns(table.name)} == {c.name for c in table.columns}
        assert {i.name for i in table.indexes} <= {i["name"] for i in insp.get_indexes(table.name)}
    run = repo.get_run(blank_db, "rold")
    assert (run.config, run.status, run.metric_calls, run.step_mode, run.best_val_mean) == ({}, "queued", 0, False, None)
    assert run.created_at is not None
    cand = repo.get_candidate(blank_db, "cold")
    assert (cand.content, cand.parent_ids, cand.pinned, cand.status) == ({}, [], False, "proposed")
    # the upgraded database works like a new one, and opening it again changes nothing
    new_id = repo.create_run(blank_db, "new", "ana", {"x": 1}, [("e1", "val", {"q": 1})])
    assert repo.get_run(blank_db, new_id).config == {"x": 1}
    assert blank_db.create_all() == []


def test_opening_an_up_to_date_database_adds_nothing(db):
    assert db.create_all() == []


def test_storage_errors_of_the_boundary_are_one_family():
    assert issubclass(TimedOut, StorageError) and issubclass(ReadOnly, StorageError)
