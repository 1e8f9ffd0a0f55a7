"""Admin controls in the studio (AppTest): deleting a run from its dashboard after typing its id,
a run that is not finished refused with "stop it first", the Roles page granting and revoking
roles that take effect on the next page, and non-admins finding both closed with the reason."""

from __future__ import annotations


import pytest
from streamlit.testing.v1 import AppTest

from engine.admin import grant_pairs
from storage import admin as admin_store, repo
from storage.errors import NotFound
from tests.support.studio import open_page, studio_database
from tests.support.synthetic import generate_run
from ui import keys as K

SIGN_IN = {"auth": {"redirect_uri": "http://127.0.0.1:9/oauth2callback", "cookie_secret": "x" * 32,
                    "client_id": "refract", "client_secret": "x",
                    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"},
           "roles": {"admins": ["boss@example.com"], "viewers": ["@example.com"], "default": "none"}}


def signed_in_page(page: str, email: str, **params) -> AppTest:
    """``page`` alone (AppTest runs a switched-to page without app.py's gate and sidebar) as
    ``email``, signed in through the [auth] table above (roles from its [roles])."""
    return open_page(page, None, secrets=SIGN_IN, user={"is_logged_in": True, "email": email}, **params)


def _delete_button(at: AppTest, run_id: str):
    return at.button(key=K.DELETE_SEND.format(run=run_id))


def test_an_admin_deletes_a_finished_run_after_typing_its_id(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4)
    at = open_page("pages/dashboard.py", run=run_id)
    assert _delete_button(at, run_id).disabled  # nothing typed yet
    at.text_input(key=K.DELETE_CONFIRM.format(run=run_id)).input(run_id)
    at.text_input(key=K.DELETE_REASON.format(run=run_id)).input("a trial run").run()
    assert not _delete_button(at, run_id).disabled
    _delete_button(at, run_id).click().run()
    assert not at.exception
    with pytest.raises(NotFound):
        repo.get_run(db, run_id)
    assert any(f"Run {run_id} deleted" in s.value for s in at.success), [s.value for s in at.success]
    action = admin_store.list_admin_actions(db)[0]
    assert (action.actor, action.action, action.subject, action.reason) == ("ana", "delete_run", run_id, "a trial run")


def test_a_running_run_says_stop_it_first_and_cannot_be_deleted(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, status="running")
    at = open_page("pages/dashboard.py", run=run_id)
    at.text_input(key=K.DELETE_CONFIRM.format(run=run_id)).input(run_id).run()
    assert _delete_button(at, run_id).disabled
    assert any("The run is running: stop it first" in c.value for c in at.caption)


def test_a_viewer_finds_delete_and_roles_closed_with_the_reason(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4)
    at = signed_in_page("pages/dashboard.py", "vera@example.com", run=run_id)
    at.text_input(key=K.DELETE_CONFIRM.format(run=run_id)).input(run_id).run()
    assert _delete_button(at, run_id).disabled
    assert any("You are signed in as a viewer: this needs an admin" in c.value for c in at.caption)
    roles = signed_in_page("pages/roles.py", "vera@example.com")
    assert "this needs an admin" in roles.info[0].value and not roles.get("form")


def test_an_admin_grants_a_role_on_the_roles_page_and_it_takes_effect(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    before = signed_in_page("pages/roles.py", "ed@lab.example.com")
    assert before.caption[0].value.endswith("** · no role")  # default none: turned away
    at = signed_in_page("pages/roles.py", "boss@example.com")
    table = at.dataframe[0].value
    assert ("boss@example.com", "admin", "secrets file") in set(zip(table["rule"], table["role"], table["from"]))
    at.text_input(key=K.ROLES_RULE).input("@lab.example.com")
    at.selectbox(key=K.ROLES_ROLE).select("editor")
    at.text_input(key=K.ROLES_REASON).input("the lab joins")
    at.button[0].click().run()  # the form's submit button
    assert not at.exception
    assert grant_pairs(db) == [("@lab.example.com", "editor")]
    assert any("@lab.example.com is now editor" in s.value for s in at.success)
    table = at.dataframe[0].value
    assert ("@lab.example.com", "editor", "grant") in set(zip(table["rule"], table["role"], table["from"]))
    record = at.dataframe[1].value
    assert (record["what"][0], record["subject"][0], record["why"][0]) == ("grant", "@lab.example.com", "the lab joins")

    after = signed_in_page("pages/roles.py", "ed@lab.example.com")
    assert after.caption[0].value.endswith("** · editor")
    assert "this needs an admin" in after.info[0].value

    at.selectbox(key=K.ROLES_REVOKE_PICK).select("@lab.example.com").run()
    at.button(key=K.ROLES_REVOKE).click().run()
    assert grant_pairs(db) == []
    assert admin_store.list_admin_actions(db)[0].action == "revoke"
