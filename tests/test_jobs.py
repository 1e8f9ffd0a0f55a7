"""The studio's jobs: queued by the new-run page, run by the engine worker (real sandbox, scripted
LM), polled by the page. Storage functions on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.runs import examples_of
from engine.worker.jobs import CHECK_LM, TRY_EVALUATOR, JobRunner
from engine.worker import Worker
from storage import jobs
from tests.support.harness import toy_config
from tests.support.scripted_lm import install_script, uninstall_script
from tests.support.studio import studio_database
from ui import keys as K

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_a_job_is_claimed_once_and_records_progress_and_outcome(db):
    job_id = jobs.submit_job(db, CHECK_LM, {"model": "scripted/x"}, author="ana")
    view = jobs.job_view(db, job_id)
    assert (view["status"], view["author"], view["payload"]) == ("pending", "ana", {"model": "scripted/x"})
    claimed = jobs.claim_job(db, "w1", (CHECK_LM,))
    assert claimed.id == job_id and claimed.status == "running"
    assert jobs.claim_job(db, "w2", (CHECK_LM,)) is None  # never twice
    jobs.update_job(db, job_id, "1 of 2", {"partial": [1]})
    assert jobs.job_view(db, job_id)["progress"] == "1 of 2"
    jobs.finish_job(db, job_id, None, error="it broke")
    view = jobs.job_view(db, job_id)
    assert (view["status"], view["error"], view["result"]) == ("failed", "it broke", {"partial": [1]})
    assert view["finished_at"].tzinfo is not None
    assert jobs.claim_job(db, "w1", (TRY_EVALUATOR,)) is None  # other kinds are not taken


def test_the_worker_tries_the_evaluator_in_the_sandbox(sqlite_db):
    cfg = toy_config(4)
    job_id = jobs.submit_job(sqlite_db, TRY_EVALUATOR, {"config": cfg.stored()})
    assert JobRunner(sqlite_db, "w").run_once() == job_id
    view = jobs.job_view(sqlite_db, job_id)
    assert view["status"] == "done", view["error"]
    results = view["result"]["results"]
    assert [r["example"] for r in results] == [k for k, split, _ in examples_of(cfg) if split in ("train", "val")][:4]
    assert all(0.0 <= r["score"] <= 1.0 and r["error"] is None for r in results)
    assert view["progress"] == "4 of 4 example(s) evaluated"


def test_a_job_that_cannot_run_fails_with_its_reason_and_the_runner_goes_on(sqlite_db):
    cfg = toy_config(2)
    stored = cfg.stored()
    stored["seed_candidate"] = None
    stored["objective"] = "something better"
    bad = jobs.submit_job(sqlite_db, TRY_EVALUATOR, {"config": stored})
    install_script(lambda messages, params: "pong")
    try:
        good = jobs.submit_job(sqlite_db, CHECK_LM, {"model": "scripted/ping"})
        runner = JobRunner(sqlite_db, "w")
        assert (runner.run_once(), runner.run_once(), runner.run_once()) == (bad, good, None)
    finally:
        uninstall_script()
    failed = jobs.job_view(sqlite_db, bad)
    assert failed["status"] == "failed" and failed["error"].startswith("there is no seed to try")
    check = jobs.job_view(sqlite_db, good)
    assert check["status"] == "done" and check["result"]["ok"] and "'pong'" in check["result"]["output"]


def test_new_run_page_queues_the_try_and_shows_the_result_the_worker_wrote(tmp_path, monkeypatch):
    db, at = _toy_words_form(tmp_path, monkeypatch)
    at.button(key=K.NEW_TRY).click().run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    assert any("up to 5 examples" in i.value for i in at.info)
    assert any("No engine worker is running" in w.value for w in at.warning)  # none in this test yet

    Worker(db).beat()  # a worker appears and runs the job
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    assert not any("hourglass" in i.icon for i in at.info) and not any("No engine worker" in w.value for w in at.warning)
    table = next(d.value for d in at.dataframe if {"example", "score", "seconds"} <= set(d.value.columns))
    assert len(table) == 5 and table["score"].between(0, 1).all()


def test_a_try_labels_the_rows_as_given_not_as_shuffled(sqlite_db):
    cfg = toy_config(6)
    pasted = [{"id": "w5", "word": "foxtrot"}, {"word": "alpha"}, {"id": "w2", "word": "charlie"}]
    job_id = jobs.submit_job(sqlite_db, TRY_EVALUATOR, {"config": cfg.stored(), "rows": pasted})
    JobRunner(sqlite_db, "w").run_once()
    results = jobs.job_view(sqlite_db, job_id)["result"]["results"]
    assert [r["example"] for r in results] == ["row 1 (w5)", "row 2", "row 3 (w2)"]


def _toy_words_form(tmp_path, monkeypatch):
    """The New run page with the toy_words example loaded into its form."""
    db = studio_database(tmp_path, monkeypatch)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[K.WHO] = "ana"
    at.switch_page(str(Path(APP).parent / "pages/new_run.py"))
    at.run()
    name = next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options if "toy_words" in o)
    at.selectbox(key=K.NEW_TEMPLATE).set_value(name).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    return db, at


def _new_run_page(tmp_path, monkeypatch):
    db, at = _toy_words_form(tmp_path, monkeypatch)
    at.toggle(key="new_plain_editor").set_value(True).run()
    return db, at


def test_a_run_whose_evaluator_failed_its_try_cannot_be_started(tmp_path, monkeypatch):
    from storage import repo

    db, at = _new_run_page(tmp_path, monkeypatch)
    good = at.text_area(key=K.NEW_EVALUATOR).value
    at.text_area(key=K.NEW_EVALUATOR).set_value(good + "\n\ndef evaluate(candidate, example):\n"
                                                       "    raise KeyError('answer')\n").run()
    at.button(key=K.NEW_TRY).click().run()
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    refusal = [e.value for e in at.error if e.value.startswith("Not started")]
    assert refusal and "failed on all 5 example(s)" in refusal[0] and "KeyError" in refusal[0], refusal
    assert repo.list_runs(db) == []

    at.text_area(key=K.NEW_EVALUATOR).set_value(good).run()  # fixed: another version, not refused by that try
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not [e.value for e in at.error if e.value.startswith("Not started")]
    assert len(repo.list_runs(db)) == 1
