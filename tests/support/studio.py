"""The database every studio test starts from: a fresh SQLite file that the pages find through
REFRACT_DB, with REFRACT_DATA (drafts, caches) inside the test's own folder."""

from __future__ import annotations

from storage.db import Database


def studio_database(tmp_path, monkeypatch) -> Database:
    url = f"sqlite:///{tmp_path}/studio.db"
    monkeypatch.setenv("REFRACT_DB", url)
    monkeypatch.setenv("REFRACT_DATA", str(tmp_path))
    db = Database(url)
    db.create_all()
    return db
