"""The asynchronous schedule (issue 6): no step barrier, at most C = P×K proposals in flight,
the budget never exceeded, waves recorded as steps, commands between proposals, sibling merges."""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from engine.commands import send_command
from engine.config import ConfigWarning
from engine.runs import submit_run
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import assert_consistent_totals, by_content, run_optimizer, run_toy, toy_config
from tests.support.merge_scripts import _versions, lossy_merging_script, merging_script


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _async(n=10, c=4, **over):
    search = {"parents_per_step": c, "proposals_per_parent": 1, "schedule": "async", **over.pop("search", {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return toy_config(n, search=search, **over)


def _max_overlap(intervals) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = peak = 0
    for _, d in points:
        now += d
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("c", [3, 5])
def test_at_most_c_proposals_in_flight_and_the_budget_holds(sqlite_db, tmp_path, c):
    cap = 70
    cfg = _async(10, c, budget={"max_metric_calls": cap, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, latency=0.15)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and "budget spent" in run.status_reason
    assert run.metric_calls <= cap and run.budget_overshoot == 0
    assert 2 <= stats.max_in_flight <= c  # LM calls really overlapped, never more than C
    children = [x for x in repo.list_candidates(sqlite_db, run_id) if x.origin == "reflection"]
    assert all(x.started_at and x.finished_at and x.finished_at >= x.started_at for x in children)
    assert 2 <= _max_overlap([(x.started_at, x.finished_at) for x in children]) <= c
    assert_consistent_totals(sqlite_db, run_id)


def test_no_barrier_the_next_proposal_starts_when_one_finishes(sqlite_db, tmp_path):
    """One slow LM answer does not hold the others back: while it runs, other proposals start
    and finish (a step barrier would make every proposal wait for it)."""
    slow = {"done": False}

    def script(messages, params):
        if not slow["done"]:
            slow["done"] = True
            time.sleep(1.2)
        return toy.script(messages, params)

    cfg = _async(10, 3, budget={"max_metric_calls": 60, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=script, latency=0.05)
    children = sorted((x for x in repo.list_candidates(sqlite_db, run_id) if x.origin == "reflection"),
                      key=lambda x: x.started_at)
    longest = max(children, key=lambda x: x.finished_at - x.started_at)
    inside = [x for x in children if x is not longest and longest.started_at < x.started_at and x.finished_at < longest.finished_at]
    assert len(inside) >= 2


def test_waves_are_recorded_as_steps_and_proposals_keep_their_frontier_version(sqlite_db, tmp_path):
    c = 3
    cfg = _async(10, c, budget={"max_metric_calls": 80, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, latency=0.05)
    steps = repo.list_steps(sqlite_db, run_id)
    run = repo.get_run(sqlite_db, run_id)
    assert steps and all(s.ended_at for s in steps) and run.steps_done == len(steps)
    assert [s.index for s in steps] == list(range(len(steps)))
    assert all(1 <= len(s.parent_ids) <= c and len(s.proposal_ids) <= c for s in steps)
    children = {x.id: x for x in repo.list_candidates(sqlite_db, run_id) if x.origin == "reflection"}
    assert sorted(i for s in steps for i in s.proposal_ids) == sorted(children)
    assert all(children[i].step == s.index for s in steps for i in s.proposal_ids)
    versions = [x.frontier_version for x in sorted(children.values(), key=lambda x: x.started_at)]
    assert versions == sorted(versions) and versions[-1] > versions[0]  # later proposals saw a newer frontier
    assert all(s.worker_utilisation is not None and s.events for s in steps[:-1])


def test_async_with_one_in_flight_is_the_sync_run(tmp_path):
    from storage.db import Database

    contents = []
    for schedule in ("sync", "async"):
        db = Database(f"sqlite:///{tmp_path / schedule}.db")
        db.create_all()
        cfg = _async(8, 1, search={"schedule": schedule}, budget={"max_metric_calls": 60, "stop_at_score": None})
        run_id, _ = run_toy(db, tmp_path / schedule, cfg)
        contents.append(sorted(by_content(db, run_id).values()))
        db.dispose()
    assert contents[0] == contents[1]


def test_human_commands_apply_between_proposals(sqlite_db, tmp_path):
    """A pause sent while proposals run stops new ones at once; those in flight finish."""
    install_script(toy.script, latency=0.2)
    cfg = _async(10, 3, budget={"max_metric_calls": 500, "stop_at_score": None})
    run_id = submit_run(sqlite_db, cfg)
    sent = {}

    def pause_soon():
        while len([x for x in repo.list_candidates(sqlite_db, run_id) if x.origin == "reflection"]) < 2:
            time.sleep(0.02)
        sent["id"] = send_command(sqlite_db, run_id, "pause", author="ana")

    t = threading.Thread(target=pause_soon)
    t.start()
    status = run_optimizer(sqlite_db, run_id, tmp_path)
    t.join()
    assert status == "paused"
    cmd = next(x for x in repo.list_commands(sqlite_db, run_id) if x.id == sent["id"])
    assert cmd.status == "applied"
    children = [x for x in repo.list_candidates(sqlite_db, run_id) if x.origin == "reflection"]
    started_after = [x for x in children if x.started_at > cmd.applied_at]
    assert started_after == []
    assert all(x.finished_at for x in children)  # in-flight proposals were finished, not abandoned
    assert repo.get_run(sqlite_db, run_id).metric_calls < 500


def test_async_sibling_merges_rebase_improving_children_onto_the_best_one_pass_at_a_time(sqlite_db, tmp_path):
    cfg = _async(10, 4, search={"merge_siblings": True}, budget={"max_metric_calls": 90, "stop_at_score": None},
                 valset=[{**ex, "id": f"v{i}"} for i, ex in enumerate(toy.dataset(6))])
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=merging_script, latency=0.1)
    cands = repo.list_candidates(sqlite_db, run_id)
    merges = [x for x in cands if x.origin == "sibling_merge"]
    assert merges and any(m.status == "accepted" and m.val_count for m in merges)
    by_id = {x.id: x for x in cands}
    for m in merges:  # improving children, and the best when some of them had not built on it
        parents = [by_id[p] for p in m.parent_ids]
        children = [p for p in parents if p.origin == "reflection"]
        others = [p for p in parents if p.origin != "reflection"]
        assert children and len(others) <= 1 and 2 <= len(parents) <= 4
        for best in others:
            assert best.status == "accepted" and best.val_count
            assert any(c.parent_ids[0] != best.id for c in children)  # some child had not built on it
        if "not written" in m.reason or "no LM call made" in m.reason:  # the budget's tail could not test it
            assert m.status == "failed" and not m.content and m.lm_call_id is None
            continue
        assert m.merge_path == "lm"  # the toy's words are on one line: every merge conflicts
    # children that were waiting together went into one merge (with the best, or over it)
    assert any(sum(by_id[p].origin == "reflection" for p in m.parent_ids) >= 2 for m in merges)
    # a re-based child is not validated itself: its merge was, instead
    rebased = [x for x in cands if x.origin == "reflection" and "re-based onto the best" in x.reason]
    assert rebased and all(x.val_count == 0 and x.status == "rejected" for x in rebased)
    _assert_one_validation_pass_at_a_time(sqlite_db, run_id, by_id)
    run = repo.get_run(sqlite_db, run_id)
    assert run.metric_calls <= 90 and run.budget_overshoot == 0
    assert_consistent_totals(sqlite_db, run_id)


def _assert_one_validation_pass_at_a_time(db, run_id, by_id) -> None:
    """A merge is written over the best as it is once the pass before ended: no two candidates'
    validation evaluations (a merge's own tests on the best's gains included) interleave."""
    split = {e.pk: e.split for e in repo.get_examples(db, run_id)}
    passes: dict[str, list] = {}
    for e in repo.evaluations_for(db, run_id):
        if split[e.example_pk] == "val" and not e.cached:
            passes.setdefault(e.candidate_id, []).append(e.created_at)
    spans = sorted((min(t), max(t), cid) for cid, t in passes.items())
    assert len(spans) >= 3
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if a[1] > b[0]]
    assert not overlaps, [(f"{c[2]} {by_id[c[2]].origin} {by_id[c[2]].status} val {by_id[c[2]].val_count} "
                           f"{c[0].time()}–{c[1].time()} {by_id[c[2]].reason!r}") for pair in overlaps for c in pair]


def _lossy_with_three(messages, params):
    """Merges of three versions or more lose a fix; of two, keep every version's words."""
    if "You combine improvements" in messages[0]["content"] and len(_versions(messages[1]["content"])[1]) >= 3:
        return lossy_merging_script(messages, params)
    return merging_script(messages, params)


def test_the_children_of_a_merge_that_lost_a_gain_are_merged_and_validated_one_by_one(sqlite_db, tmp_path):
    """(A full suite on CI once found a 2-version merge tested on the best's gains while the merge
    before it, written over the same best, still waited for its validation pass.)"""
    cfg = _async(10, 4, search={"merge_siblings": True}, budget={"max_metric_calls": 120, "stop_at_score": None},
                 valset=[{**ex, "id": f"v{i}"} for i, ex in enumerate(toy.dataset(6))])
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_lossy_with_three, latency=0.1)
    cands = repo.list_candidates(sqlite_db, run_id)
    by_id = {x.id: x for x in cands}
    merges = [x for x in cands if x.origin == "sibling_merge"]
    two = [m for m in merges if len(m.parent_ids) == 2 and m.status == "accepted"]
    assert any(len(m.parent_ids) >= 3 for m in merges) and two, [(len(m.parent_ids), m.status) for m in merges]
    _assert_one_validation_pass_at_a_time(sqlite_db, run_id, by_id)
    assert_consistent_totals(sqlite_db, run_id)


def test_a_dollar_cap_stops_async_without_paying_for_proposals_it_cannot_reflect_on(sqlite_db, tmp_path):
    cfg = _async(10, 4, budget={"max_metric_calls": 10_000, "max_cost_usd": 0.02, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, price=1e-5, latency=0.05)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.status_reason.startswith("cost budget spent")
    assert run.cost_usd <= 0.02 * 1.02
    refused = [x for x in repo.list_candidates(sqlite_db, run_id) if x.reason.startswith("budget: no room left for another LM")]
    assert len(refused) <= 4  # at most those already in flight when the cap came near
    assert_consistent_totals(sqlite_db, run_id)
