"""The frontier the engine keeps for the studio (``engine.search.kept_frontier``, table
``frontier``, each candidate's ``frontier_examples`` / ``frontier_entries``) is the frontier
computed from the evaluations: after every step of real runs (validation passes), vetoes and
unvetoes, a pin that validates a rejected candidate, edits, a resume, with objectives, and on a
database made by a release that kept none. Real engine runs (scripted LM, real sandbox), on
SQLite and PostgreSQL."""

from __future__ import annotations

import engine  # noqa: F401  first: offline litellm price map
import pandas as pd
import pytest
from sqlalchemy import text

from engine.commands import send_command
from engine.runs import submit_run
from storage import queries, repo
from storage.frontier import kept_frontier
from tests.support import toy
from tests.support.harness import run_optimizer, toy_config
from tests.support.scripted_lm import install_script, uninstall_script
from ui import analysis
from ui.frontier_view import is_kept, kept_view

OBJECTIVE_EVALUATOR = '''
def evaluate(candidate, example):
    words = candidate.split()
    ok = float(example["word"] in words)
    return ok, {"expected": example["word"], "scores": {"hit": ok, "short": 1.0 / len(words)}}
'''


@pytest.fixture(autouse=True)
def _scripted_lm():
    install_script(toy.script)
    yield
    uninstall_script()


def assert_kept_is_computed(db, run_id: str, frontier_type: str = "instance") -> None:
    """The kept frontier of ``run_id`` equals the one computed from its evaluations: per
    example the best score and whether it is contested, per candidate the entries it holds."""
    run = queries.run_overview(db, run_id)
    assert is_kept(run), (run["frontier_kept"], run["frontier_version"])
    cands = queries.candidate_rows(db, run_id)
    computed = analysis.frontier(queries.val_scores(db, run_id), cands)
    if frontier_type != "instance":
        computed = analysis.typed_members(computed, queries.val_objectives(db, run_id), frontier_type)
    kept = kept_view(*kept_frontier(db, run_id), frontier_type)
    pd.testing.assert_series_equal(kept.best, computed.best, check_names=False)
    pd.testing.assert_series_equal(kept.contested, computed.contested, check_names=False)
    held = lambda v: {c: int(n) for c, n in v.best_on.items() if n > 0}  # noqa: E731
    assert held(kept) == held(computed)
    assert sorted(kept.members) == sorted(computed.members)
    for cid in computed.members:
        assert kept.best_on_text(cid) == computed.best_on_text(cid)
    # per example, who holds the best, counted both ways
    entries, _ = kept_frontier(db, run_id)
    per_example = entries[entries["objective"] == ""].set_index("example")["holders"]
    eligible = computed.matrix.loc[[c for c in computed.matrix.index if not cands.set_index("id").at[c, "vetoed"]]]
    holders = (eligible >= computed.best - 1e-9).sum()
    assert per_example.sort_index().to_dict() == holders[holders > 0].sort_index().to_dict()
    # every validated candidate's lowest and highest score, as recorded
    scored = cands[cands["val_count"] > 0]
    lows = computed.matrix.min(axis=1)
    for r in scored.itertuples():
        if r.id in lows.index:
            assert (r.val_min, r.val_max) == (lows[r.id], computed.matrix.loc[r.id].max())


def _checked_after_each_step(db, run_id, frontier_type="instance", then=None):
    """An on_step hook that checks the kept frontier at every step boundary (after the step's
    validation passes), and calls ``then(ctx)`` after it."""
    seen = []

    def hook(ctx):
        assert_kept_is_computed(db, run_id, frontier_type)
        seen.append(ctx.step_index)
        if then:
            then(ctx)
    return hook, seen


def test_after_every_validation_pass_veto_unveto_pin_and_edit(db, tmp_path):
    # the endless script: once every word is in, its proposals are rejected (one of them gets pinned)
    install_script(toy.endless)
    run_id = submit_run(db, toy_config(4, budget={"max_steps": 6, "stop_at_score": None}))
    vetoed = []

    pinned = []

    def steer(ctx):
        rejected = [c for c in ctx.state.candidates.values() if c.status == "rejected" and c.content]
        if rejected and not pinned:  # a pin validates a rejected proposal: it joins the frontier's pool
            pinned.append(rejected[0].id)
            send_command(ctx.db, ctx.run_id, "pin", {"candidate_id": rejected[0].id}, author="ana")
        if ctx.step_index == 2:  # veto the best, edit the seed
            best, _ = ctx.state.best()
            vetoed.append(best)
            send_command(ctx.db, ctx.run_id, "veto", {"candidate_id": best}, author="ana")
            seed = next(c for c in ctx.state.candidates.values() if c.origin == "seed")
            send_command(ctx.db, ctx.run_id, "edit", {"candidate_id": seed.id, "content": "start alpha bravo"},
                         author="bo")
        if ctx.step_index == 4:
            send_command(ctx.db, ctx.run_id, "unveto", {"candidate_id": vetoed[0]}, author="ana")

    hook, seen = _checked_after_each_step(db, run_id, then=steer)
    assert run_optimizer(db, run_id, tmp_path, on_step=hook) == "completed"
    assert len(seen) >= 5
    assert_kept_is_computed(db, run_id)
    kinds = {c.kind: c.status for c in repo.list_commands(db, run_id)}
    assert kinds == {"veto": "applied", "pin": "applied", "edit": "applied", "unveto": "applied"}
    humans = [c for c in repo.list_candidates(db, run_id) if c.origin == "human"]
    assert humans and humans[0].status == "accepted"
    assert repo.get_candidate(db, pinned[0]).status == "accepted"


def test_a_veto_takes_its_entries_away_at_once(db, tmp_path):
    run_id = submit_run(db, toy_config(6, budget={"max_steps": 3, "stop_at_score": None}))
    send_command(db, run_id, "pause")
    run_optimizer(db, run_id, tmp_path)  # the seed validated, then paused
    hook = lambda ctx: send_command(ctx.db, ctx.run_id, "pause") if ctx.step_index == 2 else None  # noqa: E731
    send_command(db, run_id, "resume")
    run_optimizer(db, run_id, tmp_path, on_step=hook)
    accepted = [c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.frontier_examples > 0]
    victim = max(accepted, key=lambda c: c.frontier_examples)
    before = repo.get_run(db, run_id).frontier_version
    send_command(db, run_id, "veto", {"candidate_id": victim.id})
    send_command(db, run_id, "pause")
    run_optimizer(db, run_id, tmp_path)  # applies the veto, then pauses again
    after = repo.get_run(db, run_id)
    assert after.frontier_version > before and after.frontier_kept == after.frontier_version
    assert repo.get_candidate(db, victim.id).frontier_examples == 0
    assert_kept_is_computed(db, run_id)


def test_a_resumed_run_keeps_it_from_where_it_was(db, tmp_path):
    run_id = submit_run(db, toy_config(8, budget={"max_steps": 5, "stop_at_score": None}))
    hook = lambda ctx: send_command(ctx.db, ctx.run_id, "pause") if ctx.step_index == 2 else None  # noqa: E731
    assert run_optimizer(db, run_id, tmp_path, on_step=hook) == "paused"
    assert_kept_is_computed(db, run_id)
    paused_at = repo.get_run(db, run_id).frontier_version
    # what a crash could leave: rows that no longer match (the resumed engine writes them whole)
    with db.write() as s:
        s.execute(text("UPDATE frontier SET holders = 99, best = -1 WHERE run_id = :r"), {"r": run_id})
        s.execute(text("UPDATE candidate SET frontier_examples = 7 WHERE run_id = :r"), {"r": run_id})
    send_command(db, run_id, "resume")
    hook, seen = _checked_after_each_step(db, run_id)
    assert run_optimizer(db, run_id, tmp_path, on_step=hook) == "completed"
    assert seen and repo.get_run(db, run_id).frontier_version > paused_at  # it goes on counting
    assert_kept_is_computed(db, run_id)


@pytest.mark.parametrize("frontier_type", ["hybrid", "objective", "cartesian"])
def test_a_frontier_over_objectives(db, tmp_path, frontier_type):
    cfg = toy_config(4, evaluator=OBJECTIVE_EVALUATOR, search={"frontier": frontier_type},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id = submit_run(db, cfg)
    hook, seen = _checked_after_each_step(db, run_id, frontier_type)
    run_optimizer(db, run_id, tmp_path, on_step=hook)
    assert seen
    assert_kept_is_computed(db, run_id, frontier_type)
    entries, _ = kept_frontier(db, run_id)
    objectives = set(entries["objective"]) - {""}
    assert objectives == {"hit", "short"}
    if frontier_type == "objective":
        assert set(entries.loc[entries["objective"] != "", "example"]) == {""}  # the means


NEW_COLUMNS = {"run": ["frontier_kept"], "candidate": ["val_min", "val_max", "frontier_examples", "frontier_entries"]}


def test_a_database_of_a_release_that_kept_no_frontier(db, tmp_path):
    """A run recorded before the engine kept the frontier: opening the database adds the table
    and the columns; the studio computes the frontier from the evaluations (the run's
    ``frontier_kept`` is -1); resumed, the engine writes it whole and keeps it from there."""
    run_id = submit_run(db, toy_config(8, budget={"max_steps": 5, "stop_at_score": None}))
    hook = lambda ctx: send_command(ctx.db, ctx.run_id, "pause") if ctx.step_index == 2 else None  # noqa: E731
    run_optimizer(db, run_id, tmp_path, on_step=hook)
    with db.write() as s:  # the shape an older release left
        s.execute(text("DROP TABLE frontier"))
        for table, cols in NEW_COLUMNS.items():
            for col in cols:
                s.execute(text(f"ALTER TABLE {table} DROP COLUMN {col}"))
    added = db.create_all()
    assert sorted(added) == sorted(f"{t}.{c}" for t, cols in NEW_COLUMNS.items() for c in cols)
    run = queries.run_overview(db, run_id)
    assert run["frontier_kept"] == -1 and not is_kept(run)
    cands = queries.candidate_rows(db, run_id)
    assert cands["val_min"].isna().all() and (cands["frontier_examples"] == 0).all()
    assert kept_frontier(db, run_id)[0].empty
    computed = analysis.frontier(queries.val_scores(db, run_id), cands)
    assert computed.members  # the studio's way for such a run still works
    send_command(db, run_id, "resume")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    assert_kept_is_computed(db, run_id)  # the lowest and highest scores of the old candidates included


def test_an_imported_run_has_its_frontier_kept(db, tmp_path):
    """An exported run imported again: no engine runs it, so the import writes its frontier."""
    from engine.records.export import export_run, import_run
    from storage.admin import delete_run

    run_id = submit_run(db, toy_config(6, budget={"max_steps": 3, "stop_at_score": None}))
    run_optimizer(db, run_id, tmp_path)
    doc = export_run(db, run_id)
    delete_run(db, run_id, "ana", "imported again below")
    assert import_run(db, doc) == run_id
    assert_kept_is_computed(db, run_id)
