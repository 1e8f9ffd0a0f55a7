"""Review in the studio (AppTest, local mode): approving a candidate with a reason, the approval
on the runs list and the dashboard, the activity feed filtered by person, the report button."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from storage import repo
from tests.support.studio import open_page, studio_database
from tests.support.synthetic import generate_run
from ui import keys as K, submission

APP = str(Path(__file__).resolve().parent.parent / "app.py")



def test_approve_in_the_studio_then_see_it_everywhere(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=16, n_val=4, n_train=4)
    cand = next(c for c in repo.list_candidates(db, run_id) if c.content and c.origin == "reflection")
    at = open_page("pages/candidate.py", run=run_id, candidate=cand.id)
    at.text_input(key=K.APPROVE_REASON.format(cand=cand.id)).input("clearest wording")
    button = next(b for b in at.button if str(b.key).split(submission.SEP)[0] == K.APPROVE_SEND.format(cand=cand.id))
    button.click().run()
    assert not at.exception
    assert any(f"Approved {cand.id}" in s.value for s in at.success), [s.value for s in at.success]
    assert repo.get_run(db, run_id).approved_candidate_id == cand.id
    cmd = repo.list_commands(db, run_id)[-1]
    assert (cmd.kind, cmd.author, cmd.reason, cmd.status) == ("approve", "ana", "clearest wording", "applied")

    runs = open_page("pages/runs.py")
    assert runs.dataframe[0].value.loc[lambda t: t["id"] == run_id, "approved"].item() == cand.id

    repo.add_comment(db, run_id, cand.id, "bo", "agreed")
    dash = open_page("pages/dashboard.py", run=run_id)
    assert any(f"Approved: {cand.id}" in str(getattr(e, "proto", "")) for e in dash.get("page_link")), \
        "the dashboard links the approved candidate"
    feed = dash.dataframe[-1].value
    assert list(feed["who"][:2]) == ["bo", "ana"] and list(feed["what"][:2]) == ["comment", "approve"]
    dash.selectbox(key=K.ACTIVITY_PERSON).select("ana").run()
    assert set(dash.dataframe[-1].value["who"]) == {"ana"}
    assert dash.get("download_button"), "the report download button is on the dashboard"


def test_without_sign_in_the_sidebar_says_local_mode(tmp_path, monkeypatch):
    studio_database(tmp_path, monkeypatch)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[K.WHO] = "ana"
    at.run()
    assert "Local mode: everyone who reaches this port is an admin" in " ".join(c.value for c in at.sidebar.caption)
    assert at.sidebar.text_input(key=K.WHO) is not None  # the typed name exists only in local mode
