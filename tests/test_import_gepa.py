"""``python -m engine import-gepa RUN_DIR`` on a run directory written by GEPA 0.1.4 itself, in
the test: a two-component candidate, two parents per iteration (GEPA's PxNSampling) and merges,
with a scripted reflection LM (GEPA takes any callable)."""

from __future__ import annotations

import pathlib
import pickle
import random
import re
import shutil

import pytest

import engine  # noqa: F401  first: offline price map
from engine.cli import main
from engine.records.export import export_run
from engine.api.result import build_result
from storage import repo
from storage.db import Database

import gepa.optimize_anything as gepa_oa  # gepa==0.1.4, in requirements-dev.txt
from gepa.strategies.proposal_sampling import PxNSampling
from gepa.strategies.proposal_selection import AllImprovements

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]


def evaluate(candidate, example):
    found = example["word"] in (candidate["first"] + " " + candidate["second"]).split()
    gepa_oa.log("expected", example["word"])
    return (1.0 if found else 0.0), {"expected": example["word"]}


def reflection_lm(rng: random.Random):
    """Adds one missing word, picked at random, to the component GEPA shows it (so that branches
    differ and GEPA finds merges)."""

    def answer(prompt) -> str:
        text = prompt if isinstance(prompt, str) else str(prompt)
        current = re.search(r"```\n?(.*?)\n?```", text, re.S)
        base = current.group(1).strip() if current else ""
        missing = sorted({w for w in re.findall(r"expected[^a-z]+([a-z]+)", text) if w in WORDS} - set(base.split()))
        return f"```\n{base} {rng.choice(missing)}\n```" if missing else f"```\n{base}\n```"

    return answer


@pytest.fixture(scope="module")
def gepa_run(tmp_path_factory):
    """(run_dir, GEPA's own result) of a real GEPA 0.1.4 run."""
    run_dir = tmp_path_factory.mktemp("gepa") / "run"
    cfg = gepa_oa.GEPAConfig(
        engine=gepa_oa.EngineConfig(run_dir=str(run_dir), max_metric_calls=200, parallel=False, seed=0,
                                    sampling_strategy=PxNSampling(2, 1), selection_strategy=AllImprovements()),
        reflection=gepa_oa.ReflectionConfig(reflection_lm=reflection_lm(random.Random(4))),
        merge=gepa_oa.MergeConfig())
    result = gepa_oa.optimize_anything({"first": "one alpha", "second": "two"}, evaluator=evaluate,
                                       dataset=[{"id": f"w{i}", "word": w} for i, w in enumerate(WORDS)], config=cfg)
    return run_dir, result


def _import(db: Database, run_dir, capsys) -> str:
    assert main(["import-gepa", str(run_dir), "--db", db.url]) == 0
    return re.search(r"^run (\S+)", capsys.readouterr().out).group(1)


def test_a_gepa_run_directory_becomes_a_finished_run(db, gepa_run, capsys):
    run_dir, gepa = gepa_run
    assert sum(1 for p in gepa.parents if len(p) == 2) >= 1, "the GEPA run was meant to merge"
    assert (run_dir / "gepa_state.bin").exists()
    run_id = _import(db, run_dir, capsys)

    ours = build_result(db, run_id)
    assert ours.candidates == gepa.candidates
    assert ours.val_aggregate_scores == pytest.approx(gepa.val_aggregate_scores)
    assert ours.parents == gepa.parents
    assert ours.best_idx == gepa.best_idx and ours.total_metric_calls == gepa.total_metric_calls
    assert ours.val_subscores == gepa.val_subscores  # keyed by validation index, as GEPA keys them
    assert ours.per_val_instance_best_candidates == gepa.per_val_instance_best_candidates
    run = repo.get_run(db, run_id)
    assert run.status == "completed" and "imported from the GEPA run directory" in run.status_reason
    cands = repo.list_candidates(db, run_id)
    merges = [i for i, p in enumerate(gepa.parents) if len(p) == 2]
    assert [c.origin for c in cands] == ["seed"] + ["merge" if i in merges else "reflection" for i in range(1, len(cands))]
    # what the studio reads: steps with their parents, the frontier, the seed's side information
    assert run.steps_done == len(repo.list_steps(db, run_id)) > 0
    doc = export_run(db, run_id)
    front = {f["example_id"]: set(f["candidate_ids"]) for f in doc["frontier"]}
    ids = [c.id for c in cands]
    for key, holders in gepa.per_val_instance_best_candidates.items():
        assert front[str(key)] == {ids[i] for i in holders}
    seed_evals = [e for e in doc["evaluations"] if e["candidate_id"] == ids[0]]
    assert len(seed_evals) == len(WORDS) and all(e["side_info"]["log"].startswith("expected") for e in seed_evals)
    # it can be commented on like any run
    repo.add_comment(db, run_id, ids[gepa.best_idx], "ana", "why did this merge work?")


class _Trap:
    """Unpickling this runs code: it creates the marker file."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_the_pickle_is_never_opened(sqlite_db, gepa_run, capsys, tmp_path):
    run_dir, gepa = gepa_run
    trapped = tmp_path / "run"
    shutil.copytree(run_dir, trapped)
    marker = tmp_path / "unpickled"
    (trapped / "gepa_state.bin").write_bytes(pickle.dumps(_Trap(str(marker))))
    run_id = _import(sqlite_db, trapped, capsys)
    assert not marker.exists()
    assert build_result(sqlite_db, run_id).candidates == gepa.candidates


def test_a_folder_that_is_not_a_gepa_run_says_so(sqlite_db, tmp_path, capsys):
    assert main(["import-gepa", str(tmp_path / "missing"), "--db", sqlite_db.url]) == 2
    assert "not a folder; give the run_dir of a GEPA run" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["import-gepa", str(tmp_path / "empty"), "--db", sqlite_db.url]) == 2
    assert "no candidates.json" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "candidates.json").write_text("{not json")
    assert main(["import-gepa", str(tmp_path / "bad"), "--db", sqlite_db.url]) == 2
    assert "candidates.json: not valid JSON" in capsys.readouterr().err
    assert repo.list_runs(sqlite_db) == []
