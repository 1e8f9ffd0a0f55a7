"""Status changes go through storage.transitions, on SQLite and a real PostgreSQL (``db``):
each table's refused moves raise InvalidTransition and write nothing."""

from __future__ import annotations

import pytest

from storage import leases, repo
from storage.errors import InvalidTransition, NotFound
from storage.models import Candidate
from storage.states import CANDIDATE_TRANSITIONS, RUN_TRANSITIONS, CandidateStatus, RunStatus


def _run(db, status: RunStatus = RunStatus.QUEUED) -> str:
    return repo.create_run(db, "t", "ana", {}, [("x0", "val", {})], status=status)


def _candidate(db, run_id: str, cid: str, status: CandidateStatus = CandidateStatus.PROPOSED) -> Candidate:
    return repo.save_candidate(db, Candidate(id=cid, run_id=run_id, content={"p": cid}, content_hash=cid,
                                             origin="reflection", status=status, reason="written"))


def test_every_status_has_a_row_in_its_table():
    assert set(CANDIDATE_TRANSITIONS) == set(CandidateStatus)
    assert set(RUN_TRANSITIONS) == set(RunStatus)


def test_a_candidate_moves_as_its_table_allows_and_keeps_its_reason_when_none_is_given(db):
    run_id = _run(db)
    _candidate(db, run_id, "c1")
    moved = repo.set_candidate_status(db, "c1", CandidateStatus.REJECTED, "no improvement", finished_at=None)
    assert (moved.status, moved.reason) == ("rejected", "no improvement")
    moved = repo.set_candidate_status(db, "c1", CandidateStatus.ACCEPTED, None, val_count=1, val_mean=0.5)
    stored = repo.get_candidate(db, "c1")
    assert (stored.status, stored.reason, stored.val_count, stored.val_mean) == ("accepted", "no improvement", 1, 0.5)
    assert repo.set_candidate_status(db, "c1", CandidateStatus.ACCEPTED, None).status == "accepted"  # re-applied


@pytest.mark.parametrize("start, to", [
    (CandidateStatus.ACCEPTED, CandidateStatus.PROPOSED),
    (CandidateStatus.ACCEPTED, CandidateStatus.FAILED),
    (CandidateStatus.ACCEPTED, CandidateStatus.REJECTED),
    (CandidateStatus.REJECTED, CandidateStatus.PROPOSED),
    (CandidateStatus.FAILED, CandidateStatus.PROPOSED),
])
def test_a_refused_candidate_move_says_so_and_writes_nothing(db, start, to):
    run_id = _run(db)
    _candidate(db, run_id, "c1", start)
    with pytest.raises(InvalidTransition, match=f"candidate c1 cannot go from {start} to {to}"):
        repo.set_candidate_status(db, "c1", to, "late", val_mean=9.0,
                                  row=Candidate(id="c1", run_id=run_id, content={"p": "changed"}, content_hash="c1",
                                                origin="reflection"))
    stored = repo.get_candidate(db, "c1")
    assert (stored.status, stored.reason, stored.val_mean, stored.content) == (start, "written", None, {"p": "c1"})


def test_a_new_row_is_inserted_in_the_status_it_is_given_and_an_unknown_id_without_one_is_not_found(db):
    run_id = _run(db)
    row = Candidate(id="seed", run_id=run_id, content={"p": "s"}, content_hash="s", origin="seed")
    assert repo.set_candidate_status(db, "seed", CandidateStatus.ACCEPTED, None, row=row).status == "accepted"
    assert repo.get_candidate(db, "seed").status == "accepted"
    with pytest.raises(NotFound, match="no candidate with id 'nobody'"):
        repo.set_candidate_status(db, "nobody", CandidateStatus.FAILED, "gone")


def test_saving_a_candidate_keeps_its_stored_status_and_update_refuses_a_status(db):
    run_id = _run(db)
    cand = _candidate(db, run_id, "c1", CandidateStatus.ACCEPTED)
    cand.status, cand.pinned = CandidateStatus.PROPOSED, True
    saved = repo.save_candidate(db, cand)
    stored = repo.get_candidate(db, "c1")
    assert (saved.status, stored.status, stored.pinned) == ("accepted", "accepted", True)
    with pytest.raises(InvalidTransition, match="set_candidate_status"):
        repo.update_candidate(db, "c1", status="proposed")
    assert repo.get_candidate(db, "c1").status == "accepted"


def test_a_refused_run_move_says_so_and_writes_nothing(db):
    run_id = _run(db, RunStatus.STOPPED)
    with pytest.raises(InvalidTransition, match=f"run {run_id} cannot go from stopped to paused"):
        repo.transition_run(db, run_id, RunStatus.PAUSED, "paused by ana", step_mode=True)
    run = repo.get_run(db, run_id)
    assert (run.status, run.status_reason, run.step_mode) == ("stopped", "", False)


def test_a_claim_and_a_cancel_move_the_run_through_the_table(db):
    claimed = _run(db)
    assert leases.claim_run(db, "w1", 30, claimed) == claimed
    run = repo.get_run(db, claimed)
    assert run.status == "running" and run.started_at is not None
    cancelled = _run(db)
    assert repo.cancel_queued_run(db, cancelled, "bo", "not needed") is not None
    run = repo.get_run(db, cancelled)
    assert (run.status, run.status_reason) == ("stopped", "cancelled by bo before a worker started it")
    assert run.finished_at is not None
    assert repo.cancel_queued_run(db, claimed, "bo", "too late") is None  # a worker has it: the engine stops it
    assert repo.get_run(db, claimed).status == "running"
