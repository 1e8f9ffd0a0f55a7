"""What only an admin may do (engine/admin.py), on both databases: deleting a run with every row
that belongs to it, granting and revoking roles, and the record of both; non-admins refused at
the command layer and the refusal recorded."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from engine.access import Actor, Refused, Role, RoleMap
from engine.admin import AdminError, admin_actions, delete_run, grant, grant_pairs, normalise_rule, revoke
from engine.cli import main as cli
from engine.commands import send_command
from storage import access as access_store, admin as store, repo
from storage.errors import Conflict, NotFound
from tests.support.synthetic import generate_run

ADMIN = Actor("boss@example.com", Role.ADMIN, signed_in=True)
EDITOR = Actor("ed@lab.example.com", Role.EDITOR, signed_in=True)
FILE = RoleMap.from_config({"admins": ["boss@example.com"], "viewers": ["@example.com"], "default": "none"})


def _rows_of(db, run_id: str) -> dict[str, int]:
    with db.read() as s:
        return {t.name: s.execute(select(func.count()).select_from(t).where(t.c.run_id == run_id)).scalar_one()
                for t in store.run_tables()}


def _full_run(db, seed: int) -> str:
    """A finished run with a row in every table that has a run_id (commands and comments too)."""
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, seed=seed)
    cand = next(c for c in repo.list_candidates(db, run_id) if c.content)
    send_command(db, run_id, "approve", {"candidate_id": cand.id}, author="ana", reason="good")
    repo.add_comment(db, run_id, cand.id, "ana", "a comment")
    return run_id


def test_an_admin_deletes_a_run_and_every_row_of_it_and_the_deletion_is_recorded(db):
    doomed, kept = _full_run(db, 1), _full_run(db, 2)
    assert all(_rows_of(db, doomed).values()), _rows_of(db, doomed)  # every table holds rows of it
    kept_before = _rows_of(db, kept)
    with pytest.raises(Refused, match="delete run needs an admin"):
        delete_run(db, doomed, EDITOR, "tidy up")
    counts = delete_run(db, doomed, ADMIN, "a test run")
    assert counts == {k: v for k, v in counts.items() if v} and sum(counts.values()) > 50
    assert set(_rows_of(db, doomed).values()) == {0}
    with pytest.raises(NotFound, match="no run with id"):
        repo.get_run(db, doomed)
    assert _rows_of(db, kept) == kept_before  # the other run is untouched
    # the deletion and the refused attempt outlive the run
    action = admin_actions(db, ADMIN)[0]
    assert (action.actor, action.action, action.subject, action.reason) == ("boss@example.com", "delete_run", doomed,
                                                                            "a test run")
    assert "completed" in action.detail and "metric calls" in action.detail
    assert [(r.actor, r.action) for r in access_store.list_refusals(db, doomed)] == [(EDITOR.name, "delete_run")]
    with pytest.raises(NotFound):
        delete_run(db, doomed, ADMIN)


@pytest.mark.parametrize("status", ["running", "paused", "queued"])
def test_a_run_that_is_not_finished_is_refused_stop_it_first(db, status):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, status=status)
    with pytest.raises(Conflict, match=f"run: {run_id} is {status}; stop it first"):
        delete_run(db, run_id, ADMIN)
    assert repo.get_run(db, run_id).status == status and any(_rows_of(db, run_id).values())
    assert store.list_admin_actions(db) == []


def test_a_finished_run_about_to_be_continued_or_still_leased_is_refused(db):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4)
    send_command(db, run_id, "budget", {"max_metric_calls": 10_000}, author="ana")
    send_command(db, run_id, "resume", {}, author="ana")
    with pytest.raises(Conflict, match="has a pending resume"):
        delete_run(db, run_id, ADMIN)
    other = generate_run(db, n_candidates=12, n_val=4, n_train=4, seed=3)
    from datetime import timedelta

    from storage.models import utcnow

    repo.set_run_fields(db, other, lease_owner="w1", lease_expires_at=utcnow() + timedelta(seconds=30))
    with pytest.raises(Conflict, match="still held by worker w1"):
        delete_run(db, other, ADMIN)


def test_the_cli_deletes_a_run_and_shows_the_record(db, capsys):
    run_id = _full_run(db, 4)
    assert cli(["delete", run_id, "--db", db.url, "--author", "ops", "--reason", "cleanup"]) == 0
    assert f"deleted run {run_id}" in capsys.readouterr().out
    assert cli(["roles", "--log", "--db", db.url]) == 0
    assert f"delete_run {run_id}" in capsys.readouterr().out
    assert cli(["delete", run_id, "--db", db.url]) == 2
    assert f"error: run: no run with id {run_id!r}" in capsys.readouterr().err


@pytest.mark.parametrize("rule, message", [("", "rule: give"), ("@nodot", "is not a domain"),
                                           ("a@b@c.org", "is not an e-mail address"), ("x" * 201, "at most 200")])
def test_a_bad_rule_names_the_field(rule, message):
    with pytest.raises(AdminError, match=message):
        normalise_rule(rule)


def test_grants_add_to_the_file_and_never_lock_out_its_admins(db):
    assert normalise_rule("  Ana@Example.COM ") == "ana@example.com"
    with pytest.raises(Refused, match="manage roles needs an admin"):
        grant(db, "ed@lab.example.com", "admin", EDITOR, "promote myself")
    assert [r.action for r in access_store.list_refusals(db)] == ["manage_roles"]
    with pytest.raises(AdminError, match="role: 'owner' is not a role"):
        grant(db, "ana@example.com", "owner", ADMIN)
    assert grant(db, "Ana@Example.com", "editor", ADMIN, "runs the prompt work") is None
    assert grant(db, "ana@example.com", "admin", ADMIN, "covers for boss") == "editor"
    grant(db, "refract-editors", "editor", ADMIN)  # a claim value
    effective = FILE.with_grants(grant_pairs(db))
    assert effective.role_of("ana@example.com") == Role.ADMIN
    assert effective.role_of("vera@example.com") == Role.VIEWER  # the file's domain rule
    assert effective.role_of("x@elsewhere.org") == Role.NONE  # the file's default
    # a grant never lowers what the file gives: its admin stays admin whatever the grants say
    grant(db, "boss@example.com", "viewer", ADMIN, "oops")
    assert FILE.with_grants(grant_pairs(db)).role_of("boss@example.com") == Role.ADMIN
    assert revoke(db, "ana@example.com", ADMIN, "back from leave") == "admin"
    assert FILE.with_grants(grant_pairs(db)).role_of("ana@example.com") == Role.VIEWER
    with pytest.raises(NotFound, match="no grant for 'nobody@example.com'"):
        revoke(db, "nobody@example.com", ADMIN)
    log = [(a.action, a.subject, a.detail) for a in admin_actions(db, ADMIN)]
    assert log[-3:][::-1] == [("grant", "ana@example.com", "editor"), ("grant", "ana@example.com", "editor → admin"),
                              ("grant", "refract-editors", "editor")]
    assert log[0] == ("revoke", "ana@example.com", "was admin")
    with pytest.raises(Refused):
        admin_actions(db, EDITOR)  # the record names people: admins only


def test_the_cli_grants_lists_and_revokes(db, capsys):
    assert cli(["grant", "@lab.example.com", "editor", "--db", db.url, "--reason", "the lab"]) == 0
    assert cli(["roles", "--db", db.url]) == 0
    assert "@lab.example.com" in capsys.readouterr().out
    assert cli(["grant", "x", "boss", "--db", db.url]) == 2
    assert "error: role: 'boss' is not a role" in capsys.readouterr().err
    assert cli(["revoke", "@lab.example.com", "--db", db.url]) == 0
    assert grant_pairs(db) == []
