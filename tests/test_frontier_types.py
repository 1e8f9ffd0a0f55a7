"""GEPA's frontier types over side_info["scores"] objectives (hand-worked cases), parent selection
following the type, the export's typed frontier entries, and opt_state's best evaluations."""

from __future__ import annotations

import random

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.records.export import export_run
from engine.search.frontier_types import frontier_entries, missing_objectives, typed_frontier
from engine.search.selection import PoolView, make_selector
from tests.support.scripted_lm import uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import evaluations, run_toy, toy_config

# A is best on both examples; B has the best "speed" on e1; C the best mean "speed" and "size"
SCORES = {"A": {"e1": 1.0, "e2": 1.0}, "B": {"e1": 0.5, "e2": 0.0}, "C": {"e1": 0.0, "e2": 0.5}}
OBJECTIVES = {"A": {"e1": {"speed": 0.1, "size": 0.2}, "e2": {"speed": 0.1, "size": 0.2}},
              "B": {"e1": {"speed": 0.9, "size": 0.1}, "e2": {"speed": 0.0, "size": 0.1}},
              "C": {"e1": {"speed": 0.6, "size": 0.9}, "e2": {"speed": 0.6, "size": 0.9}}}


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def test_instance_frontier_is_per_example():
    front = typed_frontier(SCORES, OBJECTIVES, "instance")
    assert front.holders == {("e1", None): {"A"}, ("e2", None): {"A"}}


def test_objective_frontier_is_per_objective_mean():
    front = typed_frontier(SCORES, OBJECTIVES, "objective")
    # speed means: A 0.1, B 0.45, C 0.6; size means: A 0.2, B 0.1, C 0.9
    assert front.best == {(None, "speed"): pytest.approx(0.6), (None, "size"): pytest.approx(0.9)}
    assert front.holders == {(None, "speed"): {"C"}, (None, "size"): {"C"}}


def test_hybrid_is_both_and_cartesian_is_each_pair():
    hybrid = typed_frontier(SCORES, OBJECTIVES, "hybrid")
    assert set(hybrid.holders) == {("e1", None), ("e2", None), (None, "speed"), (None, "size")}
    cart = typed_frontier(SCORES, OBJECTIVES, "cartesian")
    assert cart.holders == {("e1", "speed"): {"B"}, ("e2", "speed"): {"C"}, ("e1", "size"): {"C"},
                            ("e2", "size"): {"C"}}
    assert typed_frontier(SCORES, {}, "hybrid").holders == typed_frontier(SCORES, {}, "instance").holders


@pytest.mark.parametrize("frontier_type, expected", [("instance", {"A"}), ("objective", {"C"}),
                                                    ("hybrid", {"A", "C"}), ("cartesian", {"B", "C"})])
def test_parent_selection_follows_the_frontier_type(frontier_type, expected):
    view = PoolView(scores=SCORES, objectives=OBJECTIVES, frontier_type=frontier_type)
    picked = {c for i in range(40) for c, _ in make_selector("pareto").select(view, 1, random.Random(i))}
    assert picked == expected


def test_entries_name_their_example_and_or_objective():
    entries = frontier_entries(typed_frontier(SCORES, OBJECTIVES, "hybrid"), ["e1", "e2"])
    assert [{k: v for k, v in e.items() if k in ("example_id", "objective")} for e in entries] == [
        {"objective": "size"}, {"objective": "speed"}, {"example_id": "e1"}, {"example_id": "e2"}]
    cart = frontier_entries(typed_frontier(SCORES, OBJECTIVES, "cartesian"), ["e1", "e2"])
    assert cart[0] == {"example_id": "e1", "objective": "size", "best_score": 0.9, "candidate_ids": ["C"]}


def test_objective_frontier_without_objectives_is_an_error():
    assert missing_objectives("hybrid", {}) is None
    assert missing_objectives("objective", {"A": {"e1": {}}}).startswith("search.frontier: 'objective' needs objectives")


OBJECTIVE_EVALUATOR = '''
def evaluate(candidate, example):
    words = candidate.split()
    ok = float(example["word"] in words)
    return ok, {"expected": example["word"], "scores": {"hit": ok, "short": 1.0 / len(words)}}
'''


def test_a_cartesian_run_exports_entries_per_example_and_objective(sqlite_db, tmp_path):
    cfg = toy_config(4, evaluator=OBJECTIVE_EVALUATOR, search={"frontier": "cartesian"},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    doc = export_run(sqlite_db, run_id)
    assert doc["frontier_type"] == "cartesian"
    assert {(e["example_id"], e["objective"]) for e in doc["frontier"]} == {
        (f"w{i}", o) for i in range(4) for o in ("hit", "short")}
    reasons = [r for s in repo.list_steps(sqlite_db, run_id) for r in s.parent_reasons.values()]
    assert any("example-objective pair(s)" in r for r in reasons)
    assert repo.get_run(sqlite_db, run_id).best_val_mean > 0


def test_an_objective_run_without_scores_fails_with_the_reason(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(3, search={"frontier": "objective"}))
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "failed"
    assert run.status_reason.startswith("search.frontier: 'objective' needs objectives, but the seed's evaluations")


OPT_STATE_EVALUATOR = '''
import refract_evaluator as oa

def evaluate(candidate, example, opt_state):
    seen = [e["score"] for e in opt_state.best_example_evals]
    ok = float(example["word"] in candidate.split())
    return ok, {"expected": example["word"], "seen": seen, "text": candidate}
'''


def test_opt_state_holds_the_best_evaluations_of_the_example_so_far(sqlite_db, tmp_path):
    cfg = toy_config(3, evaluator=OPT_STATE_EVALUATOR, search={"parents_per_step": 1, "proposals_per_parent": 1,
                                                              "minibatch_size": 3},
                     budget={"max_steps": 4, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=toy.script)
    rows = sorted((ev for ev, _, _ in evaluations(sqlite_db, run_id) if not ev.cached), key=lambda e: e.id)
    first = {}
    for ev in rows:
        seen = ev.side_info["seen"]
        assert seen == sorted(seen, reverse=True)  # best first
        first.setdefault(ev.example_pk, seen)
    assert all(s == [] for s in first.values())  # nothing before an example's first evaluation
    later = [ev.side_info["seen"] for ev in rows if ev.side_info["seen"]]
    assert later and any(1.0 in s for s in later)  # a later evaluation sees an earlier success


def test_the_studio_frontier_follows_the_type(db, tmp_path):
    from storage import queries
    from ui import analysis

    cfg = toy_config(4, evaluator=OBJECTIVE_EVALUATOR, search={"frontier": "objective"},
                     budget={"max_steps": 2, "stop_at_score": None})
    run_id, _ = run_toy(db, tmp_path, cfg)
    doc = export_run(db, run_id)
    engine_members = {c for e in doc["frontier"] for c in e["candidate_ids"]}
    assert {e["objective"] for e in doc["frontier"]} == {"hit", "short"}
    per_example = analysis.frontier(queries.val_scores(db, run_id), queries.candidate_rows(db, run_id))
    view = analysis.typed_members(per_example, queries.val_objectives(db, run_id), "objective")
    assert set(view.members) == engine_members
    assert {c: int(view.best_on[c]) for c in view.members} == {
        c: sum(1 for e in doc["frontier"] if c in e["candidate_ids"]) for c in engine_members}
