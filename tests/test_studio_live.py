"""A live view people can trust: the studio's filters, frontier, charts, links and controls on
runs that move, fail or wait (each test reproduces a bug seen on a live run).

Runs are real: the toy task of tests/support/toy.py through the engine, with the scripted LM.
Pages are driven with AppTest (``run_every`` never fires there: each ``at.run()`` is a refresh).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.commands import AlreadySent, send_command
from engine.records.export import export_run
from engine.runs import submit_run
from tests.support.scripted_lm import install_script
from storage import leases, queries, repo
from tests.support.synthetic import generate_run
from tests.support import toy
from tests.support.harness import run_optimizer, toy_config
from tests.support.studio import open_page, studio_database
from ui import analysis, form_checks, keys as K, run_form, submission

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 60


@pytest.fixture
def studio(tmp_path, monkeypatch):
    install_script(toy.script)
    return studio_database(tmp_path, monkeypatch)



def _rerun(at: AppTest) -> AppTest:
    """A refresh of the open page, past the studio's read caches (a live fragment's next tick)."""
    import streamlit as st

    st.cache_data.clear()
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    return at


def _button(at: AppTest, base_key: str):
    found = [b for b in at.button if str(b.key).split(submission.SEP)[0] == base_key]
    assert len(found) == 1, (base_key, [b.key for b in at.button])
    return found[0]


def _widget(widgets, base_key: str):
    """A widget by its base key: a following filter's key also names its options (ui.filters)."""
    found = [w for w in widgets if str(w.key).split(submission.SEP)[0] == base_key]
    assert len(found) == 1, (base_key, [w.key for w in widgets])
    return found[0]


def _multiselect(at: AppTest, base_key: str):
    return _widget(at.multiselect, base_key)


def _continue(db, run_id: str, tmp_path, calls: int) -> str:
    send_command(db, run_id, "budget", {"max_metric_calls": calls}, "test")
    send_command(db, run_id, "resume", {}, "test")
    return run_optimizer(db, run_id, tmp_path)


# ---------------------------------------------------------------- 1 · filters follow the run


def test_candidate_filters_take_in_origins_statuses_and_steps_that_appear_later(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 60}))
    send_command(db, run_id, "pause", {}, "ana")  # applied right after the seed's validation pass
    run_optimizer(db, run_id, tmp_path)
    at = open_page("pages/dashboard.py", run=run_id)
    assert _multiselect(at, K.DASH_ORIGIN).value == ["seed"]
    send_command(db, run_id, "resume", {}, "ana")
    run_optimizer(db, run_id, tmp_path)
    at = _rerun(at)
    cands = queries.candidate_rows(db, run_id)
    assert {"reflection"} <= set(cands["origin"])
    assert set(_multiselect(at, K.DASH_ORIGIN).value) == set(cands["origin"])
    assert "accepted" in _multiselect(at, K.DASH_STATUS).value
    assert "rejected" not in _multiselect(at, K.DASH_STATUS).value  # still left out by default
    assert _widget(at.slider, K.DASH_STEPS).value[1] == max(int(cands["step"].max()), 1)
    shown = at.dataframe(key=K.DASH_TABLE).value
    assert set(cands.loc[cands["status"] != "rejected", "id"]) == set(shown["id"])


def test_an_origin_the_person_removed_stays_removed(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 30}))
    run_optimizer(db, run_id, tmp_path)
    at = open_page("pages/dashboard.py", run=run_id)
    _multiselect(at, K.DASH_ORIGIN).unselect("seed").run()
    _continue(db, run_id, tmp_path, 60)
    at = _rerun(at)
    assert "seed" not in _multiselect(at, K.DASH_ORIGIN).value


def test_a_browser_still_showing_the_old_options_cannot_hide_a_new_one(studio, tmp_path):
    """A live page's browser sends back its widgets' values with each refresh; one still drawing
    the filter of an earlier render sends the selection without the origin that appeared since.
    That must not count as the person removing it (it hid "reflection" for good in a loaded full
    run). The stale values are replayed as the browser sends them (AppTest's private ``_run``
    takes widget states: its public API only sends the current ones)."""
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 60}))
    send_command(db, run_id, "pause", {}, "ana")
    run_optimizer(db, run_id, tmp_path)
    at = open_page("pages/dashboard.py", run=run_id)
    assert _multiselect(at, K.DASH_ORIGIN).value == ["seed"]
    stale = at._tree.get_widget_states()  # what the browser drew: origins ["seed"]
    send_command(db, run_id, "resume", {}, "ana")
    run_optimizer(db, run_id, tmp_path)
    at = _rerun(at)
    assert "reflection" in _multiselect(at, K.DASH_ORIGIN).value
    import streamlit as st

    st.cache_data.clear()
    at._run(widget_state=stale)
    assert "reflection" in _multiselect(at, K.DASH_ORIGIN).value
    assert "accepted" in _multiselect(at, K.DASH_STATUS).value
    steps = _widget(at.slider, K.DASH_STEPS).value
    assert steps[1] == max(int(queries.candidate_rows(db, run_id)["step"].max()), 1)  # still follows the last step
    # the person removing an origin they see still counts
    _multiselect(at, K.DASH_ORIGIN).unselect("reflection").run()
    _widget(at.slider, K.DASH_STEPS).set_value((0, 1)).run()
    at = _rerun(at)
    assert "reflection" not in _multiselect(at, K.DASH_ORIGIN).value
    assert _widget(at.slider, K.DASH_STEPS).value == (0, 1)


# ---------------------------------------------------------------- 2 · the engine's frontier


def _export_frontier(db, run_id: str) -> set[str]:
    doc = export_run(db, run_id)
    return set().union(*(set(f["candidate_ids"]) for f in doc["frontier"]))


def test_frontier_is_the_engines_when_the_dataset_is_the_validation_set(studio, tmp_path):
    db = studio
    install_script(toy.endless)  # once solved, only non-improving proposals: rejected children
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 150, "stop_at_score": None}))  # no valset
    run_optimizer(db, run_id, tmp_path)
    cands = queries.candidate_rows(db, run_id)
    rejected = set(cands.loc[cands["status"] == "rejected", "id"])
    scores = queries.val_scores(db, run_id)
    assert rejected & set(scores["candidate_id"]), "the toy run should have rejected children scored on val examples"
    view = analysis.frontier(scores, cands)
    assert set(view.members) == _export_frontier(db, run_id)
    assert not (set(view.matrix.index) & rejected)
    at = open_page("pages/dashboard.py", run=run_id)
    size = next(m for m in at.metric if m.label == "Frontier size")
    assert int(size.value) == len(_export_frontier(db, run_id))


def test_no_mark_where_every_candidate_ties():
    import pandas as pd

    from ui import charts

    cands = pd.DataFrame({"id": ["a", "b"], "status": ["accepted", "accepted"], "vetoed": [False, False]})
    scores = pd.DataFrame({"candidate_id": ["a", "a", "b", "b"], "example": ["x", "y", "x", "y"],
                           "score": [0.0, 1.0, 0.0, 0.5]})
    view = analysis.frontier(scores, cands)
    rows = charts.heatmap_rows(view, pd.Series({"a": 0.5, "b": 0.25}))
    m = view.matrix.loc[rows]
    holds = charts.heatmap_holds(view, m)
    assert holds.loc["a", "y"] and not holds.loc["a", "x"] and not holds.loc["b", "x"] and not holds.loc["b", "y"]
    fig = charts.frontier_heatmap(view, m)
    # one diamond, in a's row and y's column, all in a single path over the heatmap
    (shape,) = fig.layout.shapes
    assert shape.path.count("Z") == 1
    row, col = list(fig.data[0].customdata[:, 0]).index("a"), list(fig.data[0].text[0]).index("y")
    assert shape.path.startswith(f"M{col},{row - 0.3:g}")
    assert fig.layout.yaxis.ticktext[row].split(" ")[0] == "a" and fig.layout.xaxis.ticktext[col] == "y"


# ---------------------------------------------------------------- 3 · one click, one command


def test_a_repeated_client_token_queues_nothing(db):
    run_id = generate_run(db, n_candidates=12, n_val=4, n_train=4, status="running")
    cid = send_command(db, run_id, "pause", {}, "ana", client_token="tok-0123456789")
    with pytest.raises(AlreadySent) as err:
        send_command(db, run_id, "pause", {}, "ana", client_token="tok-0123456789")
    assert err.value.command_id == cid
    assert [c.id for c in repo.list_commands(db, run_id) if c.kind == "pause"] == [cid]
    # the same token on another run is another submission
    other = generate_run(db, n_candidates=12, n_val=4, n_train=4, seed=5, status="running")
    send_command(db, other, "pause", {}, "ana", client_token="tok-0123456789")


def test_a_double_click_on_send_the_edit_makes_one_command(studio, tmp_path):
    db = studio
    run_id = generate_run(db, n_candidates=20, n_val=4, n_train=6, status="running")
    seed = next(c for c in repo.list_candidates(db, run_id) if c.origin == "seed")
    at = open_page("pages/candidate.py", run=run_id, candidate=seed.id)
    key = K.EDIT_TEXT.format(cand=seed.id, i=0)
    area = at.text_area(key=key)
    area.set_value(area.value + " (edited)")
    at.text_input(key=K.EDIT_REASON.format(cand=seed.id)).set_value("tighter")
    stale = _button(at, K.EDIT_SEND)
    stale.click().run()
    # the second click of a double click: the browser still shows the old button and the edited text
    at.text_area(key=key).set_value(area.value)
    at.text_input(key=K.EDIT_REASON.format(cand=seed.id)).set_value("tighter")
    stale.click().run()
    edits = [c for c in repo.list_commands(db, run_id) if c.kind == "edit"]
    assert len(edits) == 1 and edits[0].client_token


# ---------------------------------------------------------------- 6, 7, 8 · charts, scales, links


def test_best_line_ends_at_the_best_with_a_human_edit_between_steps(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 30}))
    run_optimizer(db, run_id, tmp_path)
    best = repo.get_run(db, run_id).best_candidate_id
    solved = " ".join(w["word"] for w in toy.dataset(6))
    assert repo.get_run(db, run_id).best_val_mean < 1.0
    # continued, then the edit and a pause applied at the same step boundary: no step after the edit
    for kind, payload in (("budget", {"max_metric_calls": 200}), ("resume", {}),
                          ("edit", {"candidate_id": best, "content": solved}), ("pause", {})):
        send_command(db, run_id, kind, payload, "ana", "all the words")
    run_optimizer(db, run_id, tmp_path)
    assert repo.get_run(db, run_id).status == "paused"
    ov = queries.run_overview(db, run_id)
    assert ov["best_val_mean"] == pytest.approx(1.0)
    cands, steps = queries.candidate_rows(db, run_id), queries.step_rows(db, run_id)
    progress = analysis.score_progress(ov, cands, steps, 6)
    assert progress["best"].iloc[-1] == pytest.approx(ov["best_val_mean"])
    assert progress["metric_calls"].iloc[-1] == ov["metric_calls"]
    assert progress["best"].is_monotonic_increasing


def test_candidate_page_shows_means_and_says_what_they_are_over(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 60}))
    run_optimizer(db, run_id, tmp_path)
    child = next(c for c in repo.list_candidates(db, run_id) if c.origin == "reflection" and c.minibatch_keys)
    at = open_page("pages/candidate.py", run=run_id, candidate=child.id)
    n = len(child.minibatch_keys)
    mb = next(m for m in at.metric if m.label.startswith("Minibatch score"))
    assert mb.label == f"Minibatch score · mean of {n}"
    assert float(mb.value) == pytest.approx(child.minibatch_score / n, abs=5e-4)
    assert 0.0 <= float(mb.value) <= 1.0  # the scale of the validation score, not a sum
    assert any(m.label.startswith("Validation score · mean of") for m in at.metric)


def test_best_links_name_their_candidate(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, budget={"max_metric_calls": 30}))
    run_optimizer(db, run_id, tmp_path)
    best = repo.get_run(db, run_id).best_candidate_id
    at = open_page("pages/candidate.py", run=run_id)  # a link without a candidate: the best is shown …
    assert at.query_params[K.QP_CANDIDATE] == best  # … and the URL now names it
    at = open_page("pages/dashboard.py", run=run_id)
    links = [el for el in at.get("page_link") if "Best" in el.proto.label]
    assert len(links) == 1 and best in links[0].proto.label and f"candidate={best}" in links[0].proto.query_string


# ---------------------------------------------------------------- 9, 10 · the new-run form


def test_out_of_range_budgets_are_refused_by_name():
    draft = run_form.default_draft("scripted/toy")
    for value, bad in ((-5, True), (10**11, True), (0, False), (500, False)):
        draft[K.NEW_MAX_CALLS] = value
        budget, problems = form_checks.budget(draft)
        assert bool(problems) == bad, (value, problems)
        if bad:
            assert problems[0].startswith("budget.max_metric_calls: ") and "out of range" in problems[0]
    draft[K.NEW_MAX_CALLS], draft[K.NEW_MAX_SECONDS] = 100, 10**11
    assert form_checks.budget(draft)[1][0].startswith("budget.max_seconds: ")
    draft[K.NEW_MAX_SECONDS] = 600
    assert form_checks.budget(draft)[0]["max_seconds"] == 600


def test_start_run_with_a_bad_budget_starts_nothing_and_says_so_by_the_button(studio):
    at = open_page("pages/new_run.py")
    at.selectbox(key=K.NEW_TEMPLATE).set_value(next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options
                                                    if "toy_words" in o)).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    at.number_input(key=K.NEW_MAX_CALLS).set_value(-5)
    at.button(key=K.NEW_SUBMIT).click().run()
    assert queries.runs_table(studio).empty
    errors = [e.value for e in at.error]
    assert any("out of range" in e for e in errors)
    assert any(e.startswith("Not started: 1 problem") and "max metric calls" in e for e in errors)
    at.number_input(key=K.NEW_MAX_CALLS).set_value(40).run()  # fixed: the message goes at once
    assert not any("out of range" in e.value for e in at.error)
    assert not any(e.value.startswith("Not started") for e in at.error)


def test_paste_text_chosen_with_nothing_pasted_yet_is_not_an_error_and_line_errors_name_the_text():
    draft = run_form.default_draft("scripted/toy")
    draft[K.NEW_DATA_SOURCE] = run_form.DATA_SOURCES[2]
    assert run_form.dataset_rows(draft, require=False) == (None, None)
    draft[K.NEW_DATA_TEXT] = '{"a": 1}\n{"a": 2}\n{"a": 3}\nnot json\n'
    _, err = run_form.dataset_rows(draft)
    assert err.startswith("dataset: the pasted text, line 4: ")


# ---------------------------------------------------------------- 11 · runs that fail or wait


def test_stop_cancels_a_queued_run_at_once(db):
    run_id = submit_run(db, toy_config(6))
    cid = send_command(db, run_id, "stop", {}, "ana", "wrong dataset")
    run = repo.get_run(db, run_id)
    assert run.status == "stopped" and "cancelled by ana" in run.status_reason
    cmd = next(c for c in repo.list_commands(db, run_id) if c.id == cid)
    assert cmd.status == "applied" and "cancelled" in cmd.result
    assert leases.claim_run(db, "w", 30) is None  # no worker picks it up any more


def test_a_run_that_ends_closes_its_pending_pause_and_stop(studio, tmp_path):
    db = studio
    run_id = submit_run(db, toy_config(6, evaluator="def evaluate(candidate, example):\n    raise ValueError('x')\n"))
    leases.claim_run(db, "w0", 30, run_id=run_id)  # a worker has it: the stop waits for the engine
    send_command(db, run_id, "stop", {}, "ana")
    send_command(db, run_id, "pause", {}, "ana")
    leases.release_run(db, run_id, "w0")
    run_optimizer(db, run_id, tmp_path)
    assert repo.get_run(db, run_id).status in ("failed", "stopped", "completed")
    assert not [c for c in repo.list_commands(db, run_id) if c.status == "pending" and c.kind in ("stop", "pause")]


def test_runs_page_says_why_a_queued_run_waits(studio):
    db = studio
    busy = submit_run(db, toy_config(6, name="first"))
    waiting = submit_run(db, toy_config(6, name="second"))
    leases.claim_run(db, "w1", 30, run_id=busy)
    leases.worker_heartbeat(db, "w1", 1, "here", busy)
    at = open_page("pages/runs.py")
    table = at.dataframe[0].value
    note = table.set_index("id").at[waiting, "note"]
    assert "1 in the queue" in note and f"busy with run {busy}" in note
