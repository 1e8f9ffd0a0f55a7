"""The step explanation's read model on a real run (scripted LM, real sandboxes), on SQLite and
PostgreSQL: each phase is that step's stored facts, and the frontier before / after the step is
recomputed from the evaluations independently here."""

from __future__ import annotations

from engine.runtime.model import lm_spread_of, slowest_lm
from storage import explain_queries, repo
from tests.support.harness import run_toy, toy_config
from ui import explain_model as em


def _val_best(db, run_id, alive: set[str]) -> dict[str, float]:
    split = {e.pk: (e.key, e.split) for e in repo.get_examples(db, run_id)}
    validation = "val" if any(s == "val" for _, s in split.values()) else "train"  # no valset: the dataset
    best: dict[str, float] = {}
    for ev in repo.evaluations_for(db, run_id):
        key, s = split[ev.example_pk]
        if ev.candidate_id in alive and s == validation:
            best[key] = max(best.get(key, float("-inf")), ev.score)
    return best


def test_each_phase_is_the_steps_stored_data(db, tmp_path):
    run_id, _ = run_toy(db, tmp_path, toy_config(8))
    run = repo.get_run(db, run_id)
    steps = repo.list_steps(db, run_id)
    assert explain_queries.step_indexes(db, run_id) == [s.index for s in steps]
    step = steps[1]
    detail = explain_queries.step_detail(db, run_id, step.index)
    assert detail["step"]["parent_ids"] == step.parent_ids and detail["step"]["proposal_ids"] == step.proposal_ids

    # parents and their minibatches: the children's minibatch, the parent's own scores on it
    cands = {c.id: c for c in repo.list_candidates(db, run_id)}
    assert [p["id"] for p in em.parent_minibatches(detail)] == step.parent_ids
    for p in em.parent_minibatches(detail):
        # the slot's minibatch is one its children were tested on, and the parent's scores there add up
        child = next(cands[c] for c in step.proposal_ids
                     if cands[c].parent_ids == [p["id"]] and cands[c].minibatch_keys == p["keys"])
        assert p["keys"] and p["reason"] == step.parent_reasons[p["id"]]
        assert sum(r["score"] for r in p["rows"]) == child.parent_minibatch_score
        assert p["drawn"] == child.minibatch_reason and p["drawn"]  # how the engine drew it, as it said

    # proposals: each child with the reflection call that wrote it and its fate
    kids = em.proposals(detail)
    assert [k["id"] for k in kids] == step.proposal_ids
    for k in kids:
        c = cands[k["id"]]
        if c.origin == "reflection":
            call = repo.get_lm_call(db, c.lm_call_id)
            assert k["lm_call"]["messages"] == call.messages and k["lm_call"]["answer"] == call.answer
        assert k["validated"] == (c.id in step.accepted_ids)
        # the stored column, and what the reason said before the studio read it
        assert k["improved"] == (c.improved or c.status == "accepted")
        assert k["improved"] == (c.status == "accepted" or c.reason.startswith("improved"))

    # the frontier before and after the step, recomputed from the evaluations
    n = step.index
    for front, was_there in ((em.frontier_at(detail, n, products=False), lambda c: c.step < n or c.origin in ("seed", "human")),
                             (em.frontier_at(detail, n), lambda c: True)):
        alive = {c.id for c in cands.values() if c.status == "accepted" and not c.vetoed and c.step <= n and was_there(c)}
        assert front["best"] == _val_best(db, run_id, alive)
        means = {c.id: c.val_mean for c in cands.values() if c.id in alive}
        assert front["best_mean"][1] == max(means.values())
    # the first step starts from the validated seed
    first = explain_queries.step_detail(db, run_id, steps[0].index)
    seed = next(c for c in cands.values() if c.origin == "seed")
    assert em.frontier_at(first, steps[0].index, products=False)["best_mean"] == (seed.id, seed.val_mean)

    # the whole run's best is the frontier after its last step
    final = explain_queries.step_detail(db, run_id, steps[-1].index)
    assert em.frontier_at(final, steps[-1].index)["best_mean"][1] == run.best_val_mean

    check = em.runtime_check(detail, run.config)
    assert check["measured"] == step.seconds and check["predicted"] > 0
    assert check["shape"].k == 4 and check["latencies"].workers == 2
    assert check["bound"] in ("LM-bound", "evaluator-bound")
    # its LM wait is the slowest of the step's four reflections, as measured in the step's own calls
    calls = [e["end"] - e["start"] for e in detail["step"]["events"] if e["kind"] == "lm"]
    assert check["latencies"].lm_spread == lm_spread_of(calls)
    assert not run.config["search"].get("merge_siblings")
    assert check["lm_seconds"] == slowest_lm(check["latencies"], 4)


def test_the_parents_phase_names_the_candidates_below_the_seed():
    cands = {"s": {"id": "s", "origin": "seed"}, "a": {"id": "a", "origin": "reflection"},
             "b": {"id": "b", "origin": "reflection"}}
    scores = {"s": {"x": 1.0, "y": 0.0}, "a": {"x": 0.0, "y": 0.0}, "b": {"x": 1.0, "y": 1.0}}
    assert em.below_seed(scores, cands) == {"a": (0.0, 0.5)}


def test_unknown_steps_and_runs(db):
    run_id = repo.create_run(db, "no steps yet", "test", {}, [("x0", "train", {})])
    assert explain_queries.step_indexes(db, run_id) == []
    assert explain_queries.step_detail(db, run_id, 0) is None
    assert explain_queries.step_detail(db, "rnope", 0) is None
    assert explain_queries.step_indexes(db, "rnope") == []
    assert explain_queries.run_lineage(db, "rnope") is None


def test_the_runtime_panel_says_how_the_reflections_of_a_step_share_the_lm():
    hosted = em.reflections_note({"reflection_lm": {"model": "openai/gpt-4.1-mini"}})
    local = em.reflections_note({"reflection_lm": {"model": "local/qwen2.5-coder-1.5b"}})
    assert "run at the same time" in hosted
    assert "one request at a time" in local and "run at the same time" not in local


def test_the_acceptance_phase_says_the_improvement_rule_the_engine_used():
    from engine.config import SearchConfig

    strict = SearchConfig().model_dump(mode="json")  # a stored default run: acceptance is None, improvement strict
    assert strict["acceptance"] is None
    assert em.improvement_sentence(strict).startswith("A child **improved** when its minibatch total is above its "
                                                      "parent's (improvement = strict). ")
    assert "**second look**" in em.improvement_sentence(strict)
    ties = SearchConfig(improvement="improvement_or_equal").model_dump(mode="json")
    assert "is at least its parent's (improvement = improvement_or_equal)" in em.improvement_sentence(ties)
    # a run stored under the old name says the rule it ran with too
    assert "at least" in em.improvement_sentence({"acceptance": "improvement_or_equal"})
    assert "above" in em.improvement_sentence({})


def test_the_runtime_panels_figures_fit_its_narrow_column():
    from ui.explain_view import _seconds

    assert [_seconds(x) for x in (0.0834, 0.118, 1.46, 9.996, 34.06)] == ["0.08 s", "0.12 s", "1.46 s", "10 s", "34 s"]
    assert all(len(_seconds(x)) <= 6 for x in (0.0004, 0.0834, 0.9996, 9.96, 123.4))
