"""Analyze's checks one by one, on records built by hand (``RunRecords.from_raw``: the shape
``storage.analyze_queries.run_records`` returns), for the findings no sick run is made of."""

from __future__ import annotations

from datetime import datetime, timezone

from engine.analyze import analyze_records, evaluator_checks, pace, search_checks
from engine.analyze.records import RunRecords

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def cand(cid, origin="reflection", status="accepted", step=1, parents=("seed",), val_mean=None, val_count=0,
         reason="", mb=None, parent_mb=None, keys=(), vetoed=False, pinned=False):
    return {"id": cid, "origin": origin, "parent_ids": list(parents), "component": None, "merge_path": "", "step": step,
            "status": status, "reason": reason, "pinned": pinned, "vetoed": vetoed, "author": "", "created_at": T,
            "finished_at": T, "lm_call_id": None, "parent_minibatch_score": parent_mb, "minibatch_score": mb,
            "minibatch_keys": list(keys), "val_mean": val_mean, "val_count": val_count}


def records(cands, val, train=(), test=(), steps=(), lm=(), run=None, config=None, train_scores=None,
            eval_seconds=(0.01, 100)) -> RunRecords:
    """``val`` and ``train_scores``: {candidate: {example: score}} on the validation examples (v0…)
    and the training examples ``train`` (t0…); ``test`` the held-out examples' keys."""
    keys = sorted({k for per in val.values() for k in per})
    examples = [(i, k, "val") for i, k in enumerate(keys)] + [(100 + i, k, "train") for i, k in enumerate(train)] \
        + [(200 + i, k, "test") for i, k in enumerate(test)]
    pk = {k: p for p, k, _ in examples}
    rows = [(c, pk[k], s) for table in (val, train_scores or {}) for c, per in table.items() for k, s in per.items()]
    base = {"id": "r1", "status": "running", "config": config or {}, "metric_calls": 100, "cost_usd": 0.0,
            "steps_done": len(steps), "seconds": 10.0, "best_candidate_id": None, "best_val_mean": None,
            "test_mean": None, "seed_test_mean": None, "proposals_total": 0}
    raw = {"run": {**base, **(run or {})}, "examples": examples, "candidates": cands, "steps": list(steps),
           "lm_calls": list(lm), "commands": [], "scores": rows, "eval_seconds": eval_seconds}
    return RunRecords.from_raw(raw, now=T)


def step(i, parents=("seed",), metric_calls=10, seconds=2.0):
    return {"index": i, "parent_ids": list(parents), "proposal_ids": [], "accepted_ids": [],
            "metric_calls": metric_calls, "cost_usd": 0.0, "started_at": T, "ended_at": T, "seconds": seconds}


def test_a_frontier_member_alone_best_somewhere_and_never_a_parent_is_one_pin_away():
    val = {"seed": {"v0": 0.0, "v1": 0.0, "v2": 0.0}, "a": {"v0": 1.0, "v1": 0.0, "v2": 0.0},
           "b": {"v0": 0.0, "v1": 1.0, "v2": 1.0}}
    cands = [cand("seed", origin="seed", parents=(), step=0), cand("a", step=1), cand("b", step=1)]
    recs = records(cands, val, steps=[step(i, parents=("b",)) for i in range(1, 7)])
    (f,) = search_checks.neglected(recs)
    assert f.evidence["candidates"] == ["a"] and "alone best on 1 example" in f.title
    assert [(a.kind, a.payload) for a in f.actions] == [("pin", {"candidate_id": "a"})]


def test_the_budget_forecast_says_which_budget_binds_and_offers_more():
    cands = [cand("seed", origin="seed", parents=(), step=0)]
    recs = records(cands, {"seed": {"v0": 0.5}}, config={"budget": {"max_metric_calls": 160, "max_seconds": 3600}},
                   steps=[step(i, metric_calls=10, seconds=2.0) for i in range(1, 6)])
    (f,) = pace.forecast(recs)
    assert f.title.startswith("The metric calls budget runs out first, in 12 s of running")  # (160 - 100) / 5 per s
    assert f.evidence["eta_seconds"]["seconds"] == 3590.0
    assert f.actions[0].kind == "budget" and f.actions[0].payload == {"max_metric_calls": 240}
    assert pace.forecast(records(cands, {"seed": {"v0": 0.5}}, run={"status": "completed"},
                                 steps=[step(1)])) == []


def test_minibatches_a_perfect_parent_aced_carry_no_signal():
    cands = [cand("seed", origin="seed", parents=(), step=0)] + [
        cand(f"c{i}", status="rejected", mb=2.0, parent_mb=3.0, keys=("t0", "t1", "t2")) for i in range(5)]
    recs = records(cands, {"seed": {"v0": 1.0}}, train=("t0", "t1", "t2", "t3"), train_scores={"seed": {"t0": 1.0}})
    (f,) = search_checks.no_signal_minibatches(recs)
    assert f.severity == "warning" and f.title.startswith("5 of 5 (100%) children")
    assert f.actions[0].payload["settings"]["search.skip_perfect_score"] is True


def test_proposals_that_fail_before_any_test_are_counted_by_reason():
    reasons = ["unusable answer: the answer has no fenced code block"] * 5 + ["invalid candidate (validate): bad"] * 3
    cands = [cand("seed", origin="seed", parents=(), step=0)] + [
        cand(f"c{i}", status="failed", reason=r) for i, r in enumerate(reasons)] + [cand("ok", status="rejected")]
    recs = records(cands, {"seed": {"v0": 0.5}}, run={"proposals_total": 9, "proposals_parsed": 4})
    (f,) = search_checks.proposal_findings(recs)
    assert f.kind == "wasted_proposals" and f.severity == "severe"
    assert f.evidence["reasons"] == {"unusable answer: the answer has no fenced code block": 5,
                                     "invalid candidate (validate): bad": 3}


def test_validation_examples_every_candidate_passes():
    val = {c: {"v0": 1.0, "v1": 1.0, "v2": s} for c, s in (("seed", 0.0), ("a", 0.5), ("b", 1.0))}
    (f,) = evaluator_checks.evaluator_signal(records([], val))
    assert f.kind == "saturated_examples" and f.evidence["examples"] == ["v0", "v1"]


def test_the_training_validation_gap_growing_is_overfitting():
    val = {f"c{i}": {"v0": 0.9 - 0.1 * i, "v1": 0.9 - 0.1 * i} for i in range(6)}
    cands = [cand(f"c{i}", step=i, val_mean=0.9 - 0.1 * i, val_count=2) for i in range(6)]
    recs = records(cands, val, train=("t0", "t1"), train_scores={f"c{i}": {"t0": 0.9, "t1": 0.9} for i in range(6)})
    (f,) = evaluator_checks.overfitting(recs)
    assert "training–validation gap grows" in f.title


def test_no_finding_is_made_of_an_empty_run():
    assert analyze_records(records([], {})) == []
