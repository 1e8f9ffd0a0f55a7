"""The Python API: ``optimize_anything`` with an evaluator in this process, steered from the CLI,
interrupted with Ctrl-C and resumed. Real databases, the real engine, the scripted LM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

import engine  # noqa: F401  first: offline price map, and refract_evaluator importable
import refract_evaluator as oa
from engine import optimize_anything
from engine.config import ConfigError
from tests.support.scripted_lm import install_script, uninstall_script
from storage import attached, leases, repo
from storage.models import utcnow
from storage.queries import _run_dict
from tests.support import toy
from tests.support.api_evaluators import words
from tests.support.harness import PYTHON, ROOT, assert_consistent_totals, evaluations, subprocess_env

SCRIPTED = {"reflection_lm": {"model": "scripted/toy", "num_retries": 0}}


@pytest.fixture(autouse=True)
def _isolated():
    yield  # the LM cache is each test's own already (conftest's _own_data_folder)
    uninstall_script()


def _config(**over) -> dict:
    cfg = {**SCRIPTED, "budget": {"max_metric_calls": 300, "stop_at_score": 1.0}, "executor": {"workers": 3}}
    cfg.update(over)
    return cfg


def _wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _cli(tmp_path, url: str, *args: str) -> str:
    out = subprocess.run([PYTHON, "-m", "engine", *args, "--db", url], cwd=ROOT, env=subprocess_env(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


# ---------------------------------------------------------------- an evaluator closing over local objects


@dataclass(frozen=True)
class Question:  # not JSON: the evaluator must get this object, not its stored form ({"word": …})
    word: str


class Grader:
    """Something no sandboxed evaluator could reach: an object living in the test's process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.threads: set[str] = set()

    def grade(self, candidate: str, question: Question) -> float:
        with self.lock:
            self.calls += 1
            self.threads.add(threading.current_thread().name)
        return 1.0 if question.word in candidate.split() else 0.0


def test_an_in_process_evaluator_closing_over_a_local_object(db):
    install_script(toy.script, price_per_token=1e-6)
    grader = Grader()
    questions = [Question(row["word"]) for row in toy.dataset(6)]

    def evaluate(candidate, example):
        assert isinstance(example, Question), type(example)
        score = grader.grade(candidate, example)
        oa.log("graded", example.word)
        print("stdout for", example.word)
        return score, {"expected": example.word}

    result = optimize_anything("start", evaluator=evaluate, dataset=questions, objective="list the words",
                               config=_config(), db=db.url, name="closure", progress=False)

    run = repo.get_run(db, result.run_id)
    assert (result.status, run.status) == ("completed", "completed")
    assert result.best_score == 1.0 and set(toy.WORDS[:6]) <= set(result.best_candidate.split())
    # every metric call ran here, in the grader's threads (several of them: the pool is parallel)
    assert grader.calls == run.metric_calls == result.total_metric_calls
    assert len(grader.threads) > 1 and all(t.startswith("refract-eval") for t in grader.threads)
    assert_consistent_totals(db, result.run_id)
    # the studio's view: examples stored as their fields, each evaluation with its own log and stdout
    assert [e.payload for e in repo.get_examples(db, result.run_id)] == [{"word": q.word} for q in questions]
    for ev, key, _ in evaluations(db, result.run_id):
        word = ev.side_info["expected"]
        assert ev.side_info["log"] == f"graded {word}\n" and ev.side_info["stdout"] == f"stdout for {word}\n"
    # GEPA's names, aligned with each other
    assert result.candidates[result.best_idx] == {"current_candidate": result.best_candidate}  # GEPA's dict form
    assert result.parents[0] == [None] and all(p is not None for ps in result.parents[1:] for p in ps)
    assert result.val_aggregate_scores == [c.val_mean for c in repo.list_candidates(db, result.run_id, ["accepted"])]
    assert result.cost_usd == pytest.approx(run.cost_usd) and result.cost_usd > 0
    assert result.run_id in result.url and set(result.frontier) == {f"train-{i}" for i in range(6)}
    assert all(f["best_score"] == 1.0 and result.best_idx in f["candidates"] for f in result.frontier.values())
    assert run.attached_to.startswith("python:") and run.lease_owner is None  # released at the end


def test_log_capture_is_per_evaluation_across_threads(sqlite_db):
    install_script(toy.script)

    def evaluate(candidate, example):
        for _ in range(20):  # interleave with the other threads' writes
            oa.log(example["word"])
            print(example["word"])
            sys.stderr.write(example["word"] + "!")
            time.sleep(0.001)
        return float(example["word"] in candidate.split())

    result = optimize_anything("start", evaluator=evaluate, dataset=toy.dataset(8), db=sqlite_db.url,
                               config=_config(executor={"workers": 4}, budget={"max_steps": 1}), progress=False)
    evs = evaluations(sqlite_db, result.run_id)
    assert len(evs) > 8
    for ev, key, _ in evs:
        word = dict((r["id"], r["word"]) for r in toy.dataset(8))[key]
        assert ev.side_info["log"] == f"{word}\n" * 20 and ev.side_info["stdout"] == f"{word}\n" * 20
        assert ev.side_info["stderr"] == f"{word}!" * 20


def test_a_process_pool_runs_a_function_that_pickles(sqlite_db):
    install_script(toy.script)
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(4), db=sqlite_db.url, pool="process",
                               config=_config(executor={"workers": 2}), progress=False)
    assert result.status == "completed" and result.best_score == 1.0
    evs = evaluations(sqlite_db, result.run_id)
    pids = {ev.side_info["log"].split()[-1] for ev, _, _ in evs}
    assert str(os.getpid()) not in pids and len(pids) >= 1  # evaluated in other processes
    assert all(ev.side_info["stdout"] == f"checked {ev.side_info['expected']}\n" for ev, _, _ in evs)


def test_bad_arguments_name_the_argument(sqlite_db):
    with pytest.raises(ConfigError, match="^evaluator: must be a function"):
        optimize_anything("x", evaluator="evaluate.py", db=sqlite_db.url)
    with pytest.raises(ConfigError, match="^pool: 'fork' is not one of"):
        optimize_anything("x", evaluator=words, pool="fork", db=sqlite_db.url)
    with pytest.raises(ConfigError, match="^evaluator: cannot be sent to a process pool"):
        optimize_anything("x", evaluator=lambda c: 1.0, pool="process", db=sqlite_db.url)
    with pytest.raises(ConfigError, match="^config: must be a dict, a RunConfig or a GEPAConfig, not str"):
        optimize_anything("x", evaluator=words, config="search.toml", db=sqlite_db.url)
    with pytest.raises(ConfigError, match="^config.dataset: also given as the argument"):
        optimize_anything("x", evaluator=words, dataset=[{"word": "a"}], config={"dataset": [{"word": "b"}]},
                          db=sqlite_db.url)
    with pytest.raises(ConfigError, match="search.parents_per_step"):
        optimize_anything("x", evaluator=words, config={"search": {"parents_per_step": 0}}, db=sqlite_db.url)
    with pytest.raises(ConfigError, match=r"^stop_callbacks\[1\]: must be callable \(state\) -> bool, not int"):
        optimize_anything("x", evaluator=words, stop_callbacks=[lambda s: False, 3], db=sqlite_db.url)
    assert repo.list_runs(sqlite_db) == []  # nothing was created


# ---------------------------------------------------------------- no worker takes it; the studio says why


def test_no_engine_worker_claims_a_run_started_from_python(db):
    run_id = attached.create_attached_run(db, "py", "", {"budget": {}}, [("task", "val", None)], "python:h:1:a", 0.01)
    repo.transition_run(db, run_id, "paused", "paused by ana")
    repo.set_run_fields(db, run_id, lease_expires_at=utcnow() - timedelta(seconds=5))
    repo.add_command(db, run_id, "resume", {}, "ana")
    assert leases.claim_run(db, "worker-1", 15) is None  # a plain run in the same state would be claimed
    note = attached.waiting_note(_run_dict(repo.get_run(db, run_id)))
    assert note.startswith("Waiting for its Python process") and f'resume="{run_id}"' in note
    assert attached.attach_run(db, run_id, "python:h:2:b", 15)
    assert attached.waiting_note(_run_dict(repo.get_run(db, run_id))) is None  # its process is back
    assert not attached.attach_run(db, run_id, "python:h:3:c", 15)  # held: a second process cannot take it
    repo.transition_run(db, run_id, "completed", "budget spent", lease_owner=None, lease_expires_at=None)
    assert attached.waiting_note({**_run_dict(repo.get_run(db, run_id)), "commands_pending": 0}) is None
    assert attached.waiting_note({**_run_dict(repo.get_run(db, run_id)), "commands_pending": 1}) is not None


# ---------------------------------------------------------------- steering from the CLI while the call waits


def test_pin_and_pause_from_the_cli_apply_while_the_python_call_waits(sqlite_db, tmp_path):
    install_script(toy.endless, latency=0.05)
    url = sqlite_db.url
    result: dict = {}

    def evaluate(candidate, example):
        time.sleep(0.02)
        return float(example["word"] in candidate.split()), {"expected": example["word"]}

    call = threading.Thread(target=lambda: result.update(r=optimize_anything(
        "start", evaluator=evaluate, dataset=toy.dataset(6), db=url, progress=False,
        config=_config(budget={"max_metric_calls": 2000, "stop_at_score": None},
                       search={"parents_per_step": 1, "proposals_per_parent": 2}))))
    call.start()
    run_id = _wait_for(lambda: repo.list_runs(sqlite_db) and repo.list_runs(sqlite_db)[0].id, what="the run")
    _wait_for(lambda: repo.get_run(sqlite_db, run_id).steps_done >= 1, what="a first step")
    seed = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed")
    said = _cli(tmp_path, url, "pin", run_id, seed.id)
    assert "applied at the next step boundary by the Python process that runs it" in said
    _cli(tmp_path, url, "pause", run_id)
    _wait_for(lambda: repo.get_run(sqlite_db, run_id).status == "paused", what="the pause")
    assert repo.get_candidate(sqlite_db, seed.id).pinned
    assert [c.status for c in repo.list_commands(sqlite_db, run_id)] == ["applied", "applied"]
    steps = repo.get_run(sqlite_db, run_id).steps_done
    time.sleep(1.0)
    run = repo.get_run(sqlite_db, run_id)
    assert call.is_alive() and run.steps_done == steps  # paused: the call waits, no step runs
    assert run.lease_owner == run.attached_to and run.lease_owner.startswith("python:")  # never a worker's
    _cli(tmp_path, url, "resume", run_id)
    _wait_for(lambda: repo.get_run(sqlite_db, run_id).steps_done > steps, what="steps after the resume")
    _cli(tmp_path, url, "stop", run_id)
    call.join(60)
    assert not call.is_alive() and result["r"].status == "stopped"
    assert [c.kind for c in repo.list_commands(sqlite_db, run_id)] == ["pin", "pause", "resume", "stop"]
    assert all(c.status == "applied" for c in repo.list_commands(sqlite_db, run_id))
    assert_consistent_totals(sqlite_db, run_id)


# ---------------------------------------------------------------- Ctrl-C, then resume


def test_ctrl_c_leaves_the_run_paused_and_resume_continues_it(sqlite_db, tmp_path):
    url = sqlite_db.url
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LM="tests.support.toy:endless", REFRACT_TEST_EVAL_SLEEP="0.02")
    proc = subprocess.Popen([PYTHON, "-m", "tests.support.api_script", url], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait_for(lambda: repo.list_runs(sqlite_db) and repo.list_runs(sqlite_db)[0].id, what="the run")
        _wait_for(lambda: repo.get_run(sqlite_db, run_id).steps_done >= 2, what="two steps")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err
    assert f'resume="{run_id}"' in err  # it says how to continue
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "paused" and "Ctrl-C" in run.status_reason, (run.status, run.status_reason, err[-3000:])
    assert run.lease_owner is None and run.attached_to  # released, still attached: the studio says it waits
    assert attached.waiting_note(_run_dict(run)) is not None
    assert leases.claim_run(sqlite_db, "worker-1", 15) is None
    assert "Waiting for its Python process" in _cli(tmp_path, url, "feedback", run_id, run.best_candidate_id, "shorter")
    before = {(ev.candidate_id, ev.example_pk) for ev, _, _ in evaluations(sqlite_db, run_id)}
    steps_before = run.steps_done

    install_script(toy.endless)
    result = optimize_anything(evaluator=words, resume=run_id, db=url, progress=False)

    run = repo.get_run(sqlite_db, run_id)
    assert result.status == run.status == "completed" and "budget spent" in run.status_reason
    assert run.steps_done > steps_before and run.metric_calls >= 90
    assert_consistent_totals(sqlite_db, run_id)  # nothing evaluated twice across the interruption
    assert before <= {(ev.candidate_id, ev.example_pk) for ev, _, _ in evaluations(sqlite_db, run_id)}
    resume = repo.list_commands(sqlite_db, run_id)[-1]
    assert (resume.kind, resume.status, resume.author) == ("resume", "applied", "python")
    # a finished run has nothing to continue: resuming it returns its result as it is
    again = optimize_anything(evaluator=words, resume=run_id, db=url, progress=False)
    assert again.total_metric_calls == result.total_metric_calls and again.candidates == result.candidates


def test_a_second_ctrl_c_cuts_the_step_in_flight(sqlite_db, tmp_path):
    """The first Ctrl-C waits for the step in flight; a reflection that takes a minute (a local
    model) is cut by a second one, recorded as interrupted, and the run is left paused."""
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LM="tests.support.toy:endless", REFRACT_SCRIPTED_LATENCY="60")
    proc = subprocess.Popen([PYTHON, "-m", "tests.support.api_script", sqlite_db.url], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = _wait_for(lambda: repo.list_runs(sqlite_db) and repo.list_runs(sqlite_db)[0].id, what="the run")
        _wait_for(lambda: [c for c in repo.lm_calls_for(sqlite_db, run_id) if c.status == "started"],
                  what="a reflection in flight")
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert proc.poll() is None  # the first one waits for the step
        pressed = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        left = time.monotonic() - pressed
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in err and "Cutting the step in flight" in err and left < 15, (left, err[-2000:])
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "paused" and run.lease_owner is None
    calls = repo.lm_calls_for(sqlite_db, run_id)
    assert calls and {c.status for c in calls} == {"interrupted"}
    assert all("Ctrl-C twice" in c.error for c in calls)


class _StepInFlight:
    """An optimizer whose step is in flight when Ctrl-C comes: once the caller polls its
    progress, it presses Ctrl-C itself, then ends its step half a second after the stop is
    asked. It is its own progress bar."""

    def __init__(self) -> None:
        self.stop_event, self.polled = threading.Event(), threading.Event()
        self.ended = False

    def update(self, **_) -> None:
        self.polled.set()

    def write(self, _text: str) -> None:
        pass

    def run(self) -> str:
        self.polled.wait(30)
        os.kill(os.getpid(), signal.SIGINT)
        self.stop_event.wait(30)
        time.sleep(0.5)
        self.ended = True
        return "lost"


def test_ctrl_c_pauses_the_run_only_after_the_step_in_flight_ends(sqlite_db):
    # A Thread.join cut by Ctrl-C marks the thread stopped while it still runs (CPython 3.11):
    # waiting that way paused and released the run under a still-running optimizer.
    from engine.api.optimize import _Session

    run_id = repo.create_run(sqlite_db, "ctrl-c", "", {}, [("task", "val", None)])
    assert leases.claim_run(sqlite_db, "p1", 15, run_id=run_id) is not None
    session = _Session(sqlite_db, run_id, "p1", fn=None, validate=None, pool="thread", rows=[])
    opt = _StepInFlight()
    with pytest.raises(KeyboardInterrupt):
        session._wait(opt, opt)
    assert opt.ended  # the step ended before the run was paused
    assert repo.get_run(sqlite_db, run_id).status == "paused"


def test_resume_refuses_a_run_not_started_from_python(sqlite_db):
    run_id = repo.create_run(sqlite_db, "toml run", "", {}, [("task", "val", None)])
    with pytest.raises(ConfigError, match=f"^resume: run {run_id} was not started from Python"):
        optimize_anything(evaluator=words, resume=run_id, db=sqlite_db.url)


def test_the_result_is_json_friendly(sqlite_db):
    install_script(toy.script)
    result = optimize_anything({"words": "start", "note": "n"}, evaluator=lambda c, e: float(e["word"] in c["words"].split()),
                               dataset=toy.dataset(3), db=sqlite_db.url, config=_config(budget={"max_steps": 2}), progress=False)
    assert isinstance(result.best_candidate, dict) and set(result.best_candidate) == {"words", "note"}
    assert json.loads(json.dumps(result.to_dict()))["best_idx"] == result.best_idx  # plain data throughout


def test_the_example_script_runs(tmp_path):
    url = f"sqlite:///{tmp_path / 'example.db'}"
    env = subprocess_env(tmp_path, REFRACT_SCRIPTED_LM="tests.support.api_evaluators:triage_script")
    out = subprocess.run([PYTHON, "examples/python_api.py", "scripted/triage", "--db", url], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "completed: best 1.00 with 'is down, outage, security, error 500'" in out.stdout
    assert "the triage object saw" in out.stdout and "watch and steer it in the studio" in out.stderr


def test_the_evaluator_calls_the_task_lm_through_the_engine(sqlite_db):
    def answers(messages, params):
        if len(messages) == 1:  # the evaluator's oa.lm(prompt): one user message
            return "yes" if "alpha" in messages[0]["content"] else "no"
        return toy.script(messages, params)

    install_script(answers, price_per_token=1e-6)

    def evaluate(candidate, example):
        verdict = oa.lm(f"Does {candidate!r} contain {example['word']}?")
        return float(example["word"] in candidate.split()), {"judge": verdict}

    result = optimize_anything("start", evaluator=evaluate, dataset=toy.dataset(3), db=sqlite_db.url,
                               config=_config(budget={"max_steps": 1}), progress=False)
    evs = evaluations(sqlite_db, result.run_id)
    assert evs and all(ev.side_info["judge"] in ("yes", "no") and ev.cost_usd > 0 for ev, _, _ in evs if not ev.cached)
    from tests.support.harness import lm_calls

    task_calls = [c for c in lm_calls(sqlite_db, result.run_id) if c.purpose == "task"]
    assert len(task_calls) == sum(1 for ev, _, _ in evs if not ev.cached)
    assert_consistent_totals(sqlite_db, result.run_id)  # their cost is in the run's total


def test_the_call_returns_when_the_engine_pauses_the_run(sqlite_db):
    def broken(messages, params):
        raise RuntimeError("the provider is down")

    install_script(broken)
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(3), db=sqlite_db.url,
                               config=_config(), progress=False)
    assert result.status == "paused" and "the reflection LM failed" in result.status_reason
    assert result.candidates == [{"current_candidate": "start"}] and result.best_idx == 0


def test_validate_refuses_a_proposal_before_any_metric_call(sqlite_db):
    install_script(toy.script)
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(4), db=sqlite_db.url,
                               validate=lambda c: "no bravo here" if "bravo" in c.split() else None,
                               config=_config(budget={"max_steps": 3}), progress=False)
    refused = [c for c in repo.list_candidates(sqlite_db, result.run_id) if "no bravo here" in c.reason]
    assert refused and all(c.status == "failed" for c in refused)
    assert not repo.evaluations_for(sqlite_db, result.run_id, [c.id for c in refused])
    assert all("bravo" not in c["current_candidate"].split() for c in result.candidates)


def test_opt_state_in_python_holds_the_best_evaluations_so_far(sqlite_db):
    install_script(toy.script)
    seen = []

    def evaluate(candidate, example, opt_state):
        seen.append([e["score"] for e in opt_state.best_example_evals])
        return float(example["word"] in candidate.split())

    optimize_anything("start", evaluator=evaluate, dataset=toy.dataset(3), db=sqlite_db.url,
                      config=_config(executor={"workers": 1}, budget={"max_steps": 3, "stop_at_score": None}),
                      progress=False)
    assert seen[0] == [] and all(s == sorted(s, reverse=True) for s in seen)
    assert any(1.0 in s for s in seen)  # a later evaluation sees an earlier success on its example


# ---------------------------------------------------------------- stop_callbacks, GEPA's stoppers unchanged


def test_gepas_own_stoppers_end_a_run_as_they_end_a_gepa_run(sqlite_db):
    from gepa.utils import MaxMetricCallsStopper, ScoreThresholdStopper

    install_script(toy.script)
    budget = {"budget": {"max_metric_calls": 400, "stop_at_score": None}}
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(8), db=sqlite_db.url, progress=False,
                               config=_config(**budget), stop_callbacks=ScoreThresholdStopper(0.5))
    assert (result.status, result.status_reason) == ("completed", "stop_callbacks[0] (ScoreThresholdStopper) returned True")
    assert 0.5 <= result.best_score < 1.0 and result.total_metric_calls < 400  # it stopped as soon as 0.5 was reached
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(8), db=sqlite_db.url, progress=False,
                               config=_config(**budget), stop_callbacks=[ScoreThresholdStopper(2.0),
                                                                        MaxMetricCallsStopper(60)])
    assert result.status_reason == "stop_callbacks[1] (MaxMetricCallsStopper) returned True"
    assert 60 <= result.total_metric_calls < 100  # checked before each step: the step that crossed 60 finished


def test_gepas_file_timeout_proposal_and_no_improvement_stoppers_work_unchanged(sqlite_db, tmp_path):
    from gepa.utils import FileStopper, MaxCandidateProposalsStopper, NoImprovementStopper, TimeoutStopCondition

    install_script(toy.script)
    config = _config(budget={"max_metric_calls": 400, "stop_at_score": None})
    flag = tmp_path / "gepa.stop"

    def touch_at_step_2(state):  # what a person does from a shell, by the step's clock
        if state.steps == 2:
            flag.touch()
        return False

    def run(stoppers):
        return optimize_anything("start", evaluator=words, dataset=toy.dataset(6), db=sqlite_db.url, progress=False,
                                 config=config, stop_callbacks=stoppers)

    result = run([touch_at_step_2, FileStopper(str(flag))])
    assert result.status_reason == "stop_callbacks[1] (FileStopper) returned True"
    assert repo.get_run(sqlite_db, result.run_id).steps_done == 2
    result = run(TimeoutStopCondition(0.0))  # already out of time: the seed alone, validated
    assert result.status_reason == "stop_callbacks[0] (TimeoutStopCondition) returned True"
    assert result.candidates == [{"current_candidate": "start"}] and repo.get_run(sqlite_db, result.run_id).steps_done == 0
    result = run(MaxCandidateProposalsStopper(5))  # GEPA's i: the proposals made, minus one
    assert result.status_reason == "stop_callbacks[0] (MaxCandidateProposalsStopper) returned True"
    assert 5 <= repo.get_run(sqlite_db, result.run_id).proposals_total < 5 + 4  # the step (2×2) that crossed 5 finished
    result = run(NoImprovementStopper(2))
    run_row = repo.get_run(sqlite_db, result.run_id)
    assert result.status_reason == "stop_callbacks[0] (NoImprovementStopper) returned True"
    assert result.best_score == 1.0 and run_row.metric_calls < 400  # solved, then two steps without a gain


def test_a_stop_callback_sees_the_run_as_it_stands_and_one_that_raises_ends_the_run_with_its_error(sqlite_db):
    install_script(toy.script)
    seen = []

    def watch(state):
        seen.append((state.i, state.total_num_evals, list(state.program_full_scores_val_set), state.steps,
                     state.best_score, list(state.program_candidates)))
        return state.steps >= 3

    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(6), db=sqlite_db.url, progress=False,
                               config=_config(budget={"max_metric_calls": 400, "stop_at_score": None}),
                               stop_callbacks=watch)
    assert result.status_reason.endswith("(test_a_stop_callback_sees_the_run_as_it_stands_and_one_that_raises_ends_"
                                         "the_run_with_its_error.<locals>.watch) returned True")
    assert [s[3] for s in seen] == [0, 1, 2, 3]  # before every step, and once more when the third was done
    first = seen[0]
    assert first[0] == -1 and first[5] == ["start"] and first[4] == first[2][0]  # the seed, validated, no proposal yet
    last = seen[-1]
    run = repo.get_run(sqlite_db, result.run_id)
    assert last[0] == run.proposals_total - 1 and last[1] == run.metric_calls
    assert last[2] == result.val_aggregate_scores and last[4] == result.best_score == max(last[2])

    def broken(state):
        if state.steps == 1:
            raise ValueError("my stopper is wrong")
        return False

    with pytest.raises(ValueError, match="my stopper is wrong"):
        optimize_anything("start", evaluator=words, dataset=toy.dataset(6), db=sqlite_db.url, progress=False,
                          config=_config(), stop_callbacks=broken, name="broken stopper")
    run = next(r for r in repo.list_runs(sqlite_db) if r.name == "broken stopper")
    assert run.status == "completed" and not run.lease_owner  # settled and released before the error was raised
    assert run.status_reason.startswith("stop_callbacks[0] (") and run.status_reason.endswith(
        "broken) raised ValueError: my stopper is wrong")


# ---------------------------------------------------------------- a Python callable as the reflection LM


def test_a_python_callable_is_the_reflection_lm_as_in_gepa(sqlite_db):
    """GEPA's reflection_lm may be a function prompt -> answer: here too, called through the
    engine's LM client (recorded, cached), with the reflection prompt as one string."""
    prompts = []

    def reflect(prompt: str) -> str:
        prompts.append(prompt)
        current = toy.current_version(prompt)
        missing = [w for w in toy.missing_words(prompt) if w not in current.split()]
        return f"Adding {missing[0]}.\n```\n{current} {missing[0]}\n```" if missing else "```\n" + current + "\n```"

    config = {"budget": {"max_metric_calls": 300, "stop_at_score": 1.0}, "executor": {"workers": 3}}
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(6), db=sqlite_db.url, progress=False,
                               config=config, reflection_lm=reflect)
    assert result.best_score == 1.0 and set(toy.WORDS[:6]) <= set(result.best_candidate.split())
    run = repo.get_run(sqlite_db, result.run_id)
    model = run.config["reflection_lm"]["model"]
    assert re.fullmatch(r"python/reflect-[0-9a-f]{10}", model), model
    # the reflection LM also writes the merge of two siblings that changed the same lines (the default shape)
    calls = [c for c in repo.lm_calls_for(sqlite_db, result.run_id) if c.purpose in ("reflection", "merge")]
    assert len(calls) == len(prompts) > 0 and all(c.model == model and c.tokens_in > 0 and c.cost_usd == 0 for c in calls)
    assert prompts[0].startswith("You improve") and "## Current version" in prompts[0]  # system, then user text

    with pytest.raises(ConfigError, match="^config.reflection_lm.model: also given as the argument reflection_lm="):
        optimize_anything("start", evaluator=words, db=sqlite_db.url, reflection_lm=reflect,
                          config={"reflection_lm": {"model": "openai/gpt-4.1-mini"}})
    with pytest.raises(ConfigError, match="^reflection_lm: must be a litellm model string or a callable"):
        optimize_anything("start", evaluator=words, db=sqlite_db.url, reflection_lm=42)


def test_a_run_whose_callable_reflection_lm_failed_resumes_with_it(sqlite_db):
    down = [True]

    def flaky(prompt: str) -> str:
        if down[0]:
            raise ConnectionError("my model server is down")
        current = toy.current_version(prompt)
        missing = [w for w in toy.missing_words(prompt) if w not in current.split()]
        return f"```\n{current} {missing[0] if missing else 'extra'}\n```"

    config = {"budget": {"max_metric_calls": 300, "stop_at_score": 1.0}, "reflection_lm": {"num_retries": 0}}
    first = optimize_anything("start", evaluator=words, dataset=toy.dataset(4), db=sqlite_db.url, progress=False,
                              config=config, reflection_lm=flaky)
    assert first.status == "paused" and "my model server is down" in first.status_reason  # the engine paused it
    down[0] = False
    result = optimize_anything(evaluator=words, resume=first.run_id, db=sqlite_db.url, progress=False,
                               reflection_lm=flaky)
    assert (result.status, result.best_score) == ("completed", 1.0)


def test_with_the_async_schedule_stop_callbacks_are_asked_before_every_proposal(sqlite_db):
    install_script(toy.endless)
    calls = []

    def six_proposals(state):
        calls.append(state.i)
        return state.i >= 5

    config = _config(search={"schedule": "async", "parents_per_step": 2, "proposals_per_parent": 1},
                     budget={"max_metric_calls": 400, "stop_at_score": None})
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(8), db=sqlite_db.url, progress=False,
                               config=config, stop_callbacks=six_proposals)
    run = repo.get_run(sqlite_db, result.run_id)
    assert result.status_reason == "stop_callbacks[0] (test_with_the_async_schedule_stop_callbacks_are_asked_before_" \
                                   "every_proposal.<locals>.six_proposals) returned True"
    assert 6 <= run.proposals_total <= 6 + 2  # the two in flight when it said stop finish
    assert len(calls) > run.steps_done + 1  # asked more often than once a step (C = 2 proposals per step)


def test_branch_from_a_run_started_from_python_pays_no_evaluation_twice(sqlite_db):
    from tests.support.harness import paid_twice

    install_script(toy.script)
    rows = toy.dataset(6)
    base = optimize_anything("start", evaluator=words, dataset=rows, db=sqlite_db.url, progress=False,
                             config=_config(budget={"max_steps": 1, "stop_at_score": None}))
    best = repo.get_run(sqlite_db, base.run_id).best_candidate_id
    result = optimize_anything(evaluator=words, dataset=rows, db=sqlite_db.url, progress=False,
                               branch_from=(base.run_id, best),
                               config={"budget": {"max_steps": 6, "stop_at_score": 1.0}, "search.parents_per_step": 1})
    run = repo.get_run(sqlite_db, result.run_id)
    assert run.branch_of == base.run_id and run.config["search"]["parents_per_step"] == 1
    assert result.status == "completed" and result.best_score == 1.0
    assert paid_twice(sqlite_db, base.run_id, result.run_id) == 0
    assert any(ev.reused_from == base.run_id for ev, _, _ in evaluations(sqlite_db, result.run_id))
    with pytest.raises(ConfigError, match=r"^branch_from: give \(run_id, candidate_id\)"):
        optimize_anything(evaluator=words, db=sqlite_db.url, branch_from=(1, 2))
    with pytest.raises(ConfigError, match=r"^seed_candidate: give a seed or branch_from, not both"):
        optimize_anything("x", evaluator=words, db=sqlite_db.url, branch_from=base.run_id)
    with pytest.raises(ConfigError, match=r"^candidate: 'cnope' is not a candidate of run"):
        optimize_anything(evaluator=words, db=sqlite_db.url, branch_from=(base.run_id, "cnope"))
