"""A finished synthetic run whose approved candidate, name and comment carry HTML: the fixture
``reviewed`` of the review tests and of the report's browser test."""

from __future__ import annotations

import pytest

from storage import repo
from storage.models import Candidate
from tests.support.synthetic import generate_run

EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


@pytest.fixture
def reviewed(sqlite_db):
    """A finished synthetic run whose approved candidate, name and comment carry HTML."""
    db = sqlite_db
    run_id = generate_run(db, n_candidates=20, n_val=5, n_train=5, name=f"demo {EVIL}")
    cand = next(c for c in repo.list_candidates(db, run_id) if c.content and c.origin == "reflection"
                and c.val_mean is not None)
    with db.write() as s:
        row = s.get(Candidate, cand.id)
        row.content = {**row.content, "system_prompt": f"Be careful.\n{EVIL}\nThink first."}
        s.add(row)
    repo.add_comment(db, run_id, cand.id, "bo@example.com", f"nice {EVIL}")
    return db, run_id, cand.id
