"""Imports are checked (issue 30, item 2): ``python -m engine import`` reads a document through the
models that write exports, and answers a malformed one with ``field: reason`` lines and exit 2,
the database unchanged (SQLite and PostgreSQL), never a traceback or an SQL statement; only a
finished run is imported. ``import-gepa`` likewise."""

from __future__ import annotations

import copy
import json
import re

import pytest

from engine import cli
from engine.records.export import export_run, import_run
from storage.db import Database
from tests.support.synthetic import generate_run
from tests.support.snapshot import _snapshot


@pytest.fixture(scope="module")
def document(tmp_path_factory) -> dict:
    """A valid export of a synthetic finished run (candidates, evaluations, LM calls, steps, commands)."""
    folder = tmp_path_factory.mktemp("document")
    source = Database(f"sqlite:///{folder / 'source.db'}")
    source.create_all()
    doc = json.loads(json.dumps(export_run(source, generate_run(source, n_candidates=12, n_val=4, n_train=4))))
    source.dispose()
    return doc


def _with(doc: dict, path: str, value) -> dict:
    """A copy of ``doc`` with the value at ``path`` (``run.totals.steps``, ``candidates.0.content``)
    replaced, or removed when ``value`` is ``DROP``."""
    out = copy.deepcopy(doc)
    *head, last = path.split(".")
    node = out
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(last) if isinstance(node, list) else last
    if value is DROP:
        del node[key]
    else:
        node[key] = value
    return out


DROP = object()
REFLECTED = lambda d: next(i for i, c in enumerate(d["candidates"]) if c["lm_call"] is not None)  # noqa: E731

# (id, the bad document from a good one, the line the answer must hold)
CASES = [
    ("no run", lambda d: _with(d, "run", DROP), "error: run: missing"),
    ("a JSON array", lambda d: [], "error: file: not a Refract export (a JSON object with format, run, candidates …) "
                                   "but a JSON array"),
    ("a candidate without content", lambda d: _with(d, "candidates.0.content", DROP), "error: candidates.0.content: missing"),
    ("an evaluation of an unknown candidate", lambda d: _with(d, "evaluations.0.candidate_id", "cnothere"),
     "error: evaluations.0.candidate_id: 'cnothere' names no candidate of the document"),
    ("an older format", lambda d: _with(d, "format", "refract-run/0"),
     "error: format: 'refract-run/0' is not a Refract export format this version reads (refract-run/2, or the older "
     "refract-run/1)"),
    ("lm_call 99999", lambda d: _with(d, f"candidates.{REFLECTED(d)}.lm_call", 99999),
     "lm_call: 99999 is not a position in lm_calls (it has "),
    ("status bogus", lambda d: _with(d, "run.status", "bogus"),
     "error: run.status: must be one of 'queued', 'running', 'paused', 'completed', 'failed' or 'stopped', not 'bogus'"),
    ("status queued", lambda d: _with(d, "run.status", "queued"),
     "error: run.status: 'queued' is not a finished run (completed, failed or stopped): only a finished run is "
     "imported, so that no worker claims it"),
    ("metric_calls many", lambda d: _with(d, "run.totals.metric_calls", "many"),
     "error: run.totals.metric_calls: must be a whole number, not 'many'"),
    ("cost lots", lambda d: _with(d, "evaluations.0.cost_usd", "lots"),
     "error: evaluations.0.cost_usd: must be a number, not 'lots'"),
    ("a count as true", lambda d: _with(d, "run.totals.steps", True),
     "error: run.totals.steps: must be a whole number, not True"),
    ("a count no column holds", lambda d: _with(d, "run.totals.tokens_in", 10**12),
     "error: run.totals.tokens_in: must be at most 2147483647, not 1000000000000"),
    ("a negative cost", lambda d: _with(d, "run.totals.cost_usd", -1.0),
     "error: run.totals.cost_usd: must be at least 0, not -1.0"),
    ("an unknown candidate status", lambda d: _with(d, "candidates.0.status", "best"),
     "error: candidates.0.status: must be one of "),
    ("a NUL in a name", lambda d: _with(d, "run.name", "a\x00b"), "error: run.name: must not contain a NUL character"),
    ("a name longer than its column", lambda d: _with(d, "run.name", "x" * 201),
     "error: run.name: must have at most 200 characters"),
    ("a time that is none", lambda d: _with(d, "run.created_at", "yesterday"),
     "error: run.created_at: must be a UTC time such as 2026-01-31T12:00:00.000000Z, not 'yesterday'"),
    ("an evaluation twice", lambda d: _with(d, "evaluations", d["evaluations"] + d["evaluations"][:1]),
     "error: evaluations: '"),
    ("an unknown parent", lambda d: _with(d, "candidates.1.parent_ids", ["cghost"]),
     "error: candidates.1.parent_ids: 'cghost' names no candidate of the document"),
    ("a step's command out of range", lambda d: _with(d, "steps.0.applied_command_ids", [7]),
     "error: steps.0.applied_command_ids: 7 is not a position in commands (it has "),
    ("an unknown field", lambda d: _with(d, "run.totals.metric_callz", 3), "error: run.totals.metric_callz: unknown field"),
    ("a config the engine refuses", lambda d: _with(d, "run.config.search", {"parents_per_step": 0}),
     "error: run.config.search.parents_per_step: must be at least 1, not 0"),
    ("a config naming the database as a key", lambda d: _with(d, "run.config.reflection_lm", {
        "model": "openai/gpt-4.1-mini", "api_base": "http://127.0.0.1:9/v1", "api_key_env": "REFRACT_DB"}),
     "error: run.config.reflection_lm.api_key_env: REFRACT_DB is one of the engine's own settings"),
    ("bad everywhere", lambda d: _with(d, "evaluations", [dict(e, score="x") for e in d["evaluations"]]),
     "error: file: … and "),
]


def test_malformed_documents_are_refused_with_field_and_reason(db, document, tmp_path, capsys):
    """Every row of CASES in turn (one database per backend: its set-up is what costs)."""
    import_run(db, document)  # the database holds a run already: the refusal must leave it as it is
    before = _snapshot(db)
    for name, bad_of, line in CASES:
        path = tmp_path / "bad.json"
        bad = bad_of(document)
        path.write_text(json.dumps(_with(bad, "run.id", "rother") if isinstance(bad, dict) and "run" in bad else bad))
        code = cli.main(["import", str(path), "--db", db.url])
        out, err = capsys.readouterr()
        assert code == 2, (name, out, err)
        assert line in err, (name, err)
        assert all(x.startswith("error: ") for x in err.splitlines()), (name, err)
        assert len(err.splitlines()) <= 21 and "Traceback" not in err and "INSERT" not in err and "SELECT" not in err
        assert _snapshot(db) == before, name


def test_a_document_whose_candidates_another_run_holds_is_refused(db, document, tmp_path, capsys):
    import_run(db, document)
    before = _snapshot(db)
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(_with(document, "run.id", "rcopy")))
    assert cli.main(["import", str(path), "--db", db.url]) == 2
    err = capsys.readouterr().err
    taken = re.fullmatch(r"error: candidate (\S+) already exists in this database \(in run (\S+)\); candidate ids are "
                         r"kept on import, so this document cannot be imported here\n", err)
    assert taken and taken[1] in {c["id"] for c in document["candidates"]} and taken[2] == document["run"]["id"], err
    assert _snapshot(db) == before


def test_import_gepa_refuses_candidates_that_are_not_texts(db, tmp_path, capsys):
    before = _snapshot(db)
    for body, line in (([{"x": 1}], "candidate 0: component 'x' must be text, not int"),
                       ([{}], "candidate 0 is not a dict of named texts"),
                       ({"x": "a"}, "expected a list of candidates")):
        run_dir = tmp_path / "gepa"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "candidates.json").write_text(json.dumps(body))
        (run_dir / "run_log.json").write_text(json.dumps([{"tasks": 3, "new_program_indices": "x", "merged": 1}]))
        assert cli.main(["import-gepa", str(run_dir), "--db", db.url]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and line in err and "Traceback" not in err, err
    assert _snapshot(db) == before


def test_import_gepa_reads_a_malformed_run_log_without_crashing(sqlite_db, tmp_path, capsys):
    """run_log.json is read, not trusted: entries of the wrong shape are skipped."""
    run_dir = tmp_path / "gepa"
    run_dir.mkdir()
    (run_dir / "candidates.json").write_text(json.dumps([{"current_candidate": "a"}, {"current_candidate": "b"}]))
    (run_dir / "run_log.json").write_text(json.dumps([
        {"tasks": 3, "new_program_indices": "x", "merged": 1}, "junk",
        {"tasks": [{"parent_idx": 99, "subsample_scores": ["x"]}, 5], "new_program_indices": [1, 1.5, True],
         "merged": True, "merged_entities": ["a"], "evaluated_val_indices": 4}]))
    (run_dir / "generated_best_outputs_valset").mkdir()
    (run_dir / "generated_best_outputs_valset" / "task_0").write_text("a file, not a folder")
    assert cli.main(["import-gepa", str(run_dir), "--db", sqlite_db.url]) == 0, capsys.readouterr().err
