"""Branching (engine/branch.py, engine/reuse.py): a run started from candidates of another run,
with settings changed, that pays for no evaluation its base run already recorded."""

from __future__ import annotations

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.branch import BranchError, branch_config, branch_run, parse_overrides
from engine.cli import main
from engine.config import ConfigError, RunConfig
from engine.config_sections import BranchConfig
from engine.reuse import evaluator_fingerprint, reuse_bases
from storage import branches, repo
from tests.support import toy
from tests.support.harness import (assert_consistent_totals, evaluations, paid_twice, run_optimizer, run_toy,
                                   toy_config)
from tests.support.scripted_lm import install_script, uninstall_script

TEST = [{"id": "te0", "word": toy.WORDS[0]}, {"id": "te1", "word": toy.WORDS[5]}, {"id": "te2", "word": "zulu"}]


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _base(db, tmp_path, **over):
    """A finished toy run (stopped before the optimum, so a branch has work left)."""
    cfg = toy_config(8, testset=TEST, budget={"max_metric_calls": 60, "stop_at_score": None}, **over)
    run_id, _ = run_toy(db, tmp_path / "base", cfg)
    return run_id


def test_a_branch_from_the_best_pays_no_evaluation_twice(db, tmp_path):
    base_id = _base(db, tmp_path)
    base = repo.get_run(db, base_id)
    best = base.best_candidate_id
    install_script(toy.script)
    branch_id = branch_run(db, base_id, [best], {"search.parents_per_step": 1, "budget.max_metric_calls": 200,
                                                   "budget.stop_at_score": 1.0})
    run = repo.get_run(db, branch_id)
    assert run.branch_of == base_id and run.config["search"]["parents_per_step"] == 1
    assert run.config["seed_candidate"] == repo.get_candidate(db, best).content["text"]
    run_optimizer(db, branch_id, tmp_path / "branch")
    run = repo.get_run(db, branch_id)
    assert run.status == "completed" and run.best_val_mean == 1.0, run.status_reason
    assert paid_twice(db, base_id, branch_id) == 0
    reused = branches.reused_counts(db, branch_id)
    # the seed's whole validation pass and its held-out test pass came from the base run
    n_val, n_test = len(repo.get_examples(db, branch_id, "train")), len(TEST)
    assert reused[base_id] >= n_val + n_test
    seed_evals = [ev for ev, _, _ in evaluations(db, branch_id) if ev.candidate_id.startswith("c") and ev.reused_from]
    assert all(ev.cached for ev in seed_evals)
    assert_consistent_totals(db, branch_id)
    assert [b["id"] for b in branches.branches_of(db, base_id)] == [branch_id]


def test_a_seed_population_is_validated_and_on_the_frontier(sqlite_db, tmp_path):
    base_id = _base(sqlite_db, tmp_path)
    validated = [c for c in repo.list_candidates(sqlite_db, base_id, ["accepted"]) if c.val_count == 8]
    chosen = [c.id for c in sorted(validated, key=lambda c: -c.val_mean)[:3]]
    assert len(chosen) == 3
    install_script(toy.script)
    branch_id = branch_run(sqlite_db, base_id, chosen, {"budget.max_steps": 1})
    run_optimizer(sqlite_db, branch_id, tmp_path / "branch")
    seeds = [c for c in repo.list_candidates(sqlite_db, branch_id) if c.origin == "seed"]
    assert sorted(c.content_hash for c in seeds) == sorted(repo.get_candidate(sqlite_db, c).content_hash for c in chosen)
    assert all(c.status == "accepted" and c.val_count == 8 for c in seeds)
    seed_ids = {c.id for c in seeds}
    seed_evals = [ev for ev, _, split in evaluations(sqlite_db, branch_id) if ev.candidate_id in seed_ids and split != "test"]
    # the base run had validated each of them fully: no seed's pass was paid
    assert len(seed_evals) >= 3 * 8 and all(ev.reused_from == base_id for ev in seed_evals)
    assert paid_twice(sqlite_db, base_id, branch_id) == 0


def test_a_changed_evaluator_reuses_nothing_and_says_why(sqlite_db, tmp_path):
    base_id = _base(sqlite_db, tmp_path)
    cfg = branch_config(sqlite_db, base_id, None, {"evaluator": toy.EVALUATOR + "\n# changed\n"})
    bases, note = reuse_bases(sqlite_db, cfg)
    assert bases == [] and "evaluator differs" in note
    same = branch_config(sqlite_db, base_id, None, {"search.parents_per_step": 3, "reflection_lm.temperature": 0.1})
    assert reuse_bases(sqlite_db, same) == ([base_id], "")
    # the toy evaluator calls no lm(): the reflection LM is no part of what decides its results
    assert evaluator_fingerprint(same) == evaluator_fingerprint(cfg.model_copy(update={"evaluator": toy.EVALUATOR}))


def test_bad_branches_are_refused_by_field_and_store_nothing(sqlite_db, tmp_path):
    base_id = _base(sqlite_db, tmp_path)
    before = len(repo.list_runs(sqlite_db))
    with pytest.raises(BranchError, match=r"^run: no run with id 'r-nope'"):
        branch_config(sqlite_db, "r-nope", None)
    with pytest.raises(BranchError, match=r"^candidate: 'c-nope' is not a candidate of run"):
        branch_config(sqlite_db, base_id, ["c-nope"])
    with pytest.raises(ConfigError, match=r"search.parents_per_step: must be at least 1"):
        branch_config(sqlite_db, base_id, None, {"search.parents_per_step": 0})
    with pytest.raises(ConfigError, match=r"search.paents_per_step: unknown field"):
        branch_config(sqlite_db, base_id, None, {"search.paents_per_step": 2})
    with pytest.raises(BranchError, match=r"^--set: 'search' is not NAME=VALUE"):
        parse_overrides(["search"])
    assert len(repo.list_runs(sqlite_db)) == before


def test_overrides_are_read_as_toml_values_or_text():
    assert parse_overrides(["search.parents_per_step=4", "search.merge=true", "reflection_lm.model=openai/gpt-4.1-mini",
                            'objective="Be terse."', "budget.max_cost_usd=0.5"]) == {
        "search.parents_per_step": 4, "search.merge": True, "reflection_lm.model": "openai/gpt-4.1-mini",
        "objective": "Be terse.", "budget.max_cost_usd": 0.5}


def test_deleting_a_base_run_says_so_and_leaves_its_branches_whole(sqlite_db, tmp_path, capsys):
    base_id = _base(sqlite_db, tmp_path)
    branch_id = branch_run(sqlite_db, base_id)
    # a branch of the branch reuses what either recorded, the nearest first
    seed = repo.list_candidates(sqlite_db, base_id)[0].id  # a queued branch has no candidates yet: any text will do
    again = branch_config(sqlite_db, base_id, [seed]).model_copy(update={"branch": BranchConfig(run=branch_id, candidates=["c"])})
    assert reuse_bases(sqlite_db, again) == ([branch_id, base_id], "")
    assert main(["delete", base_id, "--reason", "cleanup", "--db", sqlite_db.url]) == 0
    out = capsys.readouterr().out
    assert f"note: run {base_id} has 1 branch(es) ({branch_id}): they stay whole" in out
    branch = repo.get_run(sqlite_db, branch_id)
    assert branch.branch_of == base_id and branch.config["seed_candidate"]
    bases, note = reuse_bases(sqlite_db, RunConfig.model_validate(branch.config))
    assert bases == [] and note.startswith(f"run {base_id} is not in this database (deleted")
