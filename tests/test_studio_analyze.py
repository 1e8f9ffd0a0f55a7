"""The dashboard's Analyze panel (AppTest): findings with their evidence and one-click actions sent
as ordinary commands, and the written diagnosis queued as a job, never written by the page."""

from __future__ import annotations

import pytest
from sqlmodel import select

from engine.worker.jobs import JobRunner
from storage import jobs, repo
from storage.models import Job
from tests.support.scripted_lm import install_script
from tests.support.studio import open_page, studio_database
from tests.support.synthetic import generate_run
from ui import keys as K, submission


@pytest.fixture
def live(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    return db, generate_run(db, n_candidates=40, n_val=8, n_train=10, status="running", name="Live")


def _action(at, base: str):
    found = [b for b in at.button if str(b.key).split(submission.SEP)[0] == base]
    assert len(found) == 1, (base, [b.key for b in at.button])
    return found[0]


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_findings_show_with_evidence_links_and_a_veto_is_one_click(live):
    db, run_id = live
    at = open_page("pages/dashboard.py", run=run_id)
    assert "Analyze" in [h.value for h in at.subheader]
    text = _markdown(at)
    assert ":material/warning: **F1 · warning**" in text and "degenerate frontier member" in text
    assert f"(/candidate?run={run_id}&candidate=" in text  # evidence as links
    _action(at, K.ANALYZE_ACTION.format(finding="degenerate_members", i=0)).click().run()
    cmd = repo.list_commands(db, run_id)[-1]
    assert cmd.kind == "veto" and cmd.author == "ana" and cmd.reason.startswith("Analyze: degenerate frontier member")
    assert any("veto queued" in s.value for s in at.success)


def test_a_finished_run_keeps_its_findings_and_takes_no_veto(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=40, n_val=8, n_train=10, name="Done")
    at = open_page("pages/dashboard.py", run=run_id)
    veto = _action(at, K.ANALYZE_ACTION.format(finding="degenerate_members", i=0))
    assert veto.disabled and "a finished run takes no steering commands" in veto.help


def _answer(messages, params):
    return "1. Veto the degenerate members first. [F1]\n2. Make the evaluator deterministic. [F2][F7]\n3. Rest a while before the next run."


def test_the_written_diagnosis_is_a_job_the_worker_runs_and_the_page_shows(live, tmp_path):
    db, run_id = live
    cfg = repo.get_run(db, run_id).config
    repo.set_run_fields(db, run_id, config={**cfg, "reflection_lm": {"model": "scripted/analyst", "num_retries": 0}})
    calls = repo.get_run(db, run_id).lm_calls
    at = open_page("pages/dashboard.py", run=run_id)
    at.button(key=K.ANALYZE_DIAGNOSE).click().run()
    with db.read() as s:
        (job,) = s.exec(select(Job).where(Job.kind == "analyze")).all()
    assert job.payload == {"run_id": run_id} and job.status == "pending"
    assert repo.get_run(db, run_id).lm_calls == calls  # the page itself called no LM
    install_script(_answer)
    JobRunner(db, "w").run_once()
    assert jobs.job_view(db, job.id)["status"] == "done"
    at.run()
    text = _markdown(at)
    assert "Veto the degenerate members first\\. **[F1]**" in text
    assert "**[F7]**" in text and any("F7, which is no finding" in c.value for c in at.caption)
    assert any("cites no finding" in c.value for c in at.caption)  # item 3
    # another session sees the last diagnosis from the records
    other = open_page("pages/dashboard.py", who="ben", run=run_id)
    assert "**Last written diagnosis**" in _markdown(other)


def test_branch_with_the_suggested_settings_is_one_click(tmp_path, monkeypatch):
    from tests.support import sick_runs

    db = studio_database(tmp_path, monkeypatch)
    run_id = sick_runs.repeating_lm(db, tmp_path)
    at = open_page("pages/dashboard.py", run=run_id)
    button = at.button(key=K.ANALYZE_ACTION.format(finding="repeating_lm", i=0))
    assert not button.disabled and button.label == "Branch with a hotter reflection LM"
    button.click().run()
    runs = [r for r in repo.list_runs(db) if r.id != run_id]
    assert len(runs) == 1, [e.value for e in at.error]
    branch = runs[0]
    assert branch.config["branch"]["run"] == run_id and branch.config["reflection_lm"]["temperature"] == 1.1
    assert branch.status == "queued" and branch.owner == "ana"
    assert any(f"Branch {branch.id} queued" in str(getattr(e, "label", "")) for e in at.get("page_link")), \
        [e for e in at.get("page_link")]


def test_a_recorded_diagnosis_reads_its_cited_findings_back_from_its_prompt():
    from engine.analyze.diagnosis import prompt
    from engine.analyze.finding import Finding
    from ui.analyze_panel import recorded

    fs = [Finding("stalled", "warning", "No validated improvement for 3 steps (best 0.5)", "Try another way.", id="F1")]
    call = {"messages": prompt("collect words", fs), "answer": "1. Change the approach. [F1]"}
    out = recorded(call)
    assert out["findings"] == [{"id": "F1", "title": "No validated improvement for 3 steps (best 0.5)"}]
    assert out["items"][0]["cites"] == ["F1"]


def test_a_big_runs_findings_are_computed_when_asked_and_kept_until_asked_again(live):
    """Over ON_DEMAND_ABOVE metric calls the findings read every evaluation, seconds at 10,000
    candidates × 500 examples: the page draws a button instead, and keeps what it found until
    the run moved on and it is asked again."""
    import streamlit as st

    from ui.analyze_panel import ON_DEMAND_ABOVE

    db, run_id = live
    repo.bump_run(db, run_id, metric_calls=ON_DEMAND_ABOVE)
    at = open_page("pages/dashboard.py", run=run_id)
    assert "F1 · warning" not in _markdown(at)
    assert any("computed when asked" in c.value for c in at.caption)
    next(b for b in at.button if b.key == K.ANALYZE_ASK).click().run()
    assert "degenerate frontier member" in _markdown(at)
    repo.bump_run(db, run_id, steps_done=1)  # the run moved on: the findings stay, and can be asked again
    st.cache_data.clear()
    at.run()
    assert "degenerate frontier member" in _markdown(at)
    assert next(b for b in at.button if b.key == K.ANALYZE_ASK).label == "Analyze again"
