"""Human commands, engine side: sent with ``send_command`` (the path the studio and the CLI
share), applied by the optimizer at step boundaries. Commands "during" a run are sent from
the optimizer's ``on_step`` hook, i.e. exactly at a step boundary, so the tests are
deterministic for a fixed seed.
"""

from __future__ import annotations

import threading

import pytest

from engine.commands import CommandError, send_command
from engine.records.export import export_run
from engine.runs import submit_run
from tests.support.scripted_lm import install_script, uninstall_script
from engine.worker import Worker
from storage import leases, repo
from storage.errors import NotFound
from tests.support import toy
from tests.support.harness import assert_consistent_totals, lm_client, run_optimizer, toy_config


@pytest.fixture(autouse=True)
def _scripted_lm():
    stats = install_script(toy.script)
    yield stats
    uninstall_script()


def _submit(db, n=8, **over):
    over.setdefault("budget", {"max_steps": 6, "stop_at_score": None})
    return submit_run(db, toy_config(n, **over))


def _at(step_index, fn):
    """An on_step hook that calls fn(ctx) once, at the boundary before step ``step_index``."""
    def hook(ctx):
        if ctx.step_index == step_index:
            fn(ctx)
    return hook


def _seed(db, run_id):
    return next(c for c in repo.list_candidates(db, run_id) if c.origin == "seed")


def _commands(db, run_id):
    return [(c.kind, c.status) for c in repo.list_commands(db, run_id)]


def _worker_once(db, tmp_path):
    Worker(db, lm=lm_client(tmp_path), lease_seconds=30).run_forever(threading.Event(), once=True)


# ---------------------------------------------------------------- pause, step, resume, stop


def test_pause_step_resume(sqlite_db, tmp_path):
    db = sqlite_db
    run_id = _submit(db, budget={"max_steps": 4, "stop_at_score": None})
    send_command(db, run_id, "pause", author="ana", reason="let me look first")
    assert run_optimizer(db, run_id, tmp_path) == "paused"
    run = repo.get_run(db, run_id)
    assert (run.status, run.status_reason, run.steps_done) == ("paused", "paused by ana", 0)
    assert repo.list_steps(db, run_id) == []  # no step started
    assert _commands(db, run_id) == [("pause", "applied")]

    # a paused run with nothing pending is not claimed by any worker
    assert leases.claim_run(db, "someone", 30, run_id=run_id) is None

    send_command(db, run_id, "step", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "paused"
    run = repo.get_run(db, run_id)
    assert run.steps_done == 1 and run.status_reason == "paused after one step (step mode)" and not run.step_mode
    assert len(repo.list_steps(db, run_id)) == 1

    send_command(db, run_id, "step", author="ana")
    run_optimizer(db, run_id, tmp_path)
    assert repo.get_run(db, run_id).steps_done == 2

    send_command(db, run_id, "resume", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    run = repo.get_run(db, run_id)
    assert run.steps_done == 4 and run.status_reason == "step budget spent (4 of 4)"
    assert [c.applied_step for c in repo.list_commands(db, run_id)] == [0, 0, 1, 2]
    assert_consistent_totals(db, run_id)


def test_pause_during_a_run_stops_at_the_step_boundary(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db)
    hook = _at(2, lambda ctx: send_command(ctx.db, ctx.run_id, "pause", author="bo"))
    assert run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook) == "paused"
    assert repo.get_run(sqlite_db, run_id).steps_done == 2
    send_command(sqlite_db, run_id, "resume", author="bo")
    assert run_optimizer(sqlite_db, run_id, tmp_path) == "completed"
    assert repo.get_run(sqlite_db, run_id).steps_done == 6
    assert_consistent_totals(sqlite_db, run_id)


def test_stop(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db)
    hook = _at(1, lambda ctx: send_command(ctx.db, ctx.run_id, "stop", author="bo", reason="enough"))
    assert run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook) == "stopped"
    run = repo.get_run(sqlite_db, run_id)
    assert (run.status, run.status_reason, run.steps_done) == ("stopped", "stopped by bo", 1)
    assert run.finished_at is not None
    # a stopped run takes no more steering, but says how to continue it
    seed = _seed(sqlite_db, run_id)
    with pytest.raises(CommandError, match=r"is stopped; continue it first with a new budget"):
        send_command(sqlite_db, run_id, "pin", {"candidate_id": seed.id})


# ---------------------------------------------------------------- pin and veto


def test_pinned_candidate_is_a_parent_within_pin_every_steps(sqlite_db, tmp_path):
    pin_every = 2
    run_id = _submit(sqlite_db, 10, search={"parents_per_step": 1, "proposals_per_parent": 2, "pin_every": pin_every},
                     budget={"max_steps": 8, "stop_at_score": None})
    seed_id = []

    def pin_seed(ctx):
        seed = next(c for c in ctx.state.candidates.values() if c.origin == "seed")
        seed_id.append(seed.id)
        send_command(ctx.db, ctx.run_id, "pin", {"candidate_id": seed.id}, author="ana")

    run_optimizer(sqlite_db, run_id, tmp_path, on_step=_at(2, pin_seed))
    steps = repo.list_steps(sqlite_db, run_id)
    assert len(steps) == 8
    seed = seed_id[0]
    assert repo.get_candidate(sqlite_db, seed).pinned
    # before the pin, the strategy had moved on from the (dominated) seed
    assert seed not in steps[1].parent_ids
    chosen = [s.index for s in steps if seed in s.parent_ids and s.index >= 2]
    assert chosen and chosen[0] < 2 + pin_every
    assert all(b - a <= pin_every for a, b in zip(chosen, chosen[1:]))
    assert chosen[-1] >= 8 - pin_every
    for i in chosen:
        assert steps[i].parent_reasons[seed].startswith("pinned")


def test_vetoed_candidate_is_never_a_parent_nor_the_best(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 10, budget={"max_steps": 7, "stop_at_score": None})
    vetoed = []

    def veto_best(ctx):
        best_id, _ = ctx.state.best()
        vetoed.append(best_id)
        send_command(ctx.db, ctx.run_id, "veto", {"candidate_id": best_id}, author="ana", reason="degenerate")

    run_optimizer(sqlite_db, run_id, tmp_path, on_step=_at(3, veto_best))
    victim = vetoed[0]
    steps = repo.list_steps(sqlite_db, run_id)
    for s in steps[3:]:
        assert victim not in s.parent_ids, s.index
    run = repo.get_run(sqlite_db, run_id)
    assert repo.get_candidate(sqlite_db, victim).vetoed
    assert run.best_candidate_id != victim
    doc = export_run(sqlite_db, run_id)
    assert all(victim not in f["candidate_ids"] for f in doc["frontier"])
    assert doc["best"]["candidate_id"] != victim
    assert _commands(sqlite_db, run_id) == [("veto", "applied")]


def test_vetoing_the_last_eligible_parent_is_refused(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1})
    send_command(sqlite_db, run_id, "pause")
    run_optimizer(sqlite_db, run_id, tmp_path)  # the seed is validated, then the run pauses
    seed = _seed(sqlite_db, run_id)
    with pytest.raises(CommandError, match="last candidate that can be a parent"):
        send_command(sqlite_db, run_id, "veto", {"candidate_id": seed.id})
    assert not repo.get_candidate(sqlite_db, seed.id).vetoed


def test_two_vetoes_that_together_leave_no_parent_the_second_is_rejected(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 5, "stop_at_score": None})
    hook = _at(1, lambda ctx: send_command(ctx.db, ctx.run_id, "pause"))
    run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook)
    accepted = repo.list_candidates(sqlite_db, run_id, ["accepted"])
    assert len(accepted) == 2  # the seed and one improving child
    for c in accepted:  # each is allowed when sent: the other one is still eligible
        send_command(sqlite_db, run_id, "veto", {"candidate_id": c.id}, author="ana")
    run_optimizer(sqlite_db, run_id, tmp_path)
    cmds = repo.list_commands(sqlite_db, run_id)
    assert [(c.kind, c.status) for c in cmds] == [("pause", "applied"), ("veto", "applied"), ("veto", "rejected")]
    assert "last candidate" in cmds[2].result
    assert [c.vetoed for c in repo.list_candidates(sqlite_db, run_id, ["accepted"])].count(True) == 1


def test_unpin_and_unveto(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1})
    hook = _at(1, lambda ctx: send_command(ctx.db, ctx.run_id, "pause"))
    run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook)
    seed = _seed(sqlite_db, run_id)
    for kind in ("pin", "veto", "unpin", "unveto"):
        send_command(sqlite_db, run_id, kind, {"candidate_id": seed.id})
    run_optimizer(sqlite_db, run_id, tmp_path)
    c = repo.get_candidate(sqlite_db, seed.id)
    assert not c.pinned and not c.vetoed
    assert [r.result for r in repo.list_commands(sqlite_db, run_id)][1:] == [
        f"{seed.id} pinned", f"{seed.id} vetoed", f"{seed.id} unpinned", f"{seed.id} unvetoed"]


# ---------------------------------------------------------------- edit and feedback


VALIDATING_EVALUATOR = toy.EVALUATOR + '''

def validate(candidate):
    if any(ch.isdigit() for ch in candidate):
        return "digits are not allowed"
'''


def test_edit_makes_a_validated_human_candidate(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4, evaluator=VALIDATING_EVALUATOR, budget={"max_steps": 2, "stop_at_score": None})

    def edit(ctx):
        seed = next(c for c in ctx.state.candidates.values() if c.origin == "seed")
        send_command(ctx.db, ctx.run_id, "edit", {"candidate_id": seed.id, "content": "start alpha bravo charlie"},
                     author="bo", reason="hand-tuned")
        send_command(ctx.db, ctx.run_id, "edit", {"candidate_id": seed.id, "content": "start 42"}, author="bo")

    run_optimizer(sqlite_db, run_id, tmp_path, on_step=_at(1, edit))
    seed = _seed(sqlite_db, run_id)
    humans = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "human"]
    good = next(c for c in humans if c.status == "accepted")
    assert good.content == {"text": "start alpha bravo charlie"}
    assert (good.author, good.reason, good.parent_ids) == ("bo", "hand-tuned", [seed.id])
    assert good.val_count == 4 and good.val_mean == pytest.approx(0.75)
    cmds = repo.list_commands(sqlite_db, run_id)
    assert cmds[0].status == "applied" and cmds[0].result == f"new candidate {good.id} (validation mean 0.75)"
    # the invalid edit is kept (lineage) as failed, costs no evaluation, and the command says why
    bad = next(c for c in humans if c.status == "failed")
    assert bad.content == {"text": "start 42"} and "digits are not allowed" in bad.reason
    assert cmds[1].status == "rejected" and "digits are not allowed" in cmds[1].result
    assert not [ev for ev in repo.evaluations_for(sqlite_db, run_id, [bad.id])]
    assert_consistent_totals(sqlite_db, run_id)


def test_edit_of_a_component(sqlite_db, tmp_path):
    evaluator = "def evaluate(candidate, example):\n    return float(example['word'] in candidate['a'].split())\n"
    run_id = _submit(sqlite_db, 4, seed_candidate={"a": "start", "b": "keep"}, evaluator=evaluator,
                     budget={"max_steps": 1, "stop_at_score": None})
    send_command(sqlite_db, run_id, "pause")
    run_optimizer(sqlite_db, run_id, tmp_path)
    seed = _seed(sqlite_db, run_id)
    send_command(sqlite_db, run_id, "edit", {"candidate_id": seed.id, "content": "start alpha", "component": "a"},
                 author="bo")
    send_command(sqlite_db, run_id, "edit", {"candidate_id": seed.id, "content": "x", "component": "nope"})
    run_optimizer(sqlite_db, run_id, tmp_path)
    [human] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "human"]
    assert human.content == {"a": "start alpha", "b": "keep"} and human.val_mean == 0.25
    last = repo.list_commands(sqlite_db, run_id)[-1]
    assert last.status == "rejected" and "unknown component 'nope'" in last.result


def test_feedback_appears_in_the_next_reflection_on_that_candidate(sqlite_db, tmp_path, _scripted_lm):
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 1, "stop_at_score": None})
    send_command(sqlite_db, run_id, "pause")
    run_optimizer(sqlite_db, run_id, tmp_path)
    seed = _seed(sqlite_db, run_id)
    send_command(sqlite_db, run_id, "feedback", {"candidate_id": seed.id, "text": "Prefer words from the NATO alphabet."},
                 author="ana")
    send_command(sqlite_db, run_id, "resume")
    run_optimizer(sqlite_db, run_id, tmp_path)
    from tests.support.harness import lm_calls

    [call] = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "reflection"]
    child = repo.get_candidate(sqlite_db, call.candidate_id)
    assert child.parent_ids == [seed.id]
    user = call.messages[1]["content"]
    assert "## Human feedback (from the people steering this run — follow it)\n- Prefer words from the NATO alphabet." \
        in user
    [comment] = repo.list_comments(sqlite_db, run_id, seed.id)
    assert (comment.kind, comment.author) == ("feedback", "ana")


def test_feedback_is_only_shown_for_its_own_candidate(sqlite_db, tmp_path, _scripted_lm):
    run_id = _submit(sqlite_db, 6, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})

    def feedback_on_seed(ctx):
        seed = next(c for c in ctx.state.candidates.values() if c.origin == "seed")
        send_command(ctx.db, ctx.run_id, "feedback", {"candidate_id": seed.id, "text": "SEED-ONLY NOTE"})

    run_optimizer(sqlite_db, run_id, tmp_path, on_step=_at(1, feedback_on_seed))
    seed = _seed(sqlite_db, run_id)
    from tests.support.harness import lm_calls

    for call in lm_calls(sqlite_db, run_id):
        parent = repo.get_candidate(sqlite_db, call.candidate_id).parent_ids[0]
        assert ("SEED-ONLY NOTE" in call.messages[1]["content"]) == (parent == seed.id and call.step >= 1)


# ---------------------------------------------------------------- budget


def test_budget_change_on_a_live_run(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, budget={"max_steps": 10, "stop_at_score": None})
    hook = _at(2, lambda ctx: send_command(ctx.db, ctx.run_id, "budget", {"max_steps": 3}, author="ana"))
    assert run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook) == "completed"
    run = repo.get_run(sqlite_db, run_id)
    assert run.steps_done == 3 and run.status_reason == "step budget spent (3 of 3)"
    assert run.config["budget"]["max_steps"] == 3
    assert repo.list_commands(sqlite_db, run_id)[0].result.startswith("budget now ")


def test_raising_the_budget_of_a_finished_run_and_resuming_it(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, budget={"max_steps": 2, "stop_at_score": None})
    run_optimizer(sqlite_db, run_id, tmp_path)
    assert repo.get_run(sqlite_db, run_id).status == "completed"
    before = repo.get_run(sqlite_db, run_id).metric_calls
    send_command(sqlite_db, run_id, "budget", {"max_steps": 4}, author="ana")
    send_command(sqlite_db, run_id, "resume", author="ana")
    _worker_once(sqlite_db, tmp_path)  # a worker picks the finished run up again
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed" and run.steps_done == 4 and run.metric_calls > before
    assert _commands(sqlite_db, run_id) == [("budget", "applied"), ("resume", "applied")]
    assert_consistent_totals(sqlite_db, run_id)


def test_invalid_budget_is_refused_when_sent(sqlite_db):
    run_id = _submit(sqlite_db)
    with pytest.raises(CommandError, match="^budget.max_metric_calls: must be at least 1, not -5$"):
        send_command(sqlite_db, run_id, "budget", {"max_metric_calls": -5})
    with pytest.raises(CommandError, match="^budget.max_tokens: unknown field"):
        send_command(sqlite_db, run_id, "budget", {"max_tokens": 5})


# ---------------------------------------------------------------- no worker running


def test_commands_wait_for_a_worker_and_apply_in_order_when_one_starts(sqlite_db, tmp_path, _scripted_lm):
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 2, "stop_at_score": None})
    # the run has no candidate yet: steer the run itself
    send_command(sqlite_db, run_id, "budget", {"max_steps": 1}, author="ana")
    send_command(sqlite_db, run_id, "step", author="ana")
    assert _commands(sqlite_db, run_id) == [("budget", "pending"), ("step", "pending")]
    _worker_once(sqlite_db, tmp_path)
    assert _commands(sqlite_db, run_id) == [("budget", "applied"), ("step", "applied")]
    assert all(c.applied_step == 0 and c.applied_at is not None for c in repo.list_commands(sqlite_db, run_id))
    run = repo.get_run(sqlite_db, run_id)
    assert run.steps_done == 1 and run.status in ("paused", "completed")
    [step] = repo.list_steps(sqlite_db, run_id)
    assert len(step.applied_command_ids) == 2


def test_paused_run_with_a_pending_command_is_picked_up_by_a_worker(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4, budget={"max_steps": 3, "stop_at_score": None})
    send_command(sqlite_db, run_id, "pause")
    _worker_once(sqlite_db, tmp_path)
    assert repo.get_run(sqlite_db, run_id).status == "paused"
    seed = _seed(sqlite_db, run_id)
    send_command(sqlite_db, run_id, "pin", {"candidate_id": seed.id})  # not a resume: applied, stays paused
    _worker_once(sqlite_db, tmp_path)
    assert repo.get_candidate(sqlite_db, seed.id).pinned
    assert repo.get_run(sqlite_db, run_id).status == "paused"
    send_command(sqlite_db, run_id, "resume")
    _worker_once(sqlite_db, tmp_path)
    assert repo.get_run(sqlite_db, run_id).status == "completed"


# ---------------------------------------------------------------- refused at once


def test_commands_refused_when_sent(sqlite_db, tmp_path):
    run_id = _submit(sqlite_db, 4)
    other = _submit(sqlite_db, 4)
    send_command(sqlite_db, other, "pause")
    run_optimizer(sqlite_db, other, tmp_path)
    foreign = _seed(sqlite_db, other)
    with pytest.raises(CommandError, match="unknown command 'restart'"):
        send_command(sqlite_db, run_id, "restart")
    with pytest.raises(NotFound, match="no run with id 'rnope'"):
        send_command(sqlite_db, "rnope", "pause")
    with pytest.raises(NotFound, match=f"belongs to run {other}"):
        send_command(sqlite_db, run_id, "pin", {"candidate_id": foreign.id})
    with pytest.raises(NotFound, match="no candidate with id 'cnope'"):
        send_command(sqlite_db, run_id, "pin", {"candidate_id": "cnope"})
    with pytest.raises(CommandError, match="the edited text is empty"):
        send_command(sqlite_db, other, "edit", {"candidate_id": foreign.id, "content": "   "})
    with pytest.raises(CommandError, match="the feedback is empty"):
        send_command(sqlite_db, other, "feedback", {"candidate_id": foreign.id, "text": ""})
    assert repo.list_commands(sqlite_db, run_id) == []


def test_pinning_a_rejected_proposal_makes_it_a_parent(sqlite_db, tmp_path):
    """docs/design.md §2: pinned candidates are always eligible. A rejected proposal a person pins (it
    lost on a 3-example minibatch, but they believe in it) must become a parent within
    pin_every steps, not be reported "pinned" and then ignored."""

    def stubborn(messages, params):  # never improves: every proposal is rejected
        from tests.support import toy as t
        return "```\n" + t.current_version(messages[1]["content"]) + " extra\n```"

    install_script(stubborn)
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1, "pin_every": 2},
                     budget={"max_steps": 4, "stop_at_score": None})
    pinned = []

    def pin_rejected(ctx):
        [rejected] = [c for c in ctx.state.candidates.values() if c.status == "rejected"]
        pinned.append(rejected.id)
        send_command(ctx.db, ctx.run_id, "pin", {"candidate_id": rejected.id}, author="ana")

    run_optimizer(sqlite_db, run_id, tmp_path, on_step=_at(1, pin_rejected))
    steps = repo.list_steps(sqlite_db, run_id)
    assert any(pinned[0] in s.parent_ids for s in steps[1:3]), [s.parent_ids for s in steps]


def test_pinning_a_failed_proposal_is_refused_with_a_reason(sqlite_db, tmp_path):
    def unfenced(messages, params):
        return "no fence here"

    install_script(unfenced)
    run_id = _submit(sqlite_db, 4, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})
    hook = _at(1, lambda ctx: send_command(ctx.db, ctx.run_id, "pause"))
    run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook)
    [failed] = [c for c in repo.list_candidates(sqlite_db, run_id) if c.status == "failed"]
    assert failed.content == {}
    try:
        send_command(sqlite_db, run_id, "pin", {"candidate_id": failed.id})
    except CommandError as exc:  # refused when sent: fine
        assert "failed" in str(exc) or "no text" in str(exc)
        return
    run_optimizer(sqlite_db, run_id, tmp_path)
    cmd = repo.list_commands(sqlite_db, run_id)[-1]
    assert cmd.status == "rejected", cmd.result  # applied "pinned" to a candidate with no text is a lie


def test_a_budget_below_what_was_spent_is_refused(sqlite_db, tmp_path):
    install_script(toy.script)
    run_id = _submit(sqlite_db, 4, budget={"max_steps": 1, "stop_at_score": None})
    run_optimizer(sqlite_db, run_id, tmp_path)
    spent = repo.get_run(sqlite_db, run_id).metric_calls
    with pytest.raises(CommandError, match=f"already spent \\({spent}\\)"):
        send_command(sqlite_db, run_id, "budget", {"max_metric_calls": spent - 1})


def test_an_edit_applied_twice_after_a_crash_makes_one_human_candidate(sqlite_db, tmp_path):
    """A worker killed after applying an edit but before marking it done applies it again on
    resume: the human candidate's id derives from the command, so it is found, not duplicated."""
    from storage.models import Command
    from sqlmodel import select

    install_script(toy.script)
    run_id = _submit(sqlite_db, 4, budget={"max_steps": 2, "stop_at_score": None})
    sent = []
    hook = _at(1, lambda ctx: sent.append(send_command(ctx.db, ctx.run_id, "edit", {
        "candidate_id": next(c.id for c in ctx.state.candidates.values() if c.origin == "seed"),
        "content": "start alpha bravo"}, author="ana")))
    run_optimizer(sqlite_db, run_id, tmp_path, on_step=hook)
    with sqlite_db.write() as s:  # as if the worker died before finish_command
        cmd = s.exec(select(Command).where(Command.id == sent[0])).one()
        cmd.status = "pending"
        s.add(cmd)
    send_command(sqlite_db, run_id, "budget", {"max_steps": 3})
    send_command(sqlite_db, run_id, "resume")
    run_optimizer(sqlite_db, run_id, tmp_path)
    humans = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "human"]
    assert len(humans) == 1 and humans[0].author == "ana"
    assert_consistent_totals(sqlite_db, run_id)


# ---------------------------------------------------------------- the LM settings of a paused run


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_run_paused_by_a_failing_lm_is_fixed_by_the_lm_command_and_resumed(sqlite_db, tmp_path):
    from engine.access import Actor, Refused, Role

    db = sqlite_db
    down = {"model": "openai/any", "api_base": f"http://127.0.0.1:{_closed_port()}/v1", "num_retries": 0}
    run_id = _submit(db, 6, reflection_lm=down, budget={"max_metric_calls": 300, "stop_at_score": 1.0})
    assert run_optimizer(db, run_id, tmp_path) == "paused"
    run = repo.get_run(db, run_id)
    assert "Fix the LM settings" in run.status_reason and f"python -m engine lm {run_id}" in run.status_reason
    with pytest.raises(Refused):  # an editor's
        send_command(db, run_id, "lm", {"reflection_lm": {"model": "scripted/toy"}},
                     actor=Actor("vic@example.com", Role.VIEWER, signed_in=True))
    with pytest.raises(CommandError, match=r"^reflection_lm\.api_key_env: must be the NAME of an environment variable"):
        send_command(db, run_id, "lm", {"reflection_lm": {"api_key_env": "sk-abc123"}}, author="ana")
    with pytest.raises(CommandError, match=r"^lm: give reflection_lm / task_lm / judge_lm tables"):
        send_command(db, run_id, "lm", {"reflection": {"model": "x"}}, author="ana")
    # still nothing there: the engine asks before it applies, and refuses
    send_command(db, run_id, "lm", {"reflection_lm": {"api_base": f"http://127.0.0.1:{_closed_port()}/v1"}}, author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "paused"
    cmd = repo.list_commands(db, run_id)[-1]
    assert cmd.status == "rejected" and "reflection_lm.api_base: nothing answers at" in cmd.result
    # fixed: a model that answers, and no address
    send_command(db, run_id, "lm", {"reflection_lm": {"model": "scripted/toy", "api_base": ""}}, author="ana")
    send_command(db, run_id, "resume", author="ana")
    assert run_optimizer(db, run_id, tmp_path) == "completed"
    lm = repo.get_run(db, run_id).config["reflection_lm"]
    assert (lm["model"], lm["api_base"], lm["num_retries"]) == ("scripted/toy", None, 0)
    assert [k for k, s in _commands(db, run_id)] == ["lm", "lm", "resume"] and repo.get_run(db, run_id).best_val_mean == 1.0
    with pytest.raises(CommandError, match="the LM settings of a paused run can be changed"):
        send_command(db, run_id, "lm", {"reflection_lm": {"model": "scripted/toy"}}, author="ana")
