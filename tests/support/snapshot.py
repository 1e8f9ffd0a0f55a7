"""Every table of a database, as rows: what a refused input must leave unchanged."""

from __future__ import annotations

from sqlalchemy import text
from sqlmodel import SQLModel


def _snapshot(db) -> dict:
    with db.writer.connect() as conn:
        return {t.name: conn.execute(text(f'SELECT * FROM "{t.name}" ORDER BY 1')).all()
                for t in SQLModel.metadata.sorted_tables}
