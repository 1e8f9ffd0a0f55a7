"""The held-out audit: the seed and the final best on the test set for every run that ends with a
best (completed, stopped by a person, stopped by a budget), an LM-judged test set scored even
after the dollar budget stopped the search, and the test pass's cost kept apart."""

from __future__ import annotations

import re

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.cli import main as cli_main
from engine.commands import send_command
from engine.held_out_pass import audit_line
from tests.support.scripted_lm import uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import assert_consistent_totals, evaluations, lm_calls, run_toy, toy_config

JUDGED = '''
from refract_evaluator import lm

def evaluate(candidate, example):
    verdict = lm(f"judge: is {example['word']} among [{candidate}]?")
    return (1.0 if verdict.strip() == "yes" else 0.0), {"expected": example["word"], "judge": verdict}
'''
TRAIN = [{"id": f"tr{i}", "word": w} for i, w in enumerate(toy.WORDS[:4])]
TEST = [{"id": "te0", "word": toy.WORDS[0]}, {"id": "te1", "word": toy.WORDS[1]}, {"id": "te2", "word": "zulu"}]


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _judge_or_reflect(messages, params):
    text = messages[-1]["content"]
    m = re.match(r"judge: is (\w+) among \[(.*)\]\?", text)
    if m:
        return "yes" if m.group(1) in m.group(2).split() else "no"
    return toy.script(messages, params)


def _test_rows(db, run_id):
    return [(ev, key) for ev, key, split in evaluations(db, run_id) if split == "test"]


def test_after_a_dollar_stop_the_lm_judged_test_set_is_still_scored(sqlite_db, tmp_path, capsys):
    cfg = toy_config(evaluator=JUDGED, dataset=TRAIN, testset=TEST, search={"parents_per_step": 1},
                     budget={"max_cost_usd": 0.02, "stop_at_score": None, "max_metric_calls": 1000})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=_judge_or_reflect, price=1e-5)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.status_reason.startswith("cost budget spent")
    assert run.best_val_mean > 0
    rows = _test_rows(sqlite_db, run_id)
    assert len(rows) == 6 and not any(ev.error for ev, _ in rows)  # no lm() refused
    assert run.test_mean > 0 and run.seed_test_mean == 0.0
    test_calls = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "test"]
    assert test_calls and run.test_cost_usd == pytest.approx(sum(c.cost_usd for c in test_calls)) and run.test_cost_usd > 0
    assert_consistent_totals(sqlite_db, run_id)
    line = audit_line(run)
    # the CLI's status shows the same line
    assert cli_main(["status", run_id, "--db", sqlite_db.url]) == 0
    assert line + " (the search never saw the test set)" in capsys.readouterr().out
    assert line.startswith(f"held-out test: seed 0.0000 → best {run.test_mean:.4f}; validation {run.best_val_mean:.4f}, "
                           f"validation–test gap {run.best_val_mean - run.test_mean:+.4f}")


def test_a_run_stopped_by_a_person_gets_its_test_pass(sqlite_db, tmp_path):
    cfg = toy_config(dataset=TRAIN, testset=TEST, budget={"stop_at_score": None})
    stop_sent = []

    def stop_after_first_step(ctx):
        if not stop_sent:
            stop_sent.append(send_command(sqlite_db, ctx.run_id, "stop", author="tester", reason="enough"))

    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, on_step=stop_after_first_step)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "stopped" and run.steps_done == 1
    assert run.test_mean is not None and run.seed_test_mean == 0.0
    assert {ev.candidate_id for ev, _ in _test_rows(sqlite_db, run_id)} >= {run.best_candidate_id}
    assert run.metric_calls == sum(1 for ev, _, split in evaluations(sqlite_db, run_id) if split != "test" and not ev.cached)


def test_a_metric_call_budget_stop_gets_its_test_pass_uncharged(sqlite_db, tmp_path):
    cfg = toy_config(dataset=TRAIN, testset=TEST, budget={"stop_at_score": None, "max_metric_calls": 20})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=toy.endless)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status_reason.startswith("metric-call budget spent") and run.metric_calls <= 20
    assert run.test_mean is not None and run.seed_test_mean is not None and len(_test_rows(sqlite_db, run_id)) >= 3
