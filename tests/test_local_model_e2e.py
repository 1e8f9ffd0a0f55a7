"""The proof of issue 7: the offline local model improves a built-in example end to end.

The one test that needs the real model for a whole run (marked ``local_model``): the ISO-date
regex example, shortened (one parent, two proposals per step, a small budget), with the real
sandbox and the local Qwen2.5-Coder-1.5B as reflection LM, on a fresh LM cache; stopped at the first
improvement over the seed (that is the proof; the rest of the budget would only cost minutes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.commands import send_command
from engine.config import LOCAL_MODEL, load_config
from engine.runs import submit_run
from storage import repo
from tests.support.harness import run_optimizer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "iso_date_regex" / "config.toml"


@pytest.mark.local_model
@pytest.mark.timeout(900)
def test_local_model_improves_the_iso_date_regex(sqlite_db, tmp_path):
    cfg = load_config(EXAMPLE)
    assert cfg.reflection_lm.model == LOCAL_MODEL
    cfg = cfg.model_copy(update={
        "search": cfg.search.model_copy(update={"parents_per_step": 1, "proposals_per_parent": 2}),
        "budget": cfg.budget.model_copy(update={"max_metric_calls": 120, "max_seconds": 480, "stop_at_score": 1.0}),
    })
    run_id = submit_run(sqlite_db, cfg)

    def stop_once_improved(ctx) -> None:
        # the proof needs one improvement, not the whole budget: a person's stop, applied at the
        # next step boundary like any other command (the run then ends "stopped")
        seed_mean = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed").val_mean
        best = repo.get_run(sqlite_db, run_id).best_val_mean
        if best is not None and seed_mean is not None and best > seed_mean:
            if not [c for c in repo.list_commands(sqlite_db, run_id) if c.kind == "stop"]:
                send_command(sqlite_db, run_id, "stop", {}, author="test", reason="improved once: proof enough")

    status = run_optimizer(sqlite_db, run_id, tmp_path, on_step=stop_once_improved)
    run = repo.get_run(sqlite_db, run_id)
    seed = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed")
    reflections = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    summary = [(c.status, c.reason[:60], c.content.get("text")) for c in reflections]
    assert status in ("completed", "stopped"), run.status_reason
    assert run.proposals_total > 0 and run.proposals_parsed > 0, summary
    assert run.best_val_mean > seed.val_mean, summary  # the best rose above the seed's score
