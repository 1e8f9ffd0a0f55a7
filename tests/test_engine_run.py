"""Whole runs in this process: the real sandbox pool (2 workers) and a scripted reflection LM.

Each test submits a run and drives it with the same ``Optimizer`` a worker uses; assertions
read the database only, the way the studio would.
"""

from __future__ import annotations

from collections import Counter

import json
import re
from datetime import timedelta

import engine  # noqa: F401  first: makes litellm use its bundled price list (no network at import)
import litellm
import pytest

from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from storage.states import RunStatus
from tests.support import toy
from tests.support.harness import (
    assert_consistent_totals,
    by_content,
    evaluations,
    lm_calls,
    run_optimizer,
    run_toy,
    toy_config,
)
from tests.support.components import _component_script, _multi_config


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _reflections(db, run_id):
    return [c for c in lm_calls(db, run_id) if c.purpose == "reflection"]


# ---------------------------------------------------------------- batch shape and concurrency


@pytest.mark.parametrize("p,k", [(2, 2), (3, 1), (1, 3)])
def test_every_step_makes_p_times_k_proposals(sqlite_db, tmp_path, p, k):
    cfg = toy_config(8, search={"parents_per_step": p, "proposals_per_parent": k},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg)
    steps = repo.list_steps(sqlite_db, run_id)
    assert [s.index for s in steps] == [0, 1, 2]
    cands = {c.id: c for c in repo.list_candidates(sqlite_db, run_id)}
    for s in steps:
        assert len(s.parent_ids) == p
        assert len(s.proposal_ids) == p * k and len(set(s.proposal_ids)) == p * k, s.proposal_ids
        for cid in s.proposal_ids:
            assert cands[cid].origin == "reflection" and cands[cid].step == s.index
            assert cands[cid].parent_ids[0] in s.parent_ids
        assert set(s.accepted_ids) <= set(s.proposal_ids)
        # a parent's minibatch scores come from its validation pass (train = val here): only the
        # step's own children are sent to the pool
        evaluated = {e["candidate_id"] for e in s.events if e["kind"] != "lm"}
        assert evaluated <= set(s.proposal_ids), evaluated - set(s.proposal_ids)
    reflection_children = [c for c in cands.values() if c.origin == "reflection"]
    assert len(reflection_children) == 3 * p * k  # every proposal is a row, whatever became of it
    run = repo.get_run(sqlite_db, run_id)
    calls = _reflections(sqlite_db, run_id)
    per_proposal = Counter(c.candidate_id for c in calls)  # one call, or two with the retry
    assert run.steps_done == 3 and run.proposals_total == len(per_proposal)
    # a proposal whose parent got every example of its minibatch right asks no LM (skipped)
    asked = {c.id for c in reflection_children if not c.reason.startswith("skipped:")}
    assert set(per_proposal) == asked and set(per_proposal.values()) <= {1, 2}
    assert_consistent_totals(sqlite_db, run_id)


def test_proposals_of_a_step_overlap_in_time(sqlite_db, tmp_path):
    cfg = toy_config(6, search={"parents_per_step": 2, "proposals_per_parent": 2},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, latency=0.3)
    assert stats.max_in_flight == 4  # the provider saw all four calls at once
    # the LM calls as recorded: each [started_at, started_at + seconds] overlaps every other
    calls = _reflections(sqlite_db, run_id)
    assert len(calls) == 4
    spans = [(c.started_at, c.started_at + timedelta(seconds=c.seconds)) for c in calls]
    for a in spans:
        for b in spans:
            assert a[0] < b[1] and b[0] < a[1], (a, b)
    # started_at is when the call started, not when it was recorded: the call's whole span lies
    # inside its proposal's lifetime (recorded at its end, the span would run past the proposal)
    for call in calls:
        child = repo.get_candidate(sqlite_db, call.candidate_id)
        assert call.seconds >= 0.3
        assert child.started_at <= call.started_at, (child.started_at, call.started_at)
        assert call.started_at + timedelta(seconds=call.seconds) <= child.finished_at, (call.started_at, child.finished_at)
    # and on the step's timeline
    [step] = repo.list_steps(sqlite_db, run_id)
    lm = [e for e in step.events if e["kind"] == "lm"]
    assert len(lm) == 4
    assert max(e["start"] for e in lm) < min(e["end"] for e in lm)  # all four in flight at one moment


# ---------------------------------------------------------------- the toy, end to end


def test_toy_reaches_its_known_optimum(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(8))
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed"
    assert run.status_reason.startswith("reached stop_at_score 1.0")
    assert run.best_val_mean == 1.0
    best = repo.get_candidate(sqlite_db, run.best_candidate_id)
    assert set(w for w in toy.WORDS[:8]) <= set(best.content["text"].split())
    assert best.status == "accepted" and best.val_count == 8
    # lineage: the best descends from the seed through accepted candidates
    node, seen = best, 0
    while node.parent_ids:
        node = repo.get_candidate(sqlite_db, node.parent_ids[0])
        assert node.status == "accepted"
        seen += 1
    assert node.origin == "seed" and seen >= 1
    assert_consistent_totals(sqlite_db, run_id)


def _fingerprint(db, run_id):
    cont = by_content(db, run_id)
    val = {}
    for ev, key, split in evaluations(db, run_id):
        val.setdefault(cont[ev.candidate_id], {})[key] = ev.score
    steps = [(sorted(cont[p] for p in s.parent_ids),
              sorted(cont[c] for c in s.proposal_ids),
              sorted(cont[c] for c in s.accepted_ids)) for s in repo.list_steps(db, run_id)]
    cands = sorted((c.step, c.origin, cont[c.id], c.status, c.val_mean) for c in repo.list_candidates(db, run_id))
    run = repo.get_run(db, run_id)
    return {"steps": steps, "candidates": cands, "scores": val, "metric_calls": run.metric_calls,
            "best": (cont[run.best_candidate_id], run.best_val_mean)}


def _same_word_late_or_soon(messages, params):
    """Every proposal of a parent adds the same word (a retry the next one), after a random
    0-60 ms: slots with different minibatches race for one text, in a different order each run."""
    import random
    import time

    time.sleep(random.random() * 0.06)
    current = toy.current_version(messages[1]["content"])
    missing = [w for w in toy.WORDS if w not in current.split()]
    word = missing[min(len(messages) > 2, len(missing) - 1)]
    return f"Adding {word}.\n```\n{current} {word}\n```"


@pytest.mark.parametrize("p,k,script", [
    (2, 2, toy.script),
    (1, 3, toy.script),  # siblings often propose the same text and race
    (4, 1, _same_word_late_or_soon),  # slots of one parent, each with its minibatch, race for one text
])
def test_same_seed_gives_identical_runs(tmp_path, p, k, script):
    from storage.db import Database

    prints = []
    for name in ("a", "b"):
        db = Database(f"sqlite:///{tmp_path / name}.db")
        db.create_all()
        cfg = toy_config(8, search={"parents_per_step": p, "proposals_per_parent": k},
                         budget={"max_steps": 5, "stop_at_score": None})
        run_id, _ = run_toy(db, tmp_path / name, cfg, script=script)
        prints.append(_fingerprint(db, run_id))
        db.dispose()
    a, b = prints
    assert len(a["steps"]) == 5 and len(a["candidates"]) > 5
    assert a["steps"] == b["steps"]
    assert a["candidates"] == b["candidates"]
    assert a["scores"] == b["scores"]
    assert a["metric_calls"] == b["metric_calls"] and a["best"] == b["best"]


# ---------------------------------------------------------------- proposals that fail


def _stubborn(messages, params):
    """Always proposes the current text plus ' extra': never an improvement, always the same."""
    return "```\n" + toy.current_version(messages[1]["content"]) + " extra\n```"


def test_rejected_proposals_are_kept_and_never_reproposed_for_the_same_parent(sqlite_db, tmp_path):
    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_stubborn)
    cands = repo.list_candidates(sqlite_db, run_id)
    seed = next(c for c in cands if c.origin == "seed")
    children = sorted((c for c in cands if c.origin == "reflection"), key=lambda c: c.step)
    assert [c.step for c in children] == [0, 1, 2]
    first, *repeats = children
    assert first.status == "rejected" and first.content == {"text": "start extra"}
    assert first.reason == "no improvement on the minibatch (0 vs parent 0)"
    assert first.minibatch_score == 0 and first.parent_minibatch_score == 0
    for c in repeats:
        assert c.status == "failed" and c.reason == "repeats an earlier proposal for this parent"
        assert c.parent_ids == [seed.id]
    # only the first of the three identical texts was evaluated
    evaluated = {ev.candidate_id for ev, _, _ in evaluations(sqlite_db, run_id)}
    assert first.id in evaluated and not any(c.id in evaluated for c in repeats)
    # the LM was told what had been tried
    prompts = [m[1]["content"] for m, _ in stats.calls]
    assert "Already tried" not in prompts[0]
    assert "## Already tried for this version (do not repeat these)\n```\nstart extra\n```" in prompts[1]
    assert_consistent_totals(sqlite_db, run_id)


def test_a_rejected_proposal_says_what_it_broke_and_the_next_prompt_shows_it(sqlite_db, tmp_path):
    """A proposal that lost an example keeps, in its reason, the example it lost most on and what
    the evaluator said there; the next reflection on that parent lists it under "Already tried"
    with that result, and a repeat of it is told the same on its retry."""
    answers = iter(["```\nalpha bravo\n```", "```\nalpha bravo\n```", "```\nalpha bravo\n```"])

    def script(messages, params):
        return next(answers, "```\nalpha bravo charlie delta extra\n```")

    cfg = toy_config(4, seed_candidate="alpha bravo charlie delta",
                     search={"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 4},
                     budget={"max_steps": 2, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    first = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection" and c.step == 0)
    said = ("no improvement on the minibatch (2 vs parent 4); worst: `w2` 1 → 0: "
            'expected: charlie; got: ["alpha", "bravo"]; stdout: missing charlie')
    assert first.status == "rejected" and first.reason == said
    prompts = [m[-1]["content"] for m, _ in stats.calls]
    assert f"```\nalpha bravo\n```\nResult: {said}" in stats.calls[1][0][1]["content"]
    # step 1 answered the same text again: its retry was told what became of it
    assert prompts[2].startswith("That exact version was already proposed for this parent and tried. "
                                 f"Result: {said}\n")
    assert_consistent_totals(sqlite_db, run_id)


def _unfenced(messages, params):
    return "I would add the word alpha to the list."


def test_answer_without_a_fence_gets_one_retry_then_is_a_failed_proposal(sqlite_db, tmp_path):
    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 2},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_unfenced)
    retries = [m for m, _ in stats.calls if len(m) > 2]
    assert len(retries) == 2 and "Your answer has no fenced code block" in retries[0][-1]["content"]
    children = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert len(children) == 2
    for c in children:
        assert c.status == "failed" and c.reason == "unusable answer: the answer has no fenced code block"
        assert c.lm_call_id is not None  # the answer that failed is on record
        assert repo.get_lm_call(sqlite_db, c.lm_call_id).answer == "I would add the word alpha to the list."
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.proposals_total == 2 and run.proposals_parsed == 0


def test_without_require_fence_the_whole_answer_is_the_candidate(sqlite_db, tmp_path):
    def plain(messages, params):
        return toy.current_version(messages[1]["content"]) + " alpha bravo"

    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1, "require_fence": False},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=plain)
    [child] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert child.content == {"text": "start alpha bravo"}


@pytest.mark.parametrize("error", ["rate_limit", "connection"])
def test_lm_failing_after_retries_fails_proposals_then_pauses_the_run(sqlite_db, tmp_path, error):
    def failing(messages, params):
        if error == "rate_limit":
            raise litellm.RateLimitError("quota exceeded for today", llm_provider="scripted", model="toy")
        raise litellm.APIConnectionError(message="connection refused", llm_provider="scripted", model="toy")

    cfg = toy_config(4, budget={"max_steps": 10, "stop_at_score": None})  # 2x2: 4 failures a step
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=failing)
    run = repo.get_run(sqlite_db, run_id)
    name = "RateLimitError" if error == "rate_limit" else "APIConnectionError"
    children = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert children and all(c.status == "failed" for c in children)
    assert all(c.reason.startswith("reflection LM failed: ") and name in c.reason for c in children)
    # the run goes on after one failing step, and pauses once 5 failures in a row are seen
    assert run.status == "paused"
    assert run.steps_done == 2 and len(children) == 8
    assert "the reflection LM failed 8 times in a row" in run.status_reason and name in run.status_reason
    calls = _reflections(sqlite_db, run_id)
    assert len(calls) == 8 and all(name in c.error for c in calls)
    assert run.metric_calls == 4  # the seed's validation; failed proposals cost no evaluation
    assert_consistent_totals(sqlite_db, run_id)


def test_engine_run_exits_3_when_the_engine_paused_the_run_for_its_lm(db, tmp_path, monkeypatch, capsys):
    """A script can tell "the LM kept failing" from success: ``python -m engine run`` exits 3."""
    from engine import cli
    from tests.support.harness import toy_project

    install_script(lambda m, p: (_ for _ in ()).throw(
        litellm.RateLimitError("quota exceeded for today", llm_provider="scripted", model="toy")))
    path = toy_project(tmp_path / "project", "lm fails", """
        [budget]
        max_steps = 10
        [reflection_lm]
        model = "scripted/toy"
        num_retries = 0
    """)
    assert cli.main(["run", str(path), "--db", db.url, "--quiet"]) == 3
    out, err = capsys.readouterr()
    [run] = repo.list_runs(db)
    assert run.status == "paused" and "the reflection LM failed 8 times in a row" in run.status_reason
    assert f"The engine paused run {run.id}: its reflection LM kept failing (exit code 3)" in err
    assert f"python -m engine resume {run.id}" in err
    assert cli.main(["status", run.id, "--db", db.url]) == 3  # the same code for the same state
    repo.set_run_fields(db, run.id, status_reason="paused by ana")  # a person's pause is no failure
    assert cli.main(["status", run.id, "--db", db.url]) == 0


# ---------------------------------------------------------------- evaluators that misbehave

BAD_EVALUATOR = '''
def evaluate(candidate, example):
    w = example["word"]
    if w == "charlie":
        raise ValueError("boom on " + w)
    if w == "delta":
        return float("nan")
    if w == "echo":
        return "high", {"note": "a string score"}
    print("checked", w)
    return float(w in candidate.split()), {"expected": w}
'''


def test_evaluator_errors_score_zero_with_the_reason_and_the_run_goes_on(sqlite_db, tmp_path):
    cfg = toy_config(6, evaluator=BAD_EVALUATOR, search={"parents_per_step": 1, "proposals_per_parent": 2},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.steps_done == 3
    rows = {}
    for ev, key, _ in evaluations(sqlite_db, run_id):
        rows.setdefault(key, []).append(ev)
    for ev in rows["w2"]:  # charlie: raises
        assert ev.score == 0.0
        assert ev.error.startswith("ValueError: boom on charlie") and "evaluator.py, line 5" in ev.error
        assert "Traceback" in ev.side_info["traceback"] and 'raise ValueError("boom on " + w)' in ev.side_info["traceback"]
    for ev in rows["w3"]:  # delta: NaN
        assert ev.score == 0.0 and "nan" in ev.error and "finite number" in ev.error
    for ev in rows["w4"]:  # echo: a string
        assert ev.score == 0.0 and "'high'" in ev.error and "must be a number" in ev.error
    for ev in rows["w0"]:  # alpha: fine, and its printed output lands in the side information
        assert ev.error is None and ev.side_info["expected"] == "alpha"
        assert "checked alpha" in json.dumps(ev.side_info)
    # the reflection LM was shown the error of a failing example in its minibatch
    prompts = "\n".join(m[1]["content"] for m, _ in stats.calls)
    assert "boom on charlie" in prompts or "finite number" in prompts or "must be a number" in prompts


def test_evaluator_failing_everywhere_fails_the_run_with_the_first_error(sqlite_db, tmp_path):
    source = "def evaluate(candidate, example):\n    return 1 / 0\n"
    run_id, stats = run_toy(sqlite_db, tmp_path, toy_config(3, evaluator=source))
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "failed"
    assert "the evaluator failed on every validation example for the seed" in run.status_reason
    assert "ZeroDivisionError" in run.status_reason
    assert stats.calls == []  # no LM money spent on a broken evaluator


# ---------------------------------------------------------------- modes


SINGLE_EVALUATOR = '''
TARGET = ["alpha", "bravo", "charlie", "delta"]

def evaluate(candidate):
    words = candidate.split()
    missing = [w for w in TARGET if w not in words]
    return (len(TARGET) - len(missing)) / len(TARGET), {"missing": missing}
'''


def _single_task_script(messages, params):
    prompt = messages[1]["content"]
    missing = json.loads(re.search(r"\*\*missing:\*\*\n```json\n(.*?)\n```", prompt, re.S).group(1))
    return "```\n" + toy.current_version(prompt) + " " + missing[0] + "\n```"


def test_single_task_mode(sqlite_db, tmp_path):
    cfg = toy_config(evaluator=SINGLE_EVALUATOR, dataset=None,
                     search={"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 1},
                     budget={"max_metric_calls": 30})
    assert cfg.mode == "single-task"
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_single_task_script)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.best_val_mean == 1.0
    best = repo.get_candidate(sqlite_db, run.best_candidate_id)
    assert best.content == {"text": "start alpha bravo charlie delta"}
    keys = {key for _, key, _ in evaluations(sqlite_db, run_id)}
    assert keys == {"task"}
    assert "Input / expected" not in stats.calls[0][0][1]["content"]  # no example payload to show
    assert_consistent_totals(sqlite_db, run_id)


def test_generalization_mode_with_a_held_out_test_set(sqlite_db, tmp_path):
    words = toy.WORDS
    train = [{"id": f"tr{i}", "word": w} for i, w in enumerate(words[:4])]
    val = [{"id": f"va{i}", "word": w} for i, w in enumerate(words[:4])]
    test = [{"id": "te0", "word": words[0]}, {"id": "te1", "word": words[1]}, {"id": "te2", "word": "zulu"}]
    cfg = toy_config(dataset=train, valset=val, testset=test)
    assert cfg.mode == "generalization"
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.best_val_mean == 1.0
    rows = evaluations(sqlite_db, run_id)
    test_rows = [(ev, key) for ev, key, split in rows if split == "test"]
    # the final best and the seed, once per test example each, never charged as a metric call
    seed_id = next(c.id for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed")
    by_cand = {cid: sorted(k for ev, k in test_rows if ev.candidate_id == cid) for cid in (run.best_candidate_id, seed_id)}
    assert by_cand == {run.best_candidate_id: ["te0", "te1", "te2"], seed_id: ["te0", "te1", "te2"]}
    assert len(test_rows) == 6
    assert run.test_mean == pytest.approx(2 / 3) and run.seed_test_mean == 0.0
    assert run.metric_calls == sum(1 for ev, _, split in rows if split != "test" and not ev.cached)
    # selection used the validation split; reflection saw only training examples, never the test set
    assert {key for ev, key, split in rows if split == "val"} == {"va0", "va1", "va2", "va3"}
    prompts = "\n".join(m[1]["content"] for m, _ in stats.calls)
    assert "zulu" not in prompts and "te0" not in prompts and "va0" not in prompts
    best = repo.get_candidate(sqlite_db, run.best_candidate_id)
    assert best.val_count == 4
    assert_consistent_totals(sqlite_db, run_id)


# ---------------------------------------------------------------- multi-component candidates


def test_multi_component_proposals_rewrite_one_component_each_round_robin(sqlite_db, tmp_path):
    run_id, stats = run_toy(sqlite_db, tmp_path, _multi_config(), script=_component_script)
    children = sorted((c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"),
                      key=lambda c: c.component)
    # K = 2 proposals on the seed: one per component, each changing only its own
    assert [c.component for c in children] == ["a", "b"]
    assert children[0].content == {"a": "start alpha", "b": "start"}
    assert children[1].content == {"a": "start", "b": "start charlie"}
    prompts = [m[1]["content"] for m, _ in stats.calls]
    assert any("the component `a` of a multi-part candidate (a, b)" in p for p in prompts)


def test_round_robin_moves_on_along_a_lineage(sqlite_db, tmp_path):
    """1x1 with every proposal accepted: GEPA rotates the component along the lineage, so the
    chain rewrites a, b, a, b — not component a forever."""
    cfg = _multi_config(search={"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 4,
                                "selection": "best"},
                        budget={"max_steps": 4, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_component_script)
    children = sorted((c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"),
                      key=lambda c: c.step)
    assert [c.component for c in children] == ["a", "b", "a", "b"]
    assert all(c.status == "accepted" for c in children)
    assert children[-1].content == {"a": "start alpha bravo", "b": "start charlie delta"}


def test_system_aware_merge_combines_children_that_changed_different_components(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, _multi_config(search={"parents_per_step": 1, "proposals_per_parent": 2,
                                                                   "minibatch_size": 4, "merge": True}),
                        script=_component_script)
    cands = repo.list_candidates(sqlite_db, run_id)
    merges = [c for c in cands if c.origin == "merge"]
    assert len(merges) == 1
    merged = merges[0]
    parents = {repo.get_candidate(sqlite_db, p).component for p in merged.parent_ids}
    assert parents == {"a", "b"}
    assert merged.content == {"a": "start alpha", "b": "start charlie"}
    assert merged.status == "accepted" and merged.val_mean == 0.5
    run = repo.get_run(sqlite_db, run_id)
    assert run.best_candidate_id == merged.id and run.best_val_mean == 0.5
    assert_consistent_totals(sqlite_db, run_id)


def test_no_merge_unless_enabled(sqlite_db, tmp_path):
    run_id, _ = run_toy(sqlite_db, tmp_path, _multi_config(), script=_component_script)
    assert not [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "merge"]


# ---------------------------------------------------------------- seed from the objective


def test_seed_written_by_the_lm_from_the_objective(sqlite_db, tmp_path):
    def script(messages, params):
        if "Write a first version" in messages[1]["content"]:
            return "Here:\n```\nfirst draft\n```"
        return toy.script(messages, params)

    cfg = toy_config(4, seed_candidate=None, objective="List the NATO words.", artifact_kind="a list of words",
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    seed = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed")
    assert seed.content == {"text": "first draft"} and seed.lm_call_id is not None
    assert [c.purpose for c in lm_calls(sqlite_db, run_id)][0] == "seed"
    assert "List the NATO words." in stats.calls[0][0][1]["content"]


def test_resuming_a_completed_run_is_a_no_op_for_the_pool(sqlite_db, tmp_path):
    """Running the optimizer again on a finished run pays for nothing already paid."""
    run_id, _ = run_toy(sqlite_db, tmp_path, toy_config(4, budget={"max_steps": 2, "stop_at_score": None}))
    before = repo.get_run(sqlite_db, run_id)
    install_script(toy.script)
    repo.transition_run(sqlite_db, run_id, RunStatus.RUNNING, "")
    run_optimizer(sqlite_db, run_id, tmp_path)
    after = repo.get_run(sqlite_db, run_id)
    assert after.metric_calls == before.metric_calls and after.steps_done == 2
    assert_consistent_totals(sqlite_db, run_id)


def test_failed_proposals_do_not_show_as_empty_tried_texts(sqlite_db, tmp_path):
    """A proposal that failed before it had any text (LM error, no fence) has nothing to show
    under "Already tried": the next prompt must not list an empty block."""
    # no fence, and no fence again on the retry it gets
    answers = iter(["no fence at all", "still no fence", "```\nstart extra\n```"])

    def script(messages, params):
        return next(answers, "```\nstart more\n```")

    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    prompts = [m[1]["content"] for m, _ in stats.calls if len(m) == 2]  # first asks, not retries
    assert len(prompts) == 3 and len(stats.calls) == 4
    assert "Already tried" not in prompts[1], prompts[1][prompts[1].find("## Already"):]
    tried = prompts[2][prompts[2].index("## Already tried"):prompts[2].index("## Task")]
    assert "start extra" in tried and "```\n\n```" not in tried


def test_tried_texts_leave_out_the_current_steps_siblings():
    """Whether a sibling of the same step has finished when a proposal builds its prompt (and
    picks its component) depends on thread timing; counting it made one seeded run differ from
    the next under load (both siblings rewrote the same component). Only earlier steps count."""
    from engine.state import PoolState
    from storage.models import Candidate

    def child(cid: str, step: int, text: str) -> Candidate:
        return Candidate(id=cid, run_id="r", content={"text": text}, content_hash=cid, origin="reflection",
                         parent_ids=["p"], component="text", step=step)

    state = PoolState(val_keys=[])
    for c in (child("a", 1, "start one"), child("b", 2, "start two"), child("c", 2, "start three")):
        state.candidates[c.id] = c
    assert state.tried_texts("p", before_step=2) == ["start one"]
    assert state.tried_texts("p", before_step=3) == ["start one", "start two", "start three"]  # by step, then hash
    assert state.tried_texts("p", before_step=1) == []


@pytest.mark.parametrize("accept,validated", [("best", 1), ("top_k", 2)])
def test_accept_rule_limits_the_validation_passes_of_a_step(sqlite_db, tmp_path, accept, validated):
    cfg = toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 2, "accept": accept, "top_k": 2},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    [step] = repo.list_steps(sqlite_db, run_id)
    children = {c.id: c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"}
    improved = [c for c in children.values() if c.minibatch_score > c.parent_minibatch_score]
    assert len(improved) == 4  # the toy's every first proposal improves
    assert len(step.accepted_ids) == validated
    for cid, c in children.items():
        if cid in step.accepted_ids:
            assert c.status == "accepted" and c.val_count == 8
        else:
            assert c.status == "rejected"
            assert c.reason == f"improved on its minibatch but not selected (accept = {accept!r})"
            assert c.val_count == 0  # no validation pass paid: only its minibatch test
            assert len(repo.evaluations_for(sqlite_db, run_id, [cid])) == len(c.minibatch_keys) == 3
    # the chosen ones are those with the largest minibatch gain
    gains = sorted((c.minibatch_score - c.parent_minibatch_score for c in improved), reverse=True)
    chosen = sorted((children[c].minibatch_score - children[c].parent_minibatch_score for c in step.accepted_ids),
                    reverse=True)
    assert chosen == gains[:validated]
    assert_consistent_totals(sqlite_db, run_id)


def test_seed_the_lm_cannot_write_fails_the_run_with_the_reason(sqlite_db, tmp_path):
    cfg = toy_config(4, seed_candidate=None, objective="List the NATO words.")
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=lambda m, p: "   ")
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "failed"
    assert run.status_reason == "the reflection LM could not write a seed from the objective: the answer is empty"


def test_a_wide_step_on_every_backend(db, tmp_path):
    """4x2: eight proposals writing at once, plus the recorder and the validation passes, on
    SQLite and on PostgreSQL."""
    cfg = toy_config(8, search={"parents_per_step": 4, "proposals_per_parent": 2},
                     budget={"max_steps": 2, "stop_at_score": None})
    run_id, stats = run_toy(db, tmp_path, cfg, latency=0.1)
    run = repo.get_run(db, run_id)
    assert run.status == "completed" and run.steps_done == 2
    assert stats.max_in_flight >= 4  # concurrent (exactly 8 depends on thread start-up under load)
    assert [len(s.proposal_ids) for s in repo.list_steps(db, run_id)] == [8, 8]
    assert_consistent_totals(db, run_id)


NO_DIGITS_EVALUATOR = toy.EVALUATOR + '''

def validate(candidate):
    if any(ch.isdigit() for ch in candidate):
        return "digits are not allowed; use words only"
'''


@pytest.mark.parametrize("learns", [True, False])
def test_invalid_proposal_gets_one_retry_with_the_message_and_costs_no_evaluation(sqlite_db, tmp_path, learns):
    def script(messages, params):
        current = toy.current_version(messages[1]["content"])
        told = any("That version is invalid: digits are not allowed" in m["content"] for m in messages)
        return f"```\n{current} {'alpha' if told and learns else 'w0 42'}\n```"

    cfg = toy_config(4, evaluator=NO_DIGITS_EVALUATOR, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    assert len(stats.calls) == 2  # the proposal and its one retry
    retry_messages = stats.calls[1][0]
    assert retry_messages[-2] == {"role": "assistant", "content": "```\nstart w0 42\n```"}
    [child] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    evaluated = {ev.candidate_id for ev, _, _ in evaluations(sqlite_db, run_id)}
    run = repo.get_run(sqlite_db, run_id)
    assert run.proposals_retried == 1  # the retry is a reflection too: counted
    if learns:
        assert child.content == {"text": "start alpha"} and child.status == "accepted"
        assert (run.proposals_total, run.proposals_parsed, run.proposals_valid) == (1, 1, 1)
    else:
        assert child.status == "failed"
        assert child.reason == "invalid candidate (validate): digits are not allowed; use words only"
        assert child.id not in evaluated  # the invalid text cost no metric call
        assert (run.proposals_total, run.proposals_parsed, run.proposals_valid) == (1, 1, 0)


def test_a_fence_holding_only_the_change_line_gets_one_retry_that_says_where_the_version_goes(sqlite_db, tmp_path):
    def script(messages, params):
        current = toy.current_version(messages[1]["content"])
        if len(messages) == 2:
            return "```\nChange: add alpha.\n```"
        assert messages[-1]["content"].startswith("Your fenced block held only the `Change:` line.")
        return f"Change: add alpha.\n```\n{current} alpha\n```"

    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    [child] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert child.content == {"text": "start alpha"} and child.status == "accepted" and len(stats.calls) == 2
    assert repo.get_run(sqlite_db, run_id).proposals_retried == 1


def test_a_text_validate_refused_is_not_listed_as_tried(sqlite_db, tmp_path):
    """Shown as a version under "Already tried", a refused text was copied by a small model."""
    answers = iter(["```\nstart w0 42\n```", "```\nstart w0 43\n```"])

    def script(messages, params):
        return next(answers, "```\nstart extra\n```")

    cfg = toy_config(4, evaluator=NO_DIGITS_EVALUATOR, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=script)
    first, second = sorted((c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"),
                           key=lambda c: c.step)[:2]
    assert first.status == "failed" and first.reason.startswith("invalid candidate (validate)")
    assert second.status == "rejected" and second.content == {"text": "start extra"}
    prompts = [m[1]["content"] for m, _ in stats.calls]
    assert "Already tried" not in prompts[2]  # step 1: only the refused texts were tried
    assert "w0 42" not in prompts[3] and "```\nstart extra\n```\nResult: no improvement" in prompts[3]


@pytest.mark.parametrize("local", [False, True])
def test_a_repeated_answer_gets_one_retry_that_is_told_so(sqlite_db, tmp_path, monkeypatch, local):
    """A small model repeats itself: the first answer repeats the parent, the retry (which is
    told so) proposes something new, and the proposal goes on to its minibatch test. The local
    model too is told (a resample of the same prompt changed its unchanged answer less often)."""
    import engine.search.proposal as proposal

    monkeypatch.setattr(proposal, "is_local", lambda model: local)
    def stubborn_then_new(messages, params):
        current = toy.current_version(messages[1]["content"])
        if len(messages) == 2:
            return f"```\n{current}\n```"  # unchanged
        assert "unchanged" in messages[-1]["content"]
        return f"Change: add alpha.\n```\n{current} alpha\n```"

    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=stubborn_then_new)
    [child] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert child.content == {"text": "start alpha"} and child.status == "accepted"
    assert len(stats.calls) == 2
    run = repo.get_run(sqlite_db, run_id)
    assert (run.proposals_total, run.proposals_parsed, run.proposals_valid, run.proposals_retried) == (1, 1, 1, 1)


def test_the_local_model_is_shown_no_earlier_texts_and_a_repeat_is_sampled_anew(sqlite_db, tmp_path, monkeypatch):
    """Shown the texts already tried, the local 1.5B model copied them; told of its repeat with its
    answer in the prompt, it repeated it again. On the local model (``is_local``; the scripted LM
    stands in for it here) no "Already tried" section, and the retry of a repeat is the same
    messages with another seed, hotter."""
    import engine.search.proposal as proposal

    monkeypatch.setattr(proposal, "is_local", lambda model: True)
    cfg = toy_config(4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 2, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_stubborn)
    assert [c.reason for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"] == [
        "no improvement on the minibatch (0 vs parent 0)", "repeats an earlier proposal for this parent"]
    (first, p1), (again, p2), (retry, p3) = stats.calls
    assert not any("Already tried" in m["content"] for m in again)
    assert retry == again  # no assistant turn: sampled anew
    assert p3["sample_index"] != p2["sample_index"] and p3["temperature"] > p2["temperature"]
    # the candidate page says the LM was asked twice and shows the first answer
    from storage import queries

    repeat = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.status == "failed")
    assert queries.candidate_detail(sqlite_db, repeat.id)["earlier_answers"] == ["```\nstart extra\n```"]


def _elsewhere(messages, params):
    """Adds the word of an example the minibatch does not show: a fix the minibatch cannot see."""
    prompt = messages[1]["content"]
    current, shown = toy.current_version(prompt), set(toy.missing_words(prompt))
    word = next(w for w in toy.WORDS if w not in shown and w not in current.split())
    return f"Adding {word}.\n```\n{current} {word}\n```"


def test_a_child_that_ties_its_minibatch_gets_a_second_look_when_reflections_are_slow(sqlite_db, tmp_path):
    """A child that fixes an example outside its minibatch ties "0 vs parent 0" there; with a
    reflection of seconds and evaluations of milliseconds it is judged on more training examples
    too, and passes, with the second look in its reason and its minibatch's."""
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_elsewhere, latency=2.1)
    child = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection")
    assert child.reason == "improved on a second look" and child.status == "accepted"
    assert len(child.minibatch_keys) == 8  # the minibatch of 3, then the 5 other training examples
    assert (child.parent_minibatch_score, child.minibatch_score) == (0, 1)
    assert child.minibatch_reason.endswith("then 5 more training examples after a tie on the first 3 (0 vs parent 0): "
                                           "a second look")
    assert_consistent_totals(sqlite_db, run_id)


def _one_here_or_two_elsewhere(messages, params):
    """Proposal 0 adds a word its minibatch shows; proposal 1 two words of examples it does not
    show (a tie on the minibatch, then a second look)."""
    prompt = messages[1]["content"]
    current, shown = toy.current_version(prompt), toy.missing_words(prompt)
    if params.get("sample_index", 0) == 0:
        return f"Adding {shown[0]}.\n```\n{current} {shown[0]}\n```"
    two = [w for w in toy.WORDS if w not in shown and w not in current.split()][:2]
    return f"Adding {' and '.join(two)}.\n```\n{current} {' '.join(two)}\n```"


def test_siblings_are_ranked_by_gain_per_example_judged_not_by_a_second_looks_larger_total(sqlite_db, tmp_path):
    """A second look judges a child on 8 examples, its sibling on 3: +2 of 8 is a larger total
    than +1 of 3 but a smaller gain per example, and it only tied where its sibling won. accept =
    "best" validates the sibling that won on its minibatch (before: the larger total)."""
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 2, "accept": "best"},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_one_here_or_two_elsewhere, latency=2.1)
    children = {c.reason: c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"}
    assert set(children) == {"improved", "improved on its minibatch but not selected (accept = 'best')"}
    won, passed_over = children["improved"], children["improved on its minibatch but not selected (accept = 'best')"]
    assert (won.minibatch_score - won.parent_minibatch_score, len(won.minibatch_keys)) == (1, 3)
    assert (passed_over.minibatch_score - passed_over.parent_minibatch_score, len(passed_over.minibatch_keys)) == (2, 8)
    assert won.status == "accepted" and won.val_count == 8 and passed_over.status == "rejected"


@pytest.mark.parametrize("latency", [2.1, 0.0])
def test_the_runner_up_is_validated_when_the_best_did_not_beat_its_parent(sqlite_db, tmp_path, latency):
    """The validation set holds none of the training words, so the step's best child (+1 of 3 on its
    minibatch, like its sibling) scores no higher than its parent there. With reflections of seconds
    and metric calls of milliseconds the runner-up is validated too and says why; with an instant LM a
    pass is not cheap beside a reflection, and it is passed over as before."""
    val = [{"id": f"w{i}", "word": w} for i, w in enumerate(toy.WORDS) if i >= 8]
    cfg = toy_config(8, valset=val, search={"parents_per_step": 1, "proposals_per_parent": 2, "accept": "best"},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, latency=latency)
    children = {c.id: c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"}
    [step] = [s for s in repo.list_steps(sqlite_db, run_id) if s.proposal_ids]
    best = children[step.accepted_ids[0]]
    [other] = [c for cid, c in children.items() if cid != best.id]
    assert best.reason == "improved" and best.val_mean == 0 and other.minibatch_score > other.parent_minibatch_score
    if latency:
        assert other.status == "accepted" and other.val_count == len(val)
        assert other.reason == (f"improved on its minibatch; validated as the runner-up: {best.id}, the step's best on "
                                "its minibatch, scored 0 on the validation set, no better than its parent (0)")
        assert step.accepted_ids == [best.id, other.id]
    else:
        assert other.status == "rejected" and step.accepted_ids == [best.id]
        assert other.reason == "improved on its minibatch but not selected (accept = 'best')"


def test_a_quick_reflection_gets_no_second_look(sqlite_db, tmp_path):
    """The same child with an instant LM: the next proposal settles a tie as cheaply, so the
    minibatch alone decides, as in GEPA."""
    cfg = toy_config(8, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_elsewhere)
    child = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection")
    assert child.reason == "no improvement on the minibatch (0 vs parent 0)" and len(child.minibatch_keys) == 3
