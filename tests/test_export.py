"""Export → import → export (issue 2 §8), on SQLite and on PostgreSQL: the same document, every
key the issue lists, and no API key anywhere."""

from __future__ import annotations

import json

import pytest

from engine.commands import send_command
from engine.records.export import FORMAT, export_run, import_run
from tests.support.scripted_lm import uninstall_script
from storage import repo
from storage.db import Database
from storage.errors import Conflict
from tests.support import toy
from tests.support.harness import run_toy, toy_config

SECRET = "sk-test-DO-NOT-LEAK-5f3c9a1e77"
KEY_ENV = "TEST_PROVIDER_API_KEY"


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


@pytest.fixture
def target(db, request, tmp_path):
    """A second, empty database on the same backend as ``db``."""
    if db.is_sqlite:
        other = Database(f"sqlite:///{tmp_path / 'imported.db'}")
        name = None
    else:
        server = request.getfixturevalue("pg_server")
        name, url = server.create_database()
        other = Database(url)
    other.create_all()
    yield other
    other.dispose()
    if name is not None:
        server.drop_database(name)


def _steer(ctx):
    """Human steering at step boundaries, so that the export has commands and comments."""
    seed = next(c for c in ctx.state.candidates.values() if c.origin == "seed")
    if ctx.step_index == 1:
        send_command(ctx.db, ctx.run_id, "feedback", {"candidate_id": seed.id, "text": "Keep it short."}, author="ana")
        send_command(ctx.db, ctx.run_id, "pin", {"candidate_id": seed.id}, author="ana", reason="baseline")
        repo.add_comment(ctx.db, ctx.run_id, seed.id, "bo", "why is this still here?")
    if ctx.step_index == 2:
        send_command(ctx.db, ctx.run_id, "edit", {"candidate_id": seed.id, "content": "start alpha bravo"},
                     author="bo", reason="hand-written")


@pytest.fixture
def finished_run(db, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    words = toy.WORDS
    cfg = toy_config(
        dataset=[{"id": f"tr{i}", "word": w} for i, w in enumerate(words[:5])],
        valset=[{"id": f"va{i}", "word": w} for i, w in enumerate(words[:5])],
        testset=[{"id": "te0", "word": words[0]}, {"id": "te1", "word": "zulu"}],
        reflection_lm={"model": "scripted/toy", "api_key_env": KEY_ENV, "num_retries": 0},
        budget={"max_metric_calls": 300, "stop_at_score": 1.0})
    run_id, _ = run_toy(db, tmp_path, cfg, price=1e-5, on_step=_steer)
    return run_id


def _json(doc) -> dict:
    """What `export --out` writes and `import` reads."""
    return json.loads(json.dumps(doc, ensure_ascii=False))


def test_export_import_export_is_the_same_document(db, target, finished_run):
    first = _json(export_run(db, finished_run))
    assert _json(export_run(db, finished_run)) == first  # exporting is deterministic
    assert import_run(target, first) == finished_run
    second = _json(export_run(target, finished_run))
    assert second == first

    # the steering history came along: commands (with their results) and comments
    kinds = [(c.kind, c.status, c.author) for c in repo.list_commands(target, finished_run)]
    assert kinds == [("feedback", "applied", "ana"), ("pin", "applied", "ana"), ("edit", "applied", "bo")]
    texts = sorted((c.kind, c.text) for c in repo.list_comments(target, finished_run))
    assert texts == [("comment", "why is this still here?"), ("feedback", "Keep it short.")]
    # applied_command_ids point at the imported commands (new integer ids in the new database)
    cmd_ids = {c.id for c in repo.list_commands(target, finished_run)}
    applied = [i for s in repo.list_steps(target, finished_run) for i in s.applied_command_ids]
    assert applied and set(applied) <= cmd_ids

    # importing the same run again is refused, naming it
    with pytest.raises(Conflict, match=finished_run):
        import_run(target, first)


def test_document_has_every_key_of_issue_2(db, finished_run):
    doc = _json(export_run(db, finished_run))
    assert doc["format"] == FORMAT
    run = doc["run"]
    assert {"id", "name", "config", "status", "totals"} <= set(run)
    assert run["id"] == finished_run and run["name"] == "toy" and run["status"] == "completed"
    assert {"metric_calls", "cost_usd", "tokens_in", "tokens_out", "seconds"} <= set(run["totals"])
    stored = repo.get_run(db, finished_run)
    assert run["totals"]["metric_calls"] == stored.metric_calls > 0
    assert run["totals"]["cost_usd"] == pytest.approx(stored.cost_usd) and stored.cost_usd > 0

    assert {e["split"] for e in doc["examples"]} == {"train", "val", "test"}
    for e in doc["examples"]:
        assert set(e) >= {"id", "split", "payload"}

    cand_keys = {"id", "parent_ids", "origin", "step", "content", "status", "pinned", "vetoed", "val_mean", "val_scores"}
    for c in doc["candidates"]:
        assert cand_keys <= set(c)
        assert c["origin"] in ("seed", "reflection", "merge", "sibling_merge", "human")
        assert c["status"] in ("accepted", "rejected", "failed"), c
    origins = {c["origin"] for c in doc["candidates"]}
    assert {"seed", "reflection", "human"} <= origins
    human = next(c for c in doc["candidates"] if c["origin"] == "human")
    seed = next(c for c in doc["candidates"] if c["origin"] == "seed")
    assert human["parent_ids"] == [seed["id"]] and seed["pinned"]

    ev_keys = {"candidate_id", "example_id", "score", "side_info", "error", "cached", "seconds"}
    assert doc["evaluations"] and all(ev_keys <= set(e) for e in doc["evaluations"])
    call_keys = {"purpose", "model", "tokens_in", "tokens_out", "cost_usd", "seconds", "cached", "error"}
    assert doc["lm_calls"] and all(call_keys <= set(c) for c in doc["lm_calls"])
    assert {c["purpose"] for c in doc["lm_calls"]} == {"reflection"}
    step_keys = {"index", "parent_ids", "proposal_ids", "accepted_ids", "metric_calls", "seconds"}
    assert doc["steps"] and all(step_keys <= set(s) for s in doc["steps"])
    assert [s["index"] for s in doc["steps"]] == list(range(len(doc["steps"])))

    # frontier: one entry per validation example, recomputed here from the exported scores
    val_ids = [e["id"] for e in doc["examples"] if e["split"] == "val"]
    assert [f["example_id"] for f in doc["frontier"]] == val_ids
    eligible = [c for c in doc["candidates"] if c["status"] == "accepted" and not c["vetoed"]]
    for f in doc["frontier"]:
        scores = {c["id"]: c["val_scores"][f["example_id"]] for c in eligible if f["example_id"] in c["val_scores"]}
        best = max(scores.values())
        assert f["best_score"] == best
        assert f["candidate_ids"] == sorted(c for c, s in scores.items() if s == best)

    best = doc["best"]
    assert set(best) >= {"candidate_id", "val_mean", "test_mean", "seed_test_mean", "test_cost_usd"}
    assert best["val_mean"] == 1.0 and best["test_mean"] == 0.5
    seed_test = [e["score"] for e in doc["evaluations"] if e["candidate_id"] == seed["id"] and e["example_id"] in
                 {x["id"] for x in doc["examples"] if x["split"] == "test"}]
    assert seed_test and best["seed_test_mean"] == pytest.approx(sum(seed_test) / len(seed_test))
    best_cand = next(c for c in doc["candidates"] if c["id"] == best["candidate_id"])
    assert best_cand["val_mean"] == 1.0 and len(best_cand["val_scores"]) == len(val_ids)
    # test examples appear in evaluations only for the best candidate and the seed (the held-out audit)
    test_ids = {e["id"] for e in doc["examples"] if e["split"] == "test"}
    assert ({e["candidate_id"] for e in doc["evaluations"] if e["example_id"] in test_ids}
            == {best["candidate_id"], seed["id"]})


def test_no_api_key_anywhere(db, finished_run, tmp_path):
    text = json.dumps(export_run(db, finished_run))
    assert SECRET not in text
    assert KEY_ENV in text  # the config keeps the *name* of the variable, for provenance
    assert "sk-test" not in text
    # nor in the database or the LM cache on disk (SQLite: the files are under tmp_path)
    if db.is_sqlite:
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_import_refuses_a_document_that_is_not_an_export(db):
    with pytest.raises(ValueError, match="not a Refract export"):
        import_run(db, {"format": "something-else/1", "run": {}})


def test_import_restores_the_approved_candidate_and_its_reason(db, target, tmp_path, capsys):
    from engine.cli import main as cli
    from tests.support.synthetic import generate_run

    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4)
    first, second = [c for c in repo.list_candidates(db, run_id) if c.content][1:3]
    send_command(db, run_id, "approve", {"candidate_id": first.id}, author="ana", reason="first look")
    send_command(db, run_id, "approve", {"candidate_id": second.id}, author="bo", reason="best on the hard cases")
    path = tmp_path / "run.json"
    assert cli(["export", run_id, "--out", str(path), "--db", db.url]) == 0
    assert cli(["import", str(path), "--db", target.url]) == 0
    assert repo.get_run(target, run_id).approved_candidate_id == second.id
    approval = [c for c in repo.list_commands(target, run_id) if c.kind == "approve"][-1]
    assert (approval.author, approval.reason, approval.status) == ("bo", "best on the hard cases", "applied")
    out = tmp_path / "prompt.txt"
    assert cli(["export", run_id, "--approved", "--out", str(out), "--db", target.url]) == 0
    assert json.loads(out.read_text()) == second.content  # two components: a JSON object
    # a document naming a candidate it lacks is refused before anything is written
    doc = json.loads(path.read_text())
    last = doc["commands"][-1]
    broken = dict(doc, commands=doc["commands"] + [dict(last, payload={"candidate_id": "cnothere"})])
    with pytest.raises(ValueError, match="commands: the approved candidate cnothere is not among"):
        import_run(target, broken)
    # a withdrawn approval stays withdrawn (the run deleted first: an import keeps its ids)
    from engine.admin import delete_run

    delete_run(target, run_id)
    withdrawn = dict(doc, commands=doc["commands"] + [dict(last, payload={"candidate_id": None})])
    assert repo.get_run(target, import_run(target, withdrawn)).approved_candidate_id is None
