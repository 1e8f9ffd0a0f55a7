"""Every mistake on the New run form is stopped at its own field, in the form's words, once, and
starts nothing (AppTest on the real page): an evaluator the mode cannot call, a budget out of
range among four, an empty seed with an empty objective, a bad JSONL line, a minibatch of 0."""

from __future__ import annotations

import streamlit as st

import engine  # noqa: F401  first: offline price map
from storage import repo
from tests.support.studio import open_page, studio_database
from ui import keys as K, run_form


def _form(tmp_path, monkeypatch, **fields):
    """The page with the toy_words example loaded, then ``fields`` typed in."""
    db = studio_database(tmp_path, monkeypatch)
    st.cache_data.clear()
    at = open_page("pages/new_run.py")
    at.selectbox(key=K.NEW_TEMPLATE).set_value(next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options
                                                    if "toy_words" in o)).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    at.toggle(key="new_plain_editor").set_value(True).run()
    for key, value in fields.items():
        at.session_state[key] = value
    at.run()
    return db, at


def _position(at, find) -> int:
    return next(i for i, node in enumerate(at.main) if find(node))


def _field(key):
    return lambda n: getattr(n, "key", None) == key


def _message(text):
    return lambda n: n.type == "error" and text in n.value


def _start(at):
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not at.exception, at.exception[0].message if at.exception else ""


def test_an_evaluator_the_mode_cannot_call_is_refused_under_the_evaluator(tmp_path, monkeypatch):
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_EVALUATOR: "def evaluate(candidate):\n    return 1.0\n"})
    _start(at)
    assert repo.list_runs(db) == []
    errors = [e.value for e in at.error]
    assert not any("could not be stored" in e for e in errors), errors  # it is no storage failure
    shown = _position(at, _message("evaluate() takes 1 argument(s), but this run has a dataset"))
    assert _position(at, _field(K.NEW_EVALUATOR)) < shown < _position(at, lambda n: n.type == "subheader"
                                                                      and n.value == "3 · Dataset")


def test_a_budget_out_of_range_is_said_under_its_own_field(tmp_path, monkeypatch):
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_MAX_CALLS: -5})
    _start(at)
    assert repo.list_runs(db) == []
    shown = _position(at, _message("-5 is out of range"))
    assert _position(at, _field(K.NEW_MAX_CALLS)) < shown < _position(at, _field(K.NEW_MAX_COST))


def test_a_minibatch_of_0_is_refused_not_kept_as_3(tmp_path, monkeypatch):
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_MINIBATCH: 0})
    assert at.number_input(key=K.NEW_MINIBATCH).value == 0  # as typed, not clamped back
    _start(at)
    assert repo.list_runs(db) == []
    shown = _position(at, _message("must be at least 1, not 0"))
    assert _position(at, _field(K.NEW_MINIBATCH)) < shown < _position(at, _field(K.NEW_SELECTION))


def test_an_empty_seed_with_an_empty_objective_is_said_in_the_forms_words(tmp_path, monkeypatch):
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_SEED_TEXT: "", K.NEW_OBJECTIVE: ""})
    assert any("The seed is empty, and so is the objective" in c.value for c in at.caption)
    assert not any("will write it from the objective" in c.value for c in at.caption)  # no promise it cannot keep
    _start(at)
    (msg,) = [e.value for e in at.error if "seed" in e.value and not e.value.startswith("Not started")]
    assert msg.startswith("the seed candidate is empty, and so is the objective") and "seed_candidate" not in msg


def test_a_bad_jsonl_line_is_said_once(tmp_path, monkeypatch):
    rows = '{"id": "w0", "word": "alpha"}\n{"id": "w1", "word": "bravo"}\nnot json\n'
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_DATA_SOURCE: run_form.DATA_SOURCES[2], K.NEW_DATA_TEXT: rows,
                                             K.NEW_DATA_FORMAT: "jsonl"})
    assert len([e for e in at.error if "line 3" in e.value]) == 1  # the preview says it while typing
    _start(at)
    assert len([e for e in at.error if "line 3" in e.value]) == 1  # and once after Start, under the dataset
    assert repo.list_runs(db) == []


def test_a_paste_the_browser_cut_at_the_box_limit_is_refused_saying_to_upload(tmp_path, monkeypatch):
    from ui import form_checks

    draft = run_form.default_draft("scripted/toy")
    draft[K.NEW_DATA_SOURCE], draft[K.NEW_DATA_FORMAT] = run_form.DATA_SOURCES[2], "jsonl"
    row = '{"id": "r", "word": "alpha"}\n'
    cut = (row * (form_checks.PASTE_LIMIT // len(row) + 1))[:form_checks.PASTE_LIMIT]  # what maxlength leaves
    draft[K.NEW_DATA_TEXT] = cut
    rows, err = run_form.dataset_rows(draft)
    assert rows is None and err.startswith("dataset: the paste box takes 50,000 characters") and "Upload the file" in err
    draft[K.NEW_DATA_TEXT] = "".join(f'{{"id": "r{i}", "word": "w"}}\n' for i in range(3000))  # longer: an upload, whole
    assert len(run_form.dataset_rows(draft)[0]) == 3000
    # the page gives its paste boxes the browser's maxlength (the paste itself is cut as it is inserted)
    db, at = _form(tmp_path, monkeypatch, **{K.NEW_DATA_SOURCE: run_form.DATA_SOURCES[2]})
    assert any(f"limit = {form_checks.PASTE_LIMIT}" in h.proto.body and ".st-key-new_data_text textarea" in h.proto.body
               for h in at.get("html"))
