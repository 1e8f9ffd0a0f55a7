"""Every LM attempt leaves a row (issue 13, defects 1 and 2): retries and their error kinds,
unusable answers, and calls cut off by a crash, all counted in the run's totals and shown by
``status`` and the run's status reason."""

from __future__ import annotations

import itertools
import threading

from engine.lm.client import LMClient  # first: offline price map

import litellm  # noqa: E402
import pytest  # noqa: E402

from engine import cli  # noqa: E402
from engine.records.export import export_run, import_run  # noqa: E402
from engine.lm.journal import recover_interrupted  # noqa: E402
from engine.runs import submit_run  # noqa: E402
from storage import lm_calls as lm_rows  # noqa: E402
from storage import repo  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.models import LMCall  # noqa: E402
from tests.support import toy  # noqa: E402
from tests.support.harness import assert_consistent_totals, lm_calls, run_toy, toy_config  # noqa: E402


def _flaky(every: int = 3):
    """The toy's script, but calls 1, 4, 7 … fail in turn as 429, 500 and a timeout, and call 2
    answers without a fenced block."""
    n = itertools.count()
    lock = threading.Lock()
    faults = itertools.cycle([litellm.RateLimitError("slow down", llm_provider="scripted", model="toy"),
                              litellm.InternalServerError("boom", llm_provider="scripted", model="toy"),
                              litellm.Timeout("too slow", model="toy", llm_provider="scripted")])

    def script(messages, params):
        with lock:
            i = next(n)
            fault = next(faults) if i % every == 1 else None
        if fault is not None:
            raise fault
        if i == 2:
            return "I would add a word, but I forgot the fence."
        return toy.script(messages, params)

    return script


def test_each_failed_attempt_is_a_row_counted_in_the_totals_and_shown(db, tmp_path, capsys):
    cfg = toy_config(6, reflection_lm={"model": "scripted/toy", "num_retries": 3},
                     search={"parents_per_step": 1, "proposals_per_parent": 2})
    run_id, _ = run_toy(db, tmp_path, cfg=cfg, script=_flaky(), price=1e-5)
    run = repo.get_run(db, run_id)
    calls = lm_calls(db, run_id)
    failed = [c for c in calls if c.status == "failed" and c.error_kind != "no_fence"]  # the request failed
    assert {c.error_kind for c in failed} == {"rate_limit", "server_error", "timeout"}
    assert all(c.error and c.cost_usd == 0 and c.attempt == 0 for c in failed)  # a first try that failed…
    retried = {(c.candidate_id, c.messages[-1]["content"]) for c in failed}
    answered = [d for d in calls if d.status == "done" or d.error_kind == "no_fence"]  # an answer came back
    assert all(any(d.attempt >= 1 and (d.candidate_id, d.messages[-1]["content"]) == key
                   for d in answered) for key in retried)  # …then its retry, a row of its own
    no_fence = [c for c in calls if c.error_kind == "no_fence"]
    # stored as a failed call with its reason, its answer kept: filtering by status finds it
    assert len(no_fence) == 1 and no_fence[0].status == "failed" and no_fence[0].answer
    assert no_fence[0].error == "unusable answer: the answer has no fenced code block"
    assert run.lm_calls == len(calls) and run.lm_calls_failed == len(failed) + 1 and run.lm_calls_interrupted == 0
    assert not [c for c in calls if c.status == "started"]
    assert_consistent_totals(db, run_id)
    assert "LM errors slowed it:" in run.status_reason and "429 ×" in run.status_reason

    assert cli.main(["status", run_id, "--db", db.url]) == 0
    out = capsys.readouterr().out
    assert f"LM calls: {run.lm_calls_failed} of {run.lm_calls} LM calls failed (" in out
    for label in ("429 ×", "5xx ×", "timeout ×", "no fenced block ×1"):
        assert label in out

    doc = export_run(db, run_id)
    assert doc["run"]["totals"]["lm_calls"] == {"total": run.lm_calls, "failed": run.lm_calls_failed, "interrupted": 0}
    assert sorted(c["error_kind"] or "" for c in doc["lm_calls"]) == sorted(c.error_kind or "" for c in calls)
    unusable = [c for c in doc["lm_calls"] if c["status"] == "failed" and c["answer"]]  # what a filter by status finds
    assert [(c["error_kind"], c["error"]) for c in unusable] == [("no_fence", "unusable answer: the answer has no "
                                                                             "fenced code block")]
    other = Database(f"sqlite:///{tmp_path / 'copy.db'}")
    other.create_all()
    assert export_run(other, import_run(other, doc)) == doc


MESSAGES = [{"role": "system", "content": "You improve text."}, {"role": "user", "content": "improve: " + "word " * 200}]


def test_a_call_in_flight_at_a_crash_is_recorded_interrupted_and_costed(db, tmp_path):
    run_id = submit_run(db, toy_config(4))
    started = lm_rows.start_lm_call(db, LMCall(run_id=run_id, purpose="reflection", model="openai/gpt-4.1-mini",
                                            messages=MESSAGES, step=1))
    assert repo.get_run(db, run_id).lm_calls == 1
    assert recover_interrupted(db, run_id) == 1
    call = repo.get_lm_call(db, started)
    expected_tokens = litellm.token_counter(model="openai/gpt-4.1-mini", messages=MESSAGES)
    assert call.status == "interrupted" and call.error_kind == "crash"
    assert call.tokens_in == expected_tokens > 200
    assert call.cost_usd == pytest.approx(litellm.cost_per_token(model="openai/gpt-4.1-mini",
                                                                 prompt_tokens=expected_tokens, completion_tokens=0)[0])
    run = repo.get_run(db, run_id)
    assert run.lm_calls_interrupted == 1 and run.cost_usd == pytest.approx(call.cost_usd)
    assert run.tokens_in == call.tokens_in
    assert recover_interrupted(db, run_id) == 0  # idempotent

    # the worker was only slow: its answer replaces the estimate, the totals do not double
    lm_rows.finish_lm_call(db, started, "done", answer="```\nx\n```", tokens_in=250, tokens_out=4, cost_usd=0.002)
    run = repo.get_run(db, run_id)
    assert run.lm_calls_interrupted == 0 and run.cost_usd == pytest.approx(0.002) and run.tokens_in == 250


def test_a_resumed_run_marks_the_dead_workers_calls_interrupted(db, tmp_path):
    cfg = toy_config(4)
    run_id = submit_run(db, cfg)
    lm_rows.start_lm_call(db, LMCall(run_id=run_id, purpose="reflection", model="scripted/toy", messages=MESSAGES))
    from tests.support.harness import run_optimizer
    from tests.support.scripted_lm import install_script

    install_script(toy.script)
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    run = repo.get_run(db, run_id)
    assert run.lm_calls_interrupted == 1
    assert [c.status for c in lm_calls(db, run_id)].count("interrupted") == 1
    assert "1 of" in run.status_reason and "interrupted by a crash" in run.status_reason
    assert_consistent_totals(db, run_id)


def test_error_kinds_of_provider_failures():
    from engine.lm.errors import error_kind

    assert error_kind(litellm.RateLimitError("x", llm_provider="p", model="m")) == "rate_limit"
    assert error_kind(litellm.Timeout("x", model="m", llm_provider="p")) == "timeout"
    assert error_kind(litellm.InternalServerError("x", llm_provider="p", model="m")) == "server_error"
    assert error_kind(litellm.InternalServerError("error - Expecting value: line 1 column 1 (char 0)",
                                                  llm_provider="p", model="m")) == "bad_body"
    assert error_kind(litellm.BadRequestError("x", llm_provider="p", model="m")) == "request"
    assert error_kind(litellm.APIConnectionError("x", llm_provider="p", model="m")) == "connection"


def test_lm_client_reports_each_attempt_to_the_journal(tmp_path):
    from engine.config import LMConfig
    from tests.support.scripted_lm import install_script

    seen = []

    class Journal:
        def begin(self, attempt):
            seen.append(("begin", attempt))

        def end(self, attempt, result):
            seen.append(("end", attempt, result.error_kind))

    fails = iter([litellm.RateLimitError("x", llm_provider="scripted", model="t")])

    def script(messages, params):
        exc = next(fails, None)
        if exc:
            raise exc
        return "ok"

    install_script(script)
    client = LMClient(tmp_path / "c", sleep=lambda s: None, backoff_base=0)
    res = client.complete(LMConfig(model="scripted/t", num_retries=2), MESSAGES, journal=Journal())
    assert res.ok and res.attempts == 2
    assert seen == [("begin", 0), ("end", 0, "rate_limit"), ("begin", 1), ("end", 1, None)]
    seen.clear()
    assert client.complete(LMConfig(model="scripted/t", num_retries=2), MESSAGES, journal=Journal()).cached
    assert seen == []  # a cache hit sends nothing


def test_an_older_database_gets_the_new_columns_with_their_defaults(tmp_path):
    from sqlalchemy import text

    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    db.create_all()
    run_id = submit_run(db, toy_config(2))
    with db.writer.begin() as conn:  # as a database made before these columns existed
        for table, column in (("run", "lm_calls_failed"), ("lmcall", "status"), ("lmcall", "error_kind")):
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
    db.dispose()
    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    db.create_all()
    assert repo.get_run(db, run_id).lm_calls_failed == 0
    call_id = repo.record_lm_call(db, LMCall(run_id=run_id, purpose="seed", model="m", messages=[]))
    assert repo.get_lm_call(db, call_id).status == "done"
