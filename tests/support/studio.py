"""The database every studio test starts from: a fresh SQLite file that the pages find through
REFRACT_DB, with REFRACT_DATA (drafts, caches) inside the test's own folder."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from storage.db import Database
from ui import keys as K


def studio_database(tmp_path, monkeypatch) -> Database:
    url = f"sqlite:///{tmp_path}/studio.db"
    monkeypatch.setenv("REFRACT_DB", url)
    monkeypatch.setenv("REFRACT_DATA", str(tmp_path))
    db = Database(url)
    db.create_all()
    return db


APP = str(Path(__file__).resolve().parent.parent.parent / "app.py")


def open_page(page: str, who: str | None = "ana", *, secrets: dict | None = None, user: dict | None = None,
              **params) -> AppTest:
    """Render ``page`` (e.g. "pages/dashboard.py") with these query parameters, as ``who`` in
    local mode (None: nobody named yet), and check that it raised nothing. With ``secrets``
    (an [auth] table) and ``user`` (``st.user``'s fields), as that signed-in person instead."""
    at = AppTest.from_file(APP, default_timeout=60)
    if who is not None:
        at.session_state[K.WHO] = who
    if secrets is not None:
        at.secrets = secrets
    if user is not None:
        at.user = user
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(str(Path(APP).parent / page))
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at
