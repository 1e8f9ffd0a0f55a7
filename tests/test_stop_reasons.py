"""Stop reasons that name the real cause (issue 13, defect 7), and dataset limits on inline
data (defect 4)."""

from __future__ import annotations

from engine.lm.client import LMClient  # noqa: F401  (first: offline price map)

import pytest  # noqa: E402

from engine.config import ConfigError, parse_config  # noqa: E402
from storage import repo  # noqa: E402
from tests.support import toy  # noqa: E402
from tests.support.harness import run_toy, toy_config, toy_data  # noqa: E402


def test_a_run_whose_evaluator_fails_on_the_training_rows_stops_early_with_the_first_error(sqlite_db, tmp_path):
    # the training rows are strings, not objects: example["word"] fails on every one of them,
    # while the validation rows are fine (so the seed itself validates)
    cfg = toy_config(4, dataset=["alpha", "bravo", "charlie", "delta"], valset=toy.dataset(4),
                     budget={"max_metric_calls": 300, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg=cfg)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "failed", run.status_reason
    assert run.status_reason.startswith("the evaluator failed on ")
    assert "training evaluations of the candidates that can be parents" in run.status_reason
    assert "first error (candidate " in run.status_reason and "TypeError" in run.status_reason
    assert "reflection LM" not in run.status_reason.split("first error")[0]
    assert run.metric_calls <= 30  # stopped early, not at the 300 of its budget


def test_no_progress_says_what_happened_to_the_proposals(sqlite_db, tmp_path):
    cfg = toy_config(4, budget={"max_metric_calls": 300, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg=cfg, script=lambda messages, params: "I have no fenced block.")
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed"
    assert run.status_reason.startswith("no progress: the last 5 steps made no evaluable proposal "
                                        "(answers without a fenced block ×"), run.status_reason
    assert "keeps repeating or failing" not in run.status_reason
    assert "LM errors slowed it: " in run.status_reason and "no fenced block ×" in run.status_reason
    failed = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    assert failed and {(c.status, c.cause) for c in failed} == {("failed", "no_fence")}  # the cause counted, stored


def test_inline_datasets_have_the_row_limit_too():
    with pytest.raises(ConfigError, match=r"^dataset: 6 rows, more than limits.max_rows \(5\)"):
        parse_config(toy_data(6, limits={"max_rows": 5}))
    assert parse_config(toy_data(6, limits={"max_rows": 6})).limits.max_rows == 6
