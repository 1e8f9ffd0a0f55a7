"""The evaluator's lm(): called through the engine, recorded, charged and attributed."""

from __future__ import annotations

from tests.support.scripted_lm import install_script
from storage import repo
from sqlmodel import select

from storage.models import LMCall
from tests.support.harness import run_optimizer, toy_config
from engine.runs import submit_run

TASK_EVALUATOR = '''
from refract_evaluator import lm

def evaluate(candidate, example):
    answer = lm("Say the word " + example["word"])
    return (1.0 if example["word"] in candidate.split() else 0.0), {"task_answer": answer}
'''

GREEDY_EVALUATOR = '''
from refract_evaluator import lm

def evaluate(candidate, example):
    return 1.0, {"answer": lm("hello", model="openai/gpt-4o")}
'''


def _script(messages, params):
    if params["model"].endswith("task"):
        return "the task answer"
    return "```\nstart alpha\n```"


def test_task_lm_calls_are_recorded_charged_and_attributed(sqlite_db, tmp_path):
    install_script(_script, price_per_token=1e-3)
    cfg = toy_config(n=2, evaluator=TASK_EVALUATOR, task_lm={"model": "scripted/task"},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id = submit_run(sqlite_db, cfg)
    run_optimizer(sqlite_db, run_id, tmp_path)
    with sqlite_db.read() as s:
        calls = [c for c in s.exec(select(LMCall).where(LMCall.run_id == run_id)) if c.purpose == "task"]
    assert calls and all(c.model == "scripted/task" and c.candidate_id and c.example_key for c in calls)
    evals = repo.evaluations_for(sqlite_db, run_id)
    assert all(e.side_info.get("task_answer") == "the task answer" for e in evals if not e.error)
    paid = [e for e in evals if not e.cached]
    assert sum(e.cost_usd for e in paid) > 0  # each evaluation carries the cost of its own lm() calls
    run = repo.get_run(sqlite_db, run_id)
    with sqlite_db.read() as s:
        total = sum(c.cost_usd for c in s.exec(select(LMCall).where(LMCall.run_id == run_id)))
    assert abs(run.cost_usd - total) < 1e-9  # charged once: as LM calls, not again per evaluation


def test_an_evaluator_cannot_pick_another_model(sqlite_db, tmp_path):
    install_script(_script)
    cfg = toy_config(n=2, evaluator=GREEDY_EVALUATOR, task_lm={"model": "scripted/task"},
                     budget={"max_steps": 1, "stop_at_score": None})
    run_id = submit_run(sqlite_db, cfg)
    run_optimizer(sqlite_db, run_id, tmp_path)
    evals = repo.evaluations_for(sqlite_db, run_id)
    assert evals and all(e.error and "refused" in e.error and "openai/gpt-4o" in e.error for e in evals)
    with sqlite_db.read() as s:
        assert not [c for c in s.exec(select(LMCall).where(LMCall.run_id == run_id)) if c.purpose == "task"]
