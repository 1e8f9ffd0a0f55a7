"""Minibatches that carry signal (engine.search.minibatch): known failures first, a slice the
parent aces drawn again, a parent that aces everything skipped only when the top score is known."""

from __future__ import annotations

from engine.evaluation import Scored
from engine.search.minibatch import draw, failing_first, top_score
from engine.search.sampling import EpochSampler

KEYS = [f"e{i}" for i in range(12)]


def _evaluator(scores: dict[str, float], calls: list):
    def evaluate(keys):
        calls.extend(keys)
        return {k: Scored(scores[k], {}, None) for k in keys}
    return evaluate


def test_known_failures_fill_half_of_the_minibatch_least_used_first():
    known = {"e1": Scored(0.0, {}, None), "e2": Scored(0.0, {}, None), "e3": Scored(1.0, {}, None),
             "e4": Scored(0.5, {}, None)}
    assert failing_first(known, 1.0, {"e1": 2}, 2) == ["e2", "e4"]  # unused ones first, the lowest score first
    assert failing_first(known, 1.0, {}, 2) == ["e1", "e2"]
    calls: list = []
    mb = draw(_evaluator({k: 0.0 for k in KEYS}, calls), known, EpochSampler(KEYS, 4, 0), 0, [1.0], None, {"e1": 2})
    assert mb.keys[:2] == ["e2", "e4"] and len(mb.keys) == 4 and not mb.aced
    assert "2 examples the parent is known to fail (e2, e4)" in mb.reason


def test_a_slice_the_parent_aces_is_drawn_again_and_its_failures_take_the_place_of_passes():
    scores = {k: 1.0 for k in KEYS}
    scores["e11"] = 0.0
    calls: list = []
    sampler = EpochSampler(KEYS, 3, 0)
    mb = draw(_evaluator(scores, calls), {}, sampler, 0, [0.0, 1.0], 1.0, {})
    if "e11" in sampler.batch(0):
        assert not calls[3:]  # found at once: nothing drawn again
    else:
        assert len(calls) > 3 and "drawn again" in mb.reason
    if "e11" in calls:
        assert "e11" in mb.keys and not mb.aced


def test_a_parent_that_aces_every_slice_is_skipped_only_when_the_top_score_is_known():
    calls: list = []
    mb = draw(_evaluator({k: 1.0 for k in KEYS}, calls), {}, EpochSampler(KEYS, 3, 0), 0, [0.0], 1.0, {})
    assert mb.aced and 3 < len(calls) <= 9 and len(set(calls)) == len(calls)  # the slice and two redraws
    assert "nothing to learn" in mb.reason
    # the highest score seen so far may not be the highest possible: reflected on anyway
    calls = []
    mb = draw(_evaluator({k: 0.5 for k in KEYS}, calls), {}, EpochSampler(KEYS, 3, 0), 0, [0.0, 0.5], None, {})
    assert not mb.aced and len(calls) > 3 and "best score seen so far" in mb.reason


def test_no_top_score_until_some_score_is_lower_than_another():
    assert top_score(None, [0.0, 0.0]) is None and top_score(None, [0.0, 1.0]) == 1.0 and top_score(0.7, []) == 0.7
    calls: list = []
    mb = draw(_evaluator({k: 0.0 for k in KEYS}, calls), {}, EpochSampler(KEYS, 3, 0), 0, [0.0], None, {})
    assert calls == mb.keys and not mb.aced and mb.reason == "in epoch order"


def test_two_slots_of_one_parent_take_different_known_failures(sqlite_db, tmp_path):
    from tests.support.harness import run_toy, toy_config
    from storage import repo

    cfg = toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 1, "selection": "best"},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    for step in repo.list_steps(sqlite_db, run_id)[1:]:
        children = [repo.get_candidate(sqlite_db, c) for c in step.proposal_ids]
        both = [c for c in children if c.origin == "reflection"]
        if len({c.parent_ids[0] for c in both}) == 1 and all("known to fail" in c.minibatch_reason for c in both):
            firsts = [c.minibatch_reason.split("(")[1].split(")")[0] for c in both]
            assert firsts[0] != firsts[1], firsts


def test_a_run_whose_seed_scored_nothing_still_draws_again_a_slice_its_first_child_aces():
    """The top score needs a lower one seen; the run's state kept only its highest validation score,
    so once the seed (0 everywhere) had a child scoring 1 on its whole minibatch, no score seen was
    lower: no "right" was known and that child's aced slices were never drawn again (on a prompt
    task every later child was then judged "2 vs parent 3")."""
    import threading
    from types import SimpleNamespace

    from engine.search.minibatch import Drawer
    from engine.state import PoolState

    state = PoolState(val_keys=["v0", "v1"])
    seed, child = SimpleNamespace(id="seed", parent_ids=[]), SimpleNamespace(id="child", parent_ids=["seed"])
    state.add_scored(SimpleNamespace(id="seed"), {"v0": 0.0, "v1": 0.0})
    state.add_scored(SimpleNamespace(id="child"), {"v0": 1.0, "v1": 1.0})
    assert (state.low_score, state.top_score) == (0.0, 1.0)
    first = EpochSampler(KEYS, 3, 0).batch(0)
    fails = [k for k in KEYS if k not in first]  # the child aces its first slice, fails everything else
    scores = {k: 0.0 if k in fails else 1.0 for k in KEYS}
    calls: list = []
    evaluate = _evaluator(scores, calls)
    ctx = SimpleNamespace(state=SimpleNamespace(lock=threading.RLock(), candidates={"seed": seed, "child": child},
                                                top_score=state.top_score, low_score=state.low_score),
                          cfg=SimpleNamespace(search=SimpleNamespace(max_score=None)), train_keys=KEYS,
                          evals=SimpleNamespace(known=lambda parent, keys: {},
                                                evaluate=lambda parent, keys, kind: evaluate(keys)))
    sampler = EpochSampler(KEYS, 3, 0)
    drawer = Drawer(ctx, sampler)
    mb = drawer.draw(drawer.plan(child, 0))
    assert calls[:3] == first and len(calls) > 3 and "drawn again" in mb.reason
    assert any(k in fails for k in mb.keys) and not mb.aced
