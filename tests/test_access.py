"""Roles, refusals, rate limits and approval at the command layer (engine/access.py), on both
databases; and where the studio may listen without sign-in (ui/serving.py)."""

from __future__ import annotations

import pytest

from engine.access import Actor, Refused, Role, RoleMap, local_actor
from engine.commands import AlreadySent, CommandError, send_command
from engine.worker.jobs import TRY_EVALUATOR, request_job
from engine.runs import submit_run
from storage import access as store, repo
from storage.errors import NotFound
from tests.support.harness import toy_config
from tests.support.synthetic import generate_run
from ui import interventions as iv
from ui.serving import is_loopback, refusal

ROLES = RoleMap.from_config({"admins": ["boss@example.com"], "editors": ["@lab.example.com", "refract-editors"],
                             "viewers": ["@example.com"], "default": "none", "claim": "groups",
                             "runs_per_hour": 1, "try_evaluator_per_hour": 2})
VIEWER = Actor("vera@example.com", Role.VIEWER, signed_in=True)
EDITOR = Actor("ed@lab.example.com", Role.EDITOR, signed_in=True)


def test_roles_from_emails_domains_and_a_claim():
    assert ROLES.role_of("boss@example.com") == Role.ADMIN
    assert ROLES.role_of("Ed@Lab.Example.com") == Role.EDITOR  # addresses compare case-insensitively
    assert ROLES.role_of("vera@example.com") == Role.VIEWER
    assert ROLES.role_of("vera@example.com", {"groups": ["x", "refract-editors"]}) == Role.EDITOR  # highest wins
    assert ROLES.role_of("someone@elsewhere.org") == Role.NONE
    assert RoleMap.from_config(None).role_of("anyone@anywhere.org") == Role.VIEWER  # the default default


@pytest.mark.parametrize("section, message", [
    ({"editors": "ed@x.org"}, "roles.editors: give a list"),
    ({"default": "owner"}, "roles.default: 'owner' is not a role"),
    ({"runs_per_hour": -1}, "roles.runs_per_hour: give a whole number"),
    ({"admin": ["a@b.c"]}, "roles.admin: unknown key"),
])
def test_a_bad_roles_table_names_its_key(section, message):
    with pytest.raises(ValueError, match=message):
        RoleMap.from_config(section)


def test_a_viewer_is_refused_at_the_command_layer_and_the_refusal_recorded(db):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, status="running")
    cand = next(c for c in repo.list_candidates(db, run_id) if c.content)
    before = len(repo.list_commands(db, run_id))
    for kind, payload in (("pause", {}), ("pin", {"candidate_id": cand.id}), ("approve", {"candidate_id": cand.id})):
        with pytest.raises(Refused, match=f"role: vera@example.com is a viewer; {kind} needs an editor"):
            send_command(db, run_id, kind, payload, author="forged name", reason="r", actor=VIEWER)
    assert len(repo.list_commands(db, run_id)) == before  # nothing queued
    refusals = store.list_refusals(db, run_id)
    assert [(r.actor, r.role, r.action) for r in refusals] == [
        ("vera@example.com", "viewer", "approve"), ("vera@example.com", "viewer", "pin"),
        ("vera@example.com", "viewer", "pause")]
    # the studio's path says it next to the control; a viewer may still comment
    out = iv.send(db, run_id, "veto", {"candidate_id": cand.id}, VIEWER, "why not")
    assert not out.ok and "needs an editor" in out.message
    assert iv.comment(db, run_id, cand.id, VIEWER, "looks good").ok


def test_an_editors_command_carries_the_signed_in_identity(db):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, status="running")
    cid = send_command(db, run_id, "pause", {}, author="someone else", reason="lunch", actor=EDITOR)
    cmd = next(c for c in repo.list_commands(db, run_id) if c.id == cid)
    assert (cmd.author, cmd.kind, cmd.status) == ("ed@lab.example.com", "pause", "pending")
    # the CLI and the Python API give no actor: trusted, under the name they give
    assert local_actor("cli-user").may("approve")


def test_run_creation_needs_an_editor_and_is_rate_limited(db):
    cfg = toy_config(4)
    with pytest.raises(Refused, match="create run needs an editor"):
        submit_run(db, cfg, actor=VIEWER, roles=ROLES)  # refused before its evaluator is even loaded
    repo.create_run(db, "earlier", EDITOR.name, cfg.stored(), [])  # one run this hour: the limit
    with pytest.raises(Refused, match=r"rate limit: create run at most 1 times an hour per person, and ed@lab.example.com did 1"):
        submit_run(db, cfg, actor=EDITOR, roles=ROLES)
    assert [r.action for r in store.list_refusals(db)] == ["create_run", "create_run"]
    other = Actor("al@lab.example.com", Role.EDITOR)  # the limit is per person
    assert repo.get_run(db, submit_run(db, cfg, actor=other, roles=ROLES)).owner == "al@lab.example.com"


def test_trying_an_evaluator_is_rate_limited_per_person(db):
    payload = {"config": toy_config(4).stored()}
    for _ in range(2):
        request_job(db, TRY_EVALUATOR, payload, EDITOR, roles=ROLES)
    with pytest.raises(Refused, match="at most 2 times an hour"):
        request_job(db, TRY_EVALUATOR, payload, EDITOR, roles=ROLES)
    with pytest.raises(Refused, match="needs an editor"):
        request_job(db, TRY_EVALUATOR, payload, VIEWER, roles=ROLES)


def test_approval_is_a_recorded_command_with_a_reason(db):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4)  # completed: approval needs no engine
    cand = next(c for c in repo.list_candidates(db, run_id) if c.content and c.origin != "seed")
    with pytest.raises(CommandError, match="reason: say why"):
        send_command(db, run_id, "approve", {"candidate_id": cand.id}, actor=EDITOR)
    other = generate_run(db, n_candidates=12, n_val=4, n_train=4, seed=7)
    foreign = next(c for c in repo.list_candidates(db, other) if c.content)
    with pytest.raises(NotFound, match=f"belongs to run {other}"):
        send_command(db, run_id, "approve", {"candidate_id": foreign.id}, reason="x", actor=EDITOR)
    cid = send_command(db, run_id, "approve", {"candidate_id": cand.id}, reason="best on the hard cases",
                       client_token="approve-token-1", actor=EDITOR)
    with pytest.raises(AlreadySent):
        send_command(db, run_id, "approve", {"candidate_id": cand.id}, reason="again",
                     client_token="approve-token-1", actor=EDITOR)
    assert repo.get_run(db, run_id).approved_candidate_id == cand.id
    cmd = next(c for c in repo.list_commands(db, run_id) if c.id == cid)
    assert (cmd.status, cmd.author, cmd.reason, cmd.result) == ("applied", EDITOR.name, "best on the hard cases",
                                                                f"approved {cand.id}")
    send_command(db, run_id, "approve", {"candidate_id": None}, reason="needs another look", actor=EDITOR)
    assert repo.get_run(db, run_id).approved_candidate_id is None


@pytest.mark.parametrize("address, loopback", [("127.0.0.1", True), ("127.0.1.5", True), ("::1", True),
                                               ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                               ("", False), (None, False), ("studio.example.com", False)])
def test_loopback_addresses(address, loopback):
    assert is_loopback(address) is loopback


def test_the_studio_refuses_a_network_address_without_sign_in_unless_forced():
    assert refusal("127.0.0.1", sign_in=False, forced=False) is None
    assert refusal("0.0.0.0", sign_in=True, forced=False) is None
    assert refusal("0.0.0.0", sign_in=False, forced=True) is None
    message = refusal("0.0.0.0", sign_in=False, forced=False)
    assert "without sign-in" in message and "[auth]" in message and "REFRACT_ALLOW_NO_SIGN_IN=1" in message
    assert "every interface" in refusal(None, sign_in=False, forced=False)
