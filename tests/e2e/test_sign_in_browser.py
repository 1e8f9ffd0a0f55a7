"""Sign-in and roles in a real browser: a real OpenID provider (``oidc-provider-mock``, started by
the test on a free port), a real ``streamlit run app.py`` with ``[auth]`` and ``[roles]`` in its
secrets file, and two browser contexts signed in as an editor and as a viewer on one run.

- The editor pauses the run; the command carries the signed-in e-mail.
- The viewer sees that pending pause appear live and finds the steering controls disabled; a
  forged click (the server's "disabled" flag flipped in the websocket stream before the page
  draws it, so the button is enabled in the tampered page) queues nothing: Streamlit discards
  a disabled widget's click on the server, before the command layer would refuse it.
- The viewer, signed in, opens a link to a candidate and sees that candidate, its Approve
  disabled with the reason: a link stays valid for another signed-in person.
- The editor, over the hourly limit of evaluator tries, is refused by the command layer: the
  refusal is shown at the control and recorded.
- An admin (named by the secrets file) opens a link to the Roles page, signs in, lands on it and
  grants the viewer editor.

Screenshots: test-artifacts/sign-in-*.png.
"""

from __future__ import annotations

import re
import secrets

import pytest
from playwright.sync_api import expect

from engine.admin import grants
from storage import access as store, repo
from storage.db import Database
from tests.support.synthetic import generate_run
from ui import keys

from .conftest import by_key, new_page, ready, shot, start_studio, stop_studio

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]  # two sign-ins and five pages on a shared CPU
expect.set_options(timeout=20_000)  # a cold studio on a shared CPU draws its first page slowly
EDITOR, VIEWER, ADMIN = "ed@lab.example.com", "vera@example.com", "boss@example.com"


@pytest.fixture(scope="module")
def team_studio(tmp_path_factory):
    from oidc_provider_mock import User, run_server_in_thread

    tmp = tmp_path_factory.mktemp("sign-in")
    users = [User(sub=who, claims={"email": who}) for who in (EDITOR, VIEWER, ADMIN)]
    with run_server_in_thread(user_claims=users) as provider:
        issuer = f"http://localhost:{provider.server_port}"
        secrets_file = tmp / "secrets.toml"
        secrets_file.write_text(f'''
[auth]
redirect_uri = "http://127.0.0.1:{{port}}/oauth2callback"
cookie_secret = "{secrets.token_hex(32)}"
client_id = "refract-studio"
client_secret = "{secrets.token_hex(16)}"
server_metadata_url = "{issuer}/.well-known/openid-configuration"

[roles]
admins = ["{ADMIN}"]
editors = ["{EDITOR}"]
viewers = ["@example.com"]
default = "none"
try_evaluator_per_hour = 0
''')
        url = f"sqlite:///{tmp}/team.db"
        db = Database(url)
        db.create_all()
        run_id = generate_run(db, n_candidates=16, n_val=4, n_train=4, status="running", owner=EDITOR)
        proc, studio = start_studio(tmp, url, worker=False, args=(f"--secrets.files={secrets_file}",))
        studio.db, studio.run_id = db, run_id
        try:
            yield studio
        finally:
            stop_studio(proc)


def _sign_in(page, studio, who: str, screenshot: str | None = None, link: str | None = None):
    """Open a link (default: to the run's dashboard), sign in, and land on that view."""
    page.set_default_timeout(45_000)  # clicks wait for a renderer that shares 2 cores with other tests
    link = link or f"{studio.url}/dashboard?run={studio.run_id}"
    page.goto(link)
    ready(page)
    expect(page.get_by_text("sign in to see its runs")).to_be_visible()
    if screenshot:
        shot(page, screenshot)
    by_key(page, keys.SIGN_IN).get_by_role("button").click()
    page.wait_for_url(re.compile(r"localhost:\d+/oauth2/authorize"))  # the provider's own page
    if screenshot:
        shot(page, screenshot + "-provider")
    page.get_by_role("button", name=who, exact=True).click()
    page.wait_for_url(re.compile(re.escape(link)))  # back from the provider, on the view the link named
    ready(page)
    expect(page.get_by_text(f"Signed in as {who}")).to_be_visible()


def _enable_disabled_pause(page) -> None:
    """Tamper with the page: flip ``disabled`` of the Pause button in every message the server
    sends, so the browser draws it enabled and a click sends a real trigger for it."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    def tamper(data):
        if not isinstance(data, bytes):
            return data
        msg = ForwardMsg()
        msg.ParseFromString(data)
        element = msg.delta.new_element if msg.WhichOneof("type") == "delta" else None
        if element is not None and element.WhichOneof("type") == "button" and element.button.label == "Pause":
            element.button.disabled = False
            return msg.SerializeToString()
        return data

    def route(ws):
        server = ws.connect_to_server()
        server.on_message(lambda m: ws.send(tamper(m)))
        ws.on_message(lambda m: server.send(m))

    page.route_web_socket(re.compile(r".*/_stcore/stream"), route)


def test_an_editor_steers_and_a_viewer_is_refused_at_the_command_layer(team_studio, browser):
    studio, db = team_studio, team_studio.db
    editor = new_page(browser)
    _sign_in(editor, studio, EDITOR, screenshot="sign-in")
    pause = by_key(editor, keys.RUN_PAUSE).get_by_role("button")
    expect(pause).to_be_enabled()
    editor.get_by_label("Why (recorded in the command log)").fill("reviewing the frontier")
    pause.click()
    expect(editor.get_by_text(re.compile(r"pause queued \(command \d+\)"))).to_be_visible()
    cmd = next(c for c in repo.list_commands(db, studio.run_id) if c.kind == "pause" and c.status == "pending")
    assert (cmd.author, cmd.reason) == (EDITOR, "reviewing the frontier")

    viewer = new_page(browser)
    _sign_in(viewer, studio, VIEWER)
    expect(viewer.get_by_text(re.compile(rf"pause\s+by {re.escape(EDITOR)}")).first).to_be_visible()  # live
    expect(by_key(viewer, keys.RUN_PAUSE).get_by_role("button")).to_be_disabled()
    expect(by_key(viewer, keys.RUN_STEP).get_by_role("button")).to_be_disabled()
    expect(viewer.get_by_text("You are signed in as a viewer").first).to_be_visible()
    shot(viewer, "sign-in-viewer-disabled")

    # a link to a candidate (as the studio writes it) opens that candidate for the signed-in viewer
    cand = next(c for c in repo.list_candidates(db, studio.run_id) if c.content and c.origin == "reflection")
    viewer.goto(f"{studio.url}/candidate?run={studio.run_id}&candidate={cand.id}")
    ready(viewer)
    expect(viewer.get_by_role("heading", name=re.compile(cand.id)).first).to_be_visible()
    approve = viewer.get_by_text("Approve this candidate")
    approve.click()  # the expander opens; its button is disabled, the reason beside it
    expect(viewer.get_by_text("You are signed in as a viewer: this needs an editor").first).to_be_visible()
    approve.scroll_into_view_if_needed()
    shot(viewer, "sign-in-viewer-refused")

    _enable_disabled_pause(viewer)
    viewer.goto(f"{studio.url}/dashboard?run={studio.run_id}")  # a new session, drawn through the tampered stream
    ready(viewer)
    before = len(repo.list_commands(db, studio.run_id))
    button = by_key(viewer, keys.RUN_PAUSE).get_by_role("button")
    expect(button).to_be_enabled()  # the tampered page draws it enabled
    button.click()
    ready(viewer)
    shot(viewer, "sign-in-viewer-forged-click")
    # Streamlit itself discards a click on a widget it drew disabled, before any callback: nothing
    # queued, nothing reached the command layer (whose own refusal tests/test_access.py exercises)
    assert len(repo.list_commands(db, studio.run_id)) == before


    # a refusal by the command layer, shown at the control: the editor is over the hourly limit of
    # evaluator tries (0 in this studio's [roles])
    editor.goto(f"{studio.url}/new")
    ready(editor)
    by_key(editor, "new_template").get_by_role("combobox").click()
    editor.get_by_role("option", name=re.compile("Toy words")).click()
    ready(editor)  # the choice has reached the server before "Load example" is clicked
    by_key(editor, "new_load_template").get_by_role("button").click()
    ready(editor)
    expect(editor.get_by_label("Run name")).not_to_have_value("")  # the example is in the form
    by_key(editor, "new_try_evaluator").get_by_role("button").click()
    refused = editor.get_by_text(f"rate limit: try evaluator at most 0 times an hour per person, and {EDITOR} did 0")
    expect(refused).to_be_visible()
    refused.scroll_into_view_if_needed()
    shot(editor, "sign-in-refused-at-the-control")
    assert [(r.actor, r.action) for r in store.list_refusals(db)] == [(EDITOR, "try_evaluator")]
    editor.context.close()

    viewer.context.close()


def test_an_admin_grants_a_role_on_the_roles_page(team_studio, browser):
    """The admin the secrets file names opens a link to the Roles page, signs in, lands on it and
    grants the viewer editor: recorded, and the page's check of the address says editor."""
    studio, db = team_studio, team_studio.db
    admin = new_page(browser)
    _sign_in(admin, studio, ADMIN, link=f"{studio.url}/roles")
    expect(admin.get_by_text(f"You: {ADMIN} · admin")).to_be_visible()
    admin.get_by_label("E-mail address, @domain or claim value").fill(VIEWER)
    admin.get_by_label("Why (recorded)").fill("reviews prompts now")
    admin.get_by_role("button", name="Grant").click()
    expect(admin.get_by_text(f"{VIEWER} is now editor.")).to_be_visible()
    assert [(g.rule, g.role, g.granted_by) for g in grants(db)] == [(VIEWER, "editor", ADMIN)]
    admin.get_by_label("Check an address").fill(VIEWER)
    admin.get_by_label("Check an address").press("Enter")
    expect(admin.get_by_text(re.compile(rf"{re.escape(VIEWER)} → editor"))).to_be_visible()
    admin.get_by_role("heading", name="Who is what").scroll_into_view_if_needed()
    shot(admin, "sign-in-admin-roles")
    admin.context.close()
