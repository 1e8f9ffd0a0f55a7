"""Provenance of every line (``engine.records.blame`` and ``python -m engine blame``) on a run whose
lineage is known: a seed, two reflections, a person's edit and a merge of the two branches."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from engine.records.blame import blame
from storage import repo
from storage.db import Database
from storage.errors import NotFound
from storage.models import Candidate
from tests.support.harness import PYTHON, subprocess_env

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

# id: (origin, parents, step, {component: text}); listed oldest first
LINEAGE = {
    "cseed": ("seed", [], 0, {"rules": "A\nB\nC", "format": "json"}),
    "cref1": ("reflection", ["cseed"], 1, {"rules": "A\nB1\nC\nD", "format": "json"}),
    "chum": ("human", ["cref1"], 2, {"rules": "E\nA\nB1\nC\nD", "format": "json"}),
    "cref2": ("reflection", ["cseed"], 2, {"rules": "A\nB\nC2", "format": "yaml"}),
    "cmerge": ("merge", ["chum", "cref2"], 3, {"rules": "E\nA\nB1\nC2\nD\nF", "format": "yaml"}),
}


def make_lineage(db: Database) -> str:
    run_id = repo.create_run(db, "blame", "test", {}, [("x0", "train", {})], status="completed")
    for n, (cid, (origin, parents, step, content)) in enumerate(LINEAGE.items()):
        repo.save_candidate(db, Candidate(id=cid, run_id=run_id, content=content, content_hash=cid, origin=origin,
                                          parent_ids=parents, step=step, status="accepted",
                                          created_at=T0 + timedelta(seconds=n)))
    repo.set_run_fields(db, run_id, best_candidate_id="cmerge")
    return run_id


def who(lines, component):
    return [(ln["text"], ln["candidate_id"], ln["step"], ln["origin"]) for ln in lines if ln["component"] == component]


def test_blame_follows_reflections_an_edit_and_a_merge(db):
    run_id = make_lineage(db)
    lines = blame(db, run_id)  # the best candidate: the merge
    assert who(lines, "rules") == [
        ("E", "chum", 2, "human"),  # the person's edit, through the merge's first parent
        ("A", "cseed", 0, "seed"),
        ("B1", "cref1", 1, "reflection"),
        ("C2", "cref2", 2, "reflection"),  # from the merge's second parent
        ("D", "cref1", 1, "reflection"),
        ("F", "cmerge", 3, "merge"),  # in neither parent: written by the merge
    ]
    assert who(lines, "format") == [("yaml", "cref2", 2, "reflection")]
    assert [ln["line_no"] for ln in lines if ln["component"] == "rules"] == [1, 2, 3, 4, 5, 6]
    assert set(lines[0]) == {"component", "line_no", "text", "candidate_id", "step", "origin"}


def test_blame_of_a_named_candidate_and_bad_names(db):
    run_id = make_lineage(db)
    assert who(blame(db, run_id, "cref1"), "rules") == [
        ("A", "cseed", 0, "seed"), ("B1", "cref1", 1, "reflection"), ("C", "cseed", 0, "seed"),
        ("D", "cref1", 1, "reflection")]
    with pytest.raises(NotFound, match="candidate 'cnope' is not in run"):
        blame(db, run_id, "cnope")
    with pytest.raises(NotFound, match="run 'rnope' not found"):
        blame(db, "rnope")


def test_blame_command_line(tmp_path):
    url = f"sqlite:///{tmp_path}/blame.db"
    db = Database(url)
    db.create_all()
    run_id = make_lineage(db)
    env = subprocess_env(tmp_path)

    def cli(*args):
        return subprocess.run([PYTHON, "-m", "engine", "blame", *args, "--db", url], env=env, capture_output=True,
                              text=True, timeout=120)

    out = cli(run_id, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows[0] == {"component": "rules", "line_no": 1, "text": "E", "candidate_id": "chum", "step": 2,
                       "origin": "human"}
    assert [r["candidate_id"] for r in rows] == ["chum", "cseed", "cref1", "cref2", "cref1", "cmerge", "cref2"]
    text = cli(run_id, "chum")
    assert text.returncode == 0, text.stderr
    assert "== rules" in text.stdout and "chum" in text.stdout.splitlines()[1]
    bad = cli(run_id, "cnope")
    assert bad.returncode == 2 and "error: candidate 'cnope' is not in run" in bad.stderr
