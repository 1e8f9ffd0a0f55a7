"""Merges that cost no LM call (issue 14): the line-level three-way merge over the common
ancestor, component by component; the LM only for real conflicts; the path recorded on the
merge; the asynchronous schedule re-basing each validated child onto the best."""

from __future__ import annotations

import pytest

from storage import repo
from engine.search.merge import merged_content
from engine.search.textmerge import merge_contents, merge_texts
from tests.support import toy
from tests.support.harness import assert_consistent_totals, lm_calls, run_toy, toy_config

BASE = "Header\n- keep one\n- keep two\n- keep three\nFooter"

# the toy evaluator without its one-line rule: the versions here put each word on its own line
LINES_EVALUATOR = '''
def evaluate(candidate, example):
    words = set(candidate.split())
    return (1.0 if example["word"] in words else 0.0), {"expected": example["word"], "got": sorted(words)[:20]}
'''


def lines_script(messages, params):
    """Like toy.script, but the missing word goes on a new line of its own: siblings that add
    different words change different lines (an insertion at the same place, the end)."""
    prompt = messages[1]["content"]
    if "You combine improvements" in messages[0]["content"]:
        raise AssertionError("no merge LM call expected: the versions changed different lines")
    current = toy.current_version(prompt)
    missing = [w for w in toy.missing_words(prompt) if w not in current.split()]
    if not missing:
        return "No change.\n```\n" + current + "\nextra\n```"
    word = missing[min(params.get("sample_index", 0), len(missing) - 1)]
    return f"Adding {word}.\n```\n{current}\n{word}\n```"


# ---------------------------------------------------------------- the merge itself


def test_edits_of_different_lines_merge_without_conflict():
    a = BASE.replace("keep one", "keep ONE")
    b = BASE.replace("keep three", "keep THREE")
    assert merge_texts(BASE, [a, b]) == "Header\n- keep ONE\n- keep two\n- keep THREE\nFooter"


def test_edits_of_the_same_line_are_a_real_conflict():
    assert merge_texts(BASE, [BASE.replace("keep two", "keep 2"), BASE.replace("keep two", "keep II")]) is None


def test_insertions_at_the_same_place_keep_both_and_a_shared_line_once():
    a, b, c = BASE + "\n- new a", BASE + "\n- new b", BASE + "\n- new a\n- new c"
    assert merge_texts(BASE, [a, b, c]) == BASE + "\n- new a\n- new b\n- new c"


def test_a_deletion_and_an_edit_of_another_line_merge():
    a = BASE.replace("- keep one\n", "")
    b = BASE.replace("Footer", "Footer!")
    assert merge_texts(BASE, [a, b]) == "Header\n- keep two\n- keep three\nFooter!"


def test_components_merge_one_by_one_and_conflicts_are_named():
    base = {"system": BASE, "examples": "Q: one\nA: 1", "style": "brief"}
    v1 = {**base, "system": BASE.replace("keep one", "keep ONE"), "examples": "Q: one\nA: uno"}
    v2 = {**base, "system": BASE.replace("Footer", "End"), "examples": "Q: one\nA: eins"}
    content, conflicts = merge_contents(base, [v1, v2])
    assert conflicts == ["examples"]
    assert content["system"] == "Header\n- keep ONE\n- keep two\n- keep three\nEnd" and content["style"] == "brief"
    assert merge_contents(base, [v1, {**base, "style": "long"}]) == ({**v1, "style": "long"}, [])


def test_the_system_aware_merge_now_merges_lines_within_a_component():
    a = {"text": BASE}
    i, j = {"text": BASE.replace("keep one", "x")}, {"text": BASE.replace("Footer", "y")}
    assert merged_content(a, i, j) == {"text": "Header\n- x\n- keep two\n- keep three\ny"}
    assert merged_content(a, i, {"text": BASE.replace("keep one", "z")}) is None  # same line: no merge
    assert merged_content(a, i, a) is None  # one of them changed nothing


# ---------------------------------------------------------------- in a run


def test_siblings_that_changed_different_lines_merge_with_no_lm_call(db, tmp_path):
    cfg = toy_config(8, seed_candidate="start", evaluator=LINES_EVALUATOR,
                     search={"parents_per_step": 1, "proposals_per_parent": 3, "merge_siblings": True,
                             "minibatch_size": 4},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(db, tmp_path, cfg, script=lines_script)
    merged = [c for c in repo.list_candidates(db, run_id) if c.origin == "sibling_merge"]
    assert len(merged) == 1 and merged[0].merge_path == "three_way" and merged[0].status == "accepted"
    siblings = [c for c in repo.list_candidates(db, run_id) if c.origin == "reflection"]
    # a three-way merge is tested only on the examples its siblings fixed: of the 4 they shared,
    # the 3 whose words they added
    added = {w for c in siblings for w in c.content["text"].split()} - {"start"}
    words = {r["id"]: r["word"] for r in toy.dataset(8)}
    assert len(siblings[0].minibatch_keys) == 4 and len(added) == 3
    assert merged[0].minibatch_keys == sorted(k for k in siblings[0].minibatch_keys if words[k] in added)
    assert all(set(c.content["text"].split()) <= set(merged[0].content["text"].split()) for c in siblings)
    assert [c for c in lm_calls(db, run_id) if c.purpose == "merge"] == [] and merged[0].lm_call_id is None
    assert len(stats.calls) == 3  # the three reflections only
    assert all(c.merge_path == "" for c in siblings)
    assert_consistent_totals(db, run_id)


def test_siblings_that_changed_the_same_line_fall_to_the_lm(sqlite_db, tmp_path):
    from tests.support.merge_scripts import merging_script  # the toy's words are on one line: every merge conflicts

    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 3, "merge_siblings": True},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=merging_script)
    merged = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "sibling_merge"]
    calls = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "merge"]
    assert len(merged) == 1 and merged[0].merge_path == "lm"
    assert len(calls) == 1 and calls[0].candidate_id == merged[0].id == repo.get_candidate(sqlite_db, merged[0].id).id


@pytest.mark.parametrize("max_merges", [1, 3])
def test_async_merge_rebases_each_validated_child_onto_the_best(sqlite_db, tmp_path, max_merges):
    cfg = toy_config(8, seed_candidate="start", evaluator=LINES_EVALUATOR,
                     search={"parents_per_step": 1, "proposals_per_parent": 3, "schedule": "async", "merge": True,
                             "max_merges": max_merges},
                     budget={"max_metric_calls": 150, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=lines_script, latency=0.05)
    cands = {c.id: c for c in repo.list_candidates(sqlite_db, run_id)}
    merges = [c for c in cands.values() if c.origin == "merge"]
    assert 1 <= len(merges) <= max_merges
    assert all(m.merge_path == "three_way" and len(m.parent_ids) == 2 for m in merges)
    assert [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "merge"] == []
    for m in (m for m in merges if m.status == "accepted"):
        words = set(m.content["text"].split())
        assert all(set(cands[p].content["text"].split()) <= words for p in m.parent_ids)  # both sides' changes
    steps = repo.list_steps(sqlite_db, run_id)
    assert {m.id for m in merges if m.status == "accepted"} <= {c for s in steps for c in s.accepted_ids}
    assert repo.get_run(sqlite_db, run_id).metric_calls <= 150
    assert_consistent_totals(sqlite_db, run_id)


# ---------------------------------------------------------------- the runtime model


def _lat(**over):
    from engine.runtime.model import Latencies

    return Latencies(**{"lm": 1.0, "eval": 0.05, "accept": 0.75, "minibatch": 3, "n_val": 16, "workers": 4, **over})


def test_the_runtime_model_charges_an_lm_call_only_for_merges_with_a_conflict():
    from engine.runtime.model import Shape, predict_run_seconds, sync_step

    shape = Shape(4, 1, merge_siblings=True)
    free, calls = predict_run_seconds(shape, _lat(merge_lm=0.0), 240)
    paid, calls_paid = predict_run_seconds(shape, _lat(merge_lm=1.0), 240)
    assert calls == calls_paid and free < paid
    # a step without the merge's LM call is one LM latency shorter whenever a merge happens
    steps = sync_step(shape, _lat(merge_lm=0.0))[0], sync_step(shape, _lat(merge_lm=1.0))[0]
    p_merge = 1 - 0.25 ** 4 - 4 * 0.75 * 0.25 ** 3  # two or more of four improved
    assert abs((steps[1] - steps[0]) - p_merge * 1.0) < 1e-9


def test_the_asynchronous_model_pays_for_rebasing_only_when_the_best_moved_on():
    from engine.runtime.model import Shape, predict_run_seconds

    one, _ = predict_run_seconds(Shape(1, 1, schedule="async", merge_siblings=True), _lat(), 240)
    assert one == predict_run_seconds(Shape(1, 1), _lat(), 240)[0]  # C = 1: never stale, no merge
    free, _ = predict_run_seconds(Shape(4, 1, schedule="async", merge_siblings=True), _lat(merge_lm=0.0), 240)
    paid, _ = predict_run_seconds(Shape(4, 1, schedule="async", merge_siblings=True), _lat(merge_lm=1.0), 240)
    assert free < paid


# ---------------------------------------------------------------- the budget's tail


class _TailContext:
    """Just what ``combine`` reads before its first test: a merge the budget cannot test is
    never written, so no LM call, no evaluation."""

    def __init__(self, calls_left: int) -> None:
        from types import SimpleNamespace

        from engine.budget import Budget
        from engine.config import BudgetConfig

        self.run_id, self.saved, self.components = "r", [], ["text"]
        self.budget = Budget(BudgetConfig(max_metric_calls=100), metric_calls=100 - calls_left, cost_usd=0.0,
                             seconds_before=0.0)
        self.state = SimpleNamespace(candidates={}, frontier_version=0)

    def save(self, cand):
        self.saved.append(cand)
        return cand

    def set_status(self, cand, to, reason, *, with_row=True, **fields):
        return self.save(cand.model_copy(update={"status": to, "reason": cand.reason if reason is None else reason,
                                                 **fields}))

    def call_lm(self, *args, **kwargs):
        raise AssertionError("no merge LM call when its merge could not be tested")


def _siblings(texts: list[str]):
    from engine.evaluation import Scored
    from engine.search.sibling_merge import Sibling
    from storage.models import Candidate

    parent = Candidate(id="p", run_id="r", content={"text": BASE}, content_hash="hp")
    out = []
    for n, text in enumerate(texts):
        cand = Candidate(id=f"c{n}", run_id="r", content={"text": text}, content_hash=f"h{n}", parent_ids=["p"])
        keys = [f"e{n}a", f"e{n}b", f"e{n}c"]  # each fixed one of its three examples
        out.append(Sibling(cand, parent, {k: float(k.endswith("a")) for k in keys},
                           {k: Scored(0.0, {}, None) for k in keys}))
    return out


@pytest.mark.parametrize("texts, calls_left, why", [
    ([BASE + "\n- a", BASE + "\n- b"], 1, "too few metric calls left to test a merge; not written"),
    ([BASE.replace("two", "2"), BASE.replace("two", "II")], 3, "test an LM-written merge; no LM call made"),
])
def test_a_merge_the_budget_cannot_test_is_not_written(texts, calls_left, why):
    from engine.search.sibling_merge import combine

    ctx = _TailContext(calls_left)  # the three-way merge needs its 2 fixed examples; an LM merge all 6
    assert combine(ctx, _siblings(texts), "m", 0) is None
    (merged,) = ctx.saved
    assert merged.status == "failed" and why in merged.reason and not merged.content
    assert ctx.budget.metric_calls == 100 - calls_left  # nothing was evaluated
