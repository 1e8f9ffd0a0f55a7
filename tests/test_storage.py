"""Storage tests, run on SQLite and on a real PostgreSQL through the ``db`` fixture."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlmodel import select

from storage import repo
from storage.db import Database
from storage.errors import Conflict, StorageError, Unavailable
from storage.models import (
    Candidate,
    Command,
    Comment,
    Evaluation,
    Example,
    LMCall,
    Run,
    Step,
    WorkerBeat,
    utcnow,
)

# Text that has broken JSON columns before: quotes, backslashes, newlines, non-ASCII, emoji.
AWKWARD = 'He said "hi"\\n\n\tnaïve — 数字 ✓ 🎯'


def _add(db: Database, *rows):
    with db.write() as s:
        for row in rows:
            s.add(row)
            s.flush()
    return rows


def _seed(db: Database):
    """One run with one example and one candidate; returns (run, example, candidate)."""
    run = Run(name="seeded", owner="ana", config={"search": {"seed": 0}})
    _add(db, run)
    example = Example(run_id=run.id, key="ex-1", split="val", payload={"q": "2+2", "a": 4})
    cand = Candidate(run_id=run.id, content={"prompt": "Answer."}, content_hash="h" * 64, origin="seed")
    _add(db, example, cand)
    return run, example, cand


def _dump(row) -> dict:
    # datetimes are compared by test_datetimes_round_trip_as_utc_instants
    return {k: v for k, v in row.model_dump().items() if not k.endswith("_at")}


# ---------------------------------------------------------------- every table


def _rows_of_every_table(run, example, cand):
    return [
        Evaluation(run_id=run.id, candidate_id=cand.id, example_pk=example.pk, content_hash=cand.content_hash,
                   score=0.75, side_info={"feedback": AWKWARD}, error=None, seconds=0.5, cost_usd=0.001),
        LMCall(run_id=run.id, purpose="reflection", candidate_id=cand.id, step=1, model="openai/gpt-4.1-mini",
               messages=[{"role": "user", "content": AWKWARD}], answer="```\nnew\n```", tokens_in=120,
               tokens_out=30, cost_usd=0.0002, seconds=1.25),
        Step(run_id=run.id, index=0, parent_ids=[cand.id], parent_reasons={cand.id: "best on 3 examples"},
             proposal_ids=["c1", "c2"], accepted_ids=["c2"], metric_calls=9, predicted_speedup=1.8,
             events=[{"kind": "reflect", "start": 0.0, "end": 1.5, "candidate_id": "c1"}]),
        Command(run_id=run.id, kind="pin", payload={"candidate_id": cand.id}, author="ana", reason="looks right"),
        Comment(run_id=run.id, candidate_id=cand.id, author="bo", text=AWKWARD, kind="feedback"),
        WorkerBeat(id="worker-1", pid=4242, host="box", current_run_id=run.id),
    ]


def test_every_table_round_trips(db):
    run, example, cand = _seed(db)
    rows = _rows_of_every_table(run, example, cand)
    _add(db, *rows)
    with db.read() as s:
        assert _dump(s.get(Run, run.id)) == _dump(run)
        assert _dump(s.get(Example, example.pk)) == _dump(example)
        assert _dump(s.get(Candidate, cand.id)) == _dump(cand)
        for row in rows:
            pk = row.id
            assert pk is not None, f"{type(row).__name__} got no primary key"
            assert _dump(s.get(type(row), pk)) == _dump(row)


def test_each_table_is_listed_by_run(db):
    run, example, cand = _seed(db)
    _add(db, *_rows_of_every_table(run, example, cand))
    with db.read() as s:
        for model in (Example, Candidate, Evaluation, LMCall, Step, Command, Comment):
            rows = s.exec(select(model).where(model.run_id == run.id)).all()
            assert len(rows) == 1, model.__name__


def test_read_objects_stay_usable_after_the_block(db):
    run, _, _ = _seed(db)
    with db.read() as s:
        loaded = s.get(Run, run.id)
    assert loaded.name == "seeded" and loaded.config == {"search": {"seed": 0}}


def test_datetimes_round_trip_as_utc_instants(db):
    run, _, _ = _seed(db)
    with db.read() as s:
        loaded = s.get(Run, run.id)
    age = utcnow() - loaded.created_at
    assert timedelta(0) <= age < timedelta(minutes=5)
    assert loaded.created_at == run.created_at


# ---------------------------------------------------------------- JSON columns

JSON_VALUES = [
    {"nested": {"list": [1, 2.5, None, True, False], "empty": {}, "text": AWKWARD}},
    {"big": 2**53, "neg": -1, "float": 1e-12, "keys with spaces": "ok"},
]


@pytest.mark.parametrize("value", JSON_VALUES, ids=["nested", "numbers"])
def test_json_columns_round_trip(db, value):
    run = Run(name="json", config=value)
    _add(db, run)
    example = Example(run_id=run.id, key="k", split="train", payload=value)
    cand = Candidate(run_id=run.id, content={"system_prompt": AWKWARD, "few_shot": "x"}, content_hash="h",
                     origin="seed", parent_ids=["a", "b"], minibatch_keys=["k"])
    _add(db, example, cand)
    ev = Evaluation(run_id=run.id, candidate_id=cand.id, example_pk=example.pk, content_hash="h", side_info=value)
    _add(db, ev)
    with db.read() as s:
        assert s.get(Run, run.id).config == value
        assert s.get(Example, example.pk).payload == value
        loaded = s.get(Candidate, cand.id)
        assert loaded.content == {"system_prompt": AWKWARD, "few_shot": "x"}
        assert loaded.parent_ids == ["a", "b"]
        assert s.get(Evaluation, ev.id).side_info == value


@pytest.mark.parametrize("payload", ["plain text", 42, [1, "two"], None], ids=["str", "int", "list", "none"])
def test_example_payload_may_be_any_json(db, payload):
    run = Run(name="payloads")
    _add(db, run)
    example = Example(run_id=run.id, key="k", split="val", payload=payload)
    _add(db, example)
    with db.read() as s:
        assert s.get(Example, example.pk).payload == payload


def test_reassigned_json_column_is_saved(db):
    run, _, _ = _seed(db)
    with db.write() as s:
        loaded = s.get(Run, run.id)
        loaded.config = {**loaded.config, "name": "changed"}  # reassign: the documented way
    with db.read() as s:
        assert s.get(Run, run.id).config == {"search": {"seed": 0}, "name": "changed"}


# ---------------------------------------------------------------- constraints and errors


def test_duplicate_run_id_is_a_conflict(db):
    run, _, _ = _seed(db)
    with pytest.raises(Conflict):
        _add(db, Run(id=run.id, name="again"))


def test_duplicate_example_key_in_a_run_is_a_conflict(db):
    run, _, _ = _seed(db)
    with pytest.raises(Conflict, match="(?i)unique|duplicate"):
        _add(db, Example(run_id=run.id, key="ex-1", split="train"))
    other = Run(name="other")
    _add(db, other, Example(run_id=other.id, key="ex-1", split="train"))  # same key, other run: fine


def test_duplicate_evaluation_of_a_candidate_on_an_example_is_a_conflict(db):
    run, example, cand = _seed(db)
    _add(db, Evaluation(run_id=run.id, candidate_id=cand.id, example_pk=example.pk, content_hash="h"))
    with pytest.raises(Conflict):
        _add(db, Evaluation(run_id=run.id, candidate_id=cand.id, example_pk=example.pk, content_hash="h"))


def test_duplicate_step_index_in_a_run_is_a_conflict(db):
    run, _, _ = _seed(db)
    _add(db, Step(run_id=run.id, index=3))
    with pytest.raises(Conflict):
        _add(db, Step(run_id=run.id, index=3))


def test_unknown_foreign_key_is_a_conflict(db):
    with pytest.raises(Conflict):
        _add(db, Example(run_id="r-does-not-exist", key="k", split="val"))


def test_a_failed_write_leaves_nothing_behind_and_the_database_usable(db):
    run, _, _ = _seed(db)
    with pytest.raises(Conflict):
        with db.write() as s:
            s.add(Example(run_id=run.id, key="new", split="val"))
            s.flush()
            s.add(Example(run_id=run.id, key="ex-1", split="val"))  # duplicate: the whole block rolls back
    with pytest.raises(ValueError):
        with db.write() as s:
            s.add(Example(run_id=run.id, key="newer", split="val"))
            raise ValueError("our own errors pass through untranslated")
    with db.read() as s:
        keys = s.exec(select(Example.key).where(Example.run_id == run.id)).all()
    assert keys == ["ex-1"]
    _add(db, Example(run_id=run.id, key="after", split="val"))


def test_storage_errors_form_one_family():
    assert issubclass(Conflict, StorageError) and issubclass(Unavailable, StorageError)


@pytest.mark.parametrize("url", [
    "sqlite:////nonexistent-refract-dir/nested/refract.db",
    "postgresql+psycopg://nobody@127.0.0.1:1/refract",
], ids=["sqlite-missing-dir", "postgres-nothing-listening"])
def test_unreachable_database_is_unavailable(url):
    database = Database(url)
    with pytest.raises(Unavailable):
        database.create_all()
    with pytest.raises(Unavailable):
        with database.read() as s:
            s.exec(select(Run)).all()
    database.dispose()


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://host/x", "mysql://user@127.0.0.1/x"],
                         ids=["malformed", "unknown-dialect", "missing-driver"])
def test_malformed_url_is_unavailable(url):
    with pytest.raises(Unavailable):
        Database(url).create_all()


def test_password_is_hidden_in_safe_url():
    database = Database("postgresql+psycopg://ana:s3cret@127.0.0.1:1/refract")
    assert "s3cret" not in database.safe_url
    with pytest.raises(Unavailable) as info:
        database.create_all()
    assert "s3cret" not in str(info.value)


# ---------------------------------------------------------------- SQLite specifics


def test_sqlite_connections_get_the_safety_pragmas(sqlite_db):
    with sqlite_db.read() as s:
        conn = s.connection()
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL


def test_sqlite_reader_does_not_wait_for_an_open_write(sqlite_db):
    run, _, _ = _seed(sqlite_db)
    inside, release = threading.Event(), threading.Event()

    def writer():
        with sqlite_db.write() as s:
            s.exec(text("UPDATE run SET name = 'uncommitted' WHERE id = :id").bindparams(id=run.id))
            inside.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert inside.wait(10)
        with sqlite_db.read() as s:  # WAL: sees the last commit, immediately
            assert s.get(Run, run.id).name == "seeded"
    finally:
        release.set()
        t.join()
    with sqlite_db.read() as s:
        assert s.get(Run, run.id).name == "uncommitted"


# ---------------------------------------------------------------- concurrency

PROCESSES, INCREMENTS = 3, 200


def _bump_metric_calls(url: str, run_id: str, n: int) -> None:
    """Child process: the repository's atomic UPDATE run SET metric_calls = metric_calls + 1."""
    database = Database(url)
    for _ in range(n):
        repo.bump_run(database, run_id, metric_calls=1)
    database.dispose()


def _read_modify_write_metric_calls(url: str, run_id: str, n: int) -> None:
    """Child process: load the run, add one in Python, write it back, all inside db.write()."""
    database = Database(url)
    for _ in range(n):
        with database.write() as s:
            run = s.get(Run, run_id)
            run.metric_calls += 1
    database.dispose()


def _run_in_processes(target, url: str, run_id: str) -> None:
    ctx = multiprocessing.get_context("spawn")  # litellm's native code does not survive fork
    procs = [ctx.Process(target=target, args=(url, run_id, INCREMENTS)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES, "a writer process failed; see its traceback above"


def _metric_calls(db: Database, run_id: str) -> int:
    with db.read() as s:
        return s.get(Run, run_id).metric_calls


def test_concurrent_atomic_increments_are_never_lost(db):
    run, _, _ = _seed(db)
    _run_in_processes(_bump_metric_calls, db.url, run.id)
    assert _metric_calls(db, run.id) == PROCESSES * INCREMENTS


def test_sqlite_read_modify_write_in_write_blocks_is_serialised(sqlite_db):
    # Without BEGIN IMMEDIATE this ends near 200, not 600 (pysqlite's deferred transactions lose updates).
    run, _, _ = _seed(sqlite_db)
    _run_in_processes(_read_modify_write_metric_calls, sqlite_db.url, run.id)
    assert _metric_calls(sqlite_db, run.id) == PROCESSES * INCREMENTS


# ---------------------------------------------------------------- leases


def _claim_many(url: str, worker: str, out) -> None:
    from storage import leases as r

    database = Database(url)
    got = []
    while (rid := r.claim_run(database, worker, 60)) is not None:
        got.append(rid)
    out.put(got)
    database.dispose()


def test_concurrent_workers_never_claim_the_same_run(db):
    """3 worker processes race for 60 queued runs: each run is claimed exactly once (on
    PostgreSQL this needs FOR UPDATE SKIP LOCKED; read-then-update double-claimed)."""
    import multiprocessing as mp

    for i in range(60):
        repo.create_run(db, f"r{i}", "", {}, [])
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_many, args=(db.url, f"w{i}", out)) for i in range(3)]
    for p in procs:
        p.start()
    claims = [rid for _ in procs for rid in out.get(timeout=120)]
    for p in procs:
        p.join(30)
    assert len(claims) == 60
    assert len(set(claims)) == 60


def test_a_run_stored_held_by_its_own_process_is_never_given_to_another_worker(db):
    """``python -m engine run`` stores its run already leased to itself: queued first and claimed
    after, a studio's worker polling the same database took it in between ("claimed by another
    worker"; CI saw it once as a failed browser test)."""
    from storage import leases

    held = repo.create_run(db, "mine", "", {}, [], held_by=("cli-1", 60))
    queued = repo.create_run(db, "anyone's", "", {}, [])
    run = repo.get_run(db, held)
    assert (run.status, run.lease_owner) == ("running", "cli-1") and run.started_at is not None
    assert leases.claim_run(db, "studio-worker", 60) == queued
    assert leases.claim_run(db, "studio-worker", 60) is None
    assert leases.renew_lease(db, held, "cli-1", 60)  # its own process keeps it like any claim


def test_the_writers_of_one_process_take_turns_before_sqlite(sqlite_db):
    """A second writer of this process waits on the process's own lock while the first holds the
    write, and never meets SQLite's lock (whose busy handler sleeps 1, 2, 5 … ms before it looks
    again: the answers of a wide step's reflections, written together, waited 5 to 35 ms each).
    Shown with SQLite's busy timeout at 0, where meeting its lock fails at once."""
    from sqlalchemy import event

    sqlite_db.writer.dispose()
    event.listen(sqlite_db.writer, "connect", lambda conn, _rec: conn.execute("PRAGMA busy_timeout=0"))
    holding, release, failures = threading.Event(), threading.Event(), []

    def first() -> None:
        with sqlite_db.write() as s:
            s.add(Run(name="first", owner="ana", config={}))
            s.flush()  # BEGIN IMMEDIATE and an INSERT: SQLite's write lock is this thread's
            holding.set()
            release.wait(10)

    def second() -> None:
        try:
            with sqlite_db.write() as s:
                s.add(Run(name="second", owner="ana", config={}))
        except StorageError as exc:
            failures.append(exc)

    a = threading.Thread(target=first)
    a.start()
    assert holding.wait(10)
    b = threading.Thread(target=second)
    b.start()
    b.join(0.3)
    release.set()
    a.join(10)
    b.join(10)
    assert failures == []
    assert sorted(r.name for r in repo.list_runs(sqlite_db)) == ["first", "second"]
