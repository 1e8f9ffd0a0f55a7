"""Page logic with Streamlit's AppTest (no browser): every page renders a synthetic run without an
exception, untrusted text stays text, the new-run form validates field by field and keeps drafts."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.config import LOCAL_MODEL
from tests.support.synthetic import generate_run
from tests.support.synthetic_live import apply_veto
from tests.support.studio import open_page, studio_database
from ui import keys as K, start

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 60


@pytest.fixture
def studio(tmp_path, monkeypatch):
    db = studio_database(tmp_path, monkeypatch)
    run_id = generate_run(db, n_candidates=40, n_val=12, n_train=20)
    return db, run_id



def _open(page: str, **params) -> AppTest:
    return open_page(page, who=None, **params)


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    parts += [t.value for t in at.title] + [m.label for m in at.metric] + [m.value for m in at.metric]
    return "\n".join(str(p) for p in parts)


def test_runs_page_lists_the_run(studio):
    _, run_id = studio
    at = _open("pages/runs.py")
    df = at.dataframe[0].value
    assert run_id in set(df["id"]) and "open" in df.columns
    assert at.button(key=K.RUNS_DUPLICATE).disabled  # nothing selected yet


def test_dashboard_shows_status_budget_kpis(studio):
    db, run_id = studio
    at = _open("pages/dashboard.py", run=run_id)
    text = _texts(at)
    assert "completed" in text and "Best val score" in text and "Speed-up" in text
    assert any("binds first" in p.text for p in at.get("progress")) if at.get("progress") else True
    cand_table = at.dataframe(key=K.DASH_TABLE).value
    assert "rejected" not in set(cand_table["status"])  # rejected proposals filtered out by default
    assert cand_table["val score"].dropna().is_monotonic_decreasing  # best first; unvalidated last


def test_dashboard_says_a_python_run_waits_for_its_process(studio):
    from storage import repo

    db, run_id = studio
    repo.transition_run(db, run_id, "running", "")  # the finished synthetic run, continued, then paused
    repo.transition_run(db, run_id, "paused", "paused: interrupted in Python (Ctrl-C)")
    repo.set_run_fields(db, run_id, attached_to="python:host:1:abc", lease_owner=None, lease_expires_at=None)
    at = _open("pages/dashboard.py", run=run_id)
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Waiting for its Python process") and f'resume="{run_id}"' in w for w in warnings), warnings


def test_a_proposal_still_waiting_for_its_reflection_is_not_counted_as_a_failed_one(studio, capsys):
    """Live, a step's proposals are counted when their reflection is sent: until it answers, the
    rates are over the answered ones and the dashboard says how many are still reflecting."""
    import streamlit as st

    from engine.cli.run import print_summary
    from storage import lm_calls, repo
    from storage.models import LMCall

    db, run_id = studio
    run = repo.get_run(db, run_id)
    parsed, total, improved = run.proposals_parsed, run.proposals_total, run.proposals_improved
    repo.transition_run(db, run_id, "running", "")
    for _ in range(2):  # two proposals of the step in flight, their reflections sent
        repo.bump_run(db, run_id, proposals_total=1)
        lm_calls.start_lm_call(db, LMCall(run_id=run_id, purpose="reflection", model="m", messages=[]))
    at = _open("pages/dashboard.py", run=run_id)
    line = next(m.value for m in at.markdown if "**parsed**" in m.value)
    assert f"{total + 2} proposals (2 waiting for the reflection LM)" in line
    assert f"**parsed** {parsed}/{total} ({parsed / total:.0%})" in line
    kpi = next(m for m in at.metric if m.label == "Improved")
    assert (kpi.value, kpi.delta) == (f"{improved} / {total}", "+2 reflecting")
    print_summary(db, run_id)  # python -m engine status RUN says the same
    assert (f"proposals {total + 2} (2 waiting for the reflection LM): of the {total} answered, parsed {parsed / total:.0%},"
            in capsys.readouterr().out)
    repo.transition_run(db, run_id, "paused", "by ana")  # paused: nothing is reflecting any more
    st.cache_data.clear()  # the run row as it is now, not as the live cache kept it for a second
    at = _open("pages/dashboard.py", run=run_id)
    assert "waiting for the reflection LM" not in next(m.value for m in at.markdown if "**parsed**" in m.value)


def test_the_speed_up_says_it_is_rough_when_the_local_model_reflects(studio):
    import streamlit as st

    from storage import repo

    db, run_id = studio
    speedup = next(m for m in _open("pages/dashboard.py", run=run_id).metric if m.label == "Speed-up")
    assert "local model" not in speedup.help  # a hosted LM answers a step's reflections at once
    config = repo.get_run(db, run_id).config
    repo.set_run_fields(db, run_id, config={**config, "reflection_lm": {**config["reflection_lm"], "model": LOCAL_MODEL}})
    st.cache_data.clear()  # the run as it is now, not as the live cache kept it for a second
    speedup = next(m for m in _open("pages/dashboard.py", run=run_id).metric if m.label == "Speed-up")
    assert "one request at a time" in speedup.help


def test_dashboard_shows_the_held_out_audit(studio):
    from storage import repo

    db, run_id = studio
    repo.set_run_fields(db, run_id, best_val_mean=0.9, test_mean=0.75, seed_test_mean=0.5, test_cost_usd=0.0123)
    text = _texts(_open("pages/dashboard.py", run=run_id))
    assert ("held-out test: seed 0.5000 → best 0.7500; validation 0.9000, validation–test gap +0.1500; "
            "test pass LM cost $0.0123, outside the budget. The search never saw the test set.") in text


def test_dashboard_unknown_run_says_so(studio):
    at = _open("pages/dashboard.py", run="rnope")
    assert any("no run with id" in e.value for e in at.error)


def test_candidate_page_shows_text_not_html(studio):
    db, run_id = studio
    from storage import queries

    best = queries.run_overview(db, run_id)["best_candidate_id"]
    at = _open("pages/candidate.py", run=run_id, candidate=best)
    codes = [c.value for c in at.code]
    content = queries.candidate_detail(db, best)["candidate"]["content"]
    assert all(text in codes for text in content.values())  # full text of every component, as code blocks
    assert any("<script>alert('not html')</script>" in c for c in codes)  # the reflection prompt, verbatim
    assert any("<b>Not bold</b>" in t.value for t in at.text)  # comments are st.text
    assert any(c.language == "diff" for c in at.code)


def test_candidate_page_unknown_candidate_falls_back(studio):
    _, run_id = studio
    at = _open("pages/candidate.py", run=run_id, candidate="cnope")
    assert any("has no candidate" in w.value for w in at.warning)


def test_lineage_page_renders(studio):
    _, run_id = studio
    at = _open("pages/lineage.py", run=run_id)
    assert at.toggle(key=K.LIN_SHOW_REJECTED).value is False
    at.toggle(key=K.LIN_SHOW_REJECTED).set_value(True).run()
    assert not at.exception


def test_new_run_errors_sit_next_to_fields_and_nothing_is_lost(studio):
    at = _open("pages/new_run.py")
    at.toggle(key="new_plain_editor").set_value(True).run()
    at.text_input(key=K.NEW_NAME).set_value("")
    at.text_area(key=K.NEW_SEED_TEXT).set_value("my seed text")
    at.number_input(key=K.NEW_MAX_CALLS).set_value(1)
    at.button(key=K.NEW_VALIDATE).click().run()
    errors = [e.value for e in at.error]
    assert any("must not be empty" in e for e in errors)  # the name field
    assert at.text_area(key=K.NEW_SEED_TEXT).value == "my seed text"  # kept after the failed validation
    at.text_input(key=K.NEW_NAME).set_value("ok").run()
    at.button(key=K.NEW_VALIDATE).click().run()
    assert any("too small for even one step" in e.value for e in at.error)  # budget message at the budget field
    # a page switch and back keeps the draft
    at.switch_page(str(Path(APP).parent / "pages/runs.py")).run()
    at.switch_page(str(Path(APP).parent / "pages/new_run.py")).run()
    assert at.text_input(key=K.NEW_NAME).value == "ok"
    assert at.text_area(key=K.NEW_SEED_TEXT).value == "my seed text"


def test_new_run_loads_a_builtin_example_and_submits(studio):
    db, _ = studio
    at = _open("pages/new_run.py")
    name = next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options if "iso_date_regex" in o)
    at.selectbox(key=K.NEW_TEMPLATE).set_value(name).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    assert at.text_input(key=K.NEW_NAME).value == "ISO date regex"
    # what the example sets and the form has no field for is listed, and kept
    assert any("max_score = 1.0" in c.value and "max_tokens = 200" in c.value for c in at.caption)
    # its reflection LM is the built-in local model, which does not answer a step's reflections at once
    assert any("estimate is optimistic: it answers one request at a time" in c.value for c in at.caption)
    at.text_input(key=K.NEW_MODEL).set_value("openai/gpt-4.1-mini").run()
    assert not any("one request at a time" in c.value for c in at.caption)
    at.text_input(key=K.NEW_MODEL).set_value(LOCAL_MODEL).run()
    assert any(getattr(b, "proto", None) is not None and "Download as TOML" in str(b.proto) for b in at.get("download_button"))
    at.selectbox(key=K.NEW_SCHEDULE).set_value("async")
    at.toggle(key=K.NEW_MERGE_SIBLINGS).set_value(True)
    at.button(key=K.NEW_SUBMIT).click().run()
    from storage import queries, repo

    # nobody named yet (local mode): no anonymous run that nobody could steer; said by the button
    assert "ISO date regex" not in set(queries.runs_table(db)["name"]) and [e.value for e in at.error] == [start.NO_NAME]
    at.session_state[K.WHO] = "ana"
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not at.exception and not at.error

    runs = queries.runs_table(db)
    assert "ISO date regex" in set(runs["name"])
    assert runs.loc[runs["name"] == "ISO date regex", "status"].iloc[0] == "queued"
    run = repo.get_run(db, runs.loc[runs["name"] == "ISO date regex", "id"].iloc[0])
    search = run.config["search"]
    assert (search["schedule"], search["merge_siblings"], search["max_score"]) == ("async", True, 1.0)
    assert search["improvement"] == "improvement_or_equal" and run.config["reflection_lm"]["max_tokens"] == 200


def test_a_read_over_the_time_limit_is_an_error_on_the_page_not_a_traceback(studio, monkeypatch):
    run_id = generate_run(studio[0], n_candidates=80, n_val=40, seed=3)  # big enough for the limit to bite
    monkeypatch.setenv("REFRACT_STUDIO_QUERY_SECONDS", "0.000001")  # every statement is over the limit
    at = _open("pages/dashboard.py", run=run_id)  # its frontier reads every validation score
    errors = [e.value for e in at.error]
    assert any("could not answer" in e and "REFRACT_STUDIO_QUERY_SECONDS" in e for e in errors), errors


def test_a_merge_says_which_path_wrote_it_on_its_page_and_in_the_lineage(studio):
    db, run_id = studio
    from storage import queries, repo
    from ui.lineage import lineage_figure

    cand = next(c for c in repo.list_candidates(db, run_id) if len(c.parent_ids) == 1 and c.origin == "reflection")
    cand.origin, cand.merge_path = "merge", "three_way"
    repo.save_candidate(db, cand)
    at = _open("pages/candidate.py", run=run_id, candidate=cand.id)
    assert "three-way merge over the common ancestor, no LM call" in _texts(at)
    rows = queries.candidate_rows(db, run_id)
    fig = lineage_figure(rows, None, [], show_rejected=True)
    hovers = [str(h) for trace in fig.data if trace.hovertext is not None for h in trace.hovertext if cand.id in str(h)]
    assert any("no LM call" in h for h in hovers)


@pytest.mark.parametrize("page,title,how", [
    ("pages/candidate.py", "Candidate", "Open a candidate from a run's dashboard"),
    ("pages/compare.py", "Compare candidates", "its compare link carries"),
    ("pages/explain.py", "Step explained", "Open a step from a run's dashboard"),
    ("pages/lineage.py", "Lineage", "its lineage link carries"),
])
def test_a_run_page_opened_without_a_run_says_how_to_get_there(studio, page, title, how):
    at = _open(page)
    assert [t.value for t in at.title] == [title]
    assert how in at.info[0].value


def test_a_run_page_opened_with_an_unknown_run_says_so(studio):
    at = _open("pages/lineage.py", run="rnowhere")
    assert "There is no run with id rnowhere " in at.error[0].value


def test_the_empty_runs_page_says_what_a_run_is_and_opens_an_example_in_the_form(tmp_path, monkeypatch):
    """A newcomer's first page: what a run is, and every built-in example one click from a filled-in
    form that says what to do next."""
    from ui import welcome

    studio_database(tmp_path, monkeypatch)
    at = open_page("pages/runs.py")
    assert welcome.INTRO in _texts(at)
    cards = welcome.examples()
    assert {c.slug for c in cards} >= {"iso_date_regex", "ticket_routing", "toy_words"}
    ticket = next(c for c in cards if c.slug == "ticket_routing")
    assert "no Python" in ticket.how and ticket.name in _texts(at)
    assert next(c for c in cards if c.slug == "iso_date_regex").how == "a Python evaluator over 16 training examples"
    at.button(key=K.RUNS_EXAMPLE.format(slug="ticket_routing")).click().run()
    assert not at.exception
    at.switch_page(str(Path(APP).parent / "pages/new_run.py")).run()
    assert at.text_input(key=K.NEW_NAME).value == "Ticket routing prompt"
    note = next(s.value for s in at.info if "Loaded the example" in s.value)
    assert "**Preview on three examples**" in note  # a prompt run's first button, by its label
    at.button(key=K.NEW_RESET).click().run()  # the form cleared: the note goes with the example
    assert not any("Loaded the example" in s.value for s in at.info)


def test_the_empty_runs_page_without_the_examples_folder_still_offers_the_form(tmp_path, monkeypatch):
    from ui import run_form

    studio_database(tmp_path, monkeypatch)
    monkeypatch.setattr(run_form, "list_templates", lambda *a, **k: {})  # installed without examples/
    at = open_page("pages/runs.py")
    assert not [h for h in at.subheader if h.value == "Start from an example"]
    assert [h.value for h in at.subheader] == ["Other ways in"]


def test_the_sidebars_pages_open_the_run_last_opened(studio):
    """The sidebar's links carry no ?run=: a run-scoped page opened from it shows the run this
    session opened last (and puts it in its link) instead of asking for one; a deleted run is
    forgotten."""
    import streamlit as st

    from storage import admin, repo
    from ui import nav

    db, run_id = studio
    at = _open("pages/dashboard.py", run=run_id)
    name = repo.get_run(db, run_id).name
    for page, title in (("lineage", f"Lineage · {name}"), ("explain", "Step explained"),
                        ("compare", f"Compare candidates · {name}")):
        at.query_params.clear()  # as the sidebar's link opens it
        at.switch_page(str(Path(APP).parent / nav.PAGE_FILES[page][0])).run()
        assert not at.exception and at.query_params.get(K.QP_RUN) == run_id, page
        assert at.title[0].value == title
        assert not [i for i in at.info if "Open a" in i.value]  # not the "open a run first" note
    other = generate_run(db, n_candidates=10, n_val=4, n_train=8)
    at.query_params.clear()
    at.query_params[K.QP_RUN] = other  # a link to another run: that one is remembered now
    at.switch_page(str(Path(APP).parent / "pages/lineage.py")).run()
    at.query_params.clear()
    at.switch_page(str(Path(APP).parent / "pages/dashboard.py")).run()
    assert at.query_params.get(K.QP_RUN) == other
    admin.delete_run(db, other, "ana", "a test")
    st.cache_data.clear()
    at.run()  # its link now names a run that is gone: said, and forgotten
    assert any("no run with id" in e.value for e in at.error)
    at.query_params.clear()
    at.run()
    assert at.selectbox(key=K.DASH_RUN).options  # the dashboard's run picker again


def test_a_queued_runs_dashboard_says_how_to_start_a_worker_with_commands_as_code(tmp_path, monkeypatch):
    from engine.runs import submit_run
    from tests.support.harness import toy_config

    db = studio_database(tmp_path, monkeypatch)
    run_id = submit_run(db, toy_config())  # no engine worker has ever run on this database
    line = next(m.value for m in _open("pages/dashboard.py", run=run_id).markdown if "waiting for a worker" in m.value)
    assert "start the studio with `make run` or `python -m engine worker`" in line  # not escaped: drawn as code


def test_a_partly_validated_candidate_never_outranks_the_best_and_shows_its_coverage(studio):
    """A pass cut short after 8 of 24 examples at 1.000 sorts below the real best (0.972 on all 24)."""
    import pandas as pd

    from storage import repo
    from ui import analysis

    cands = pd.DataFrame({"id": ["best", "cut", "seed", "rejected"], "val_mean": [0.972, 1.0, 0.5, None],
                          "val_count": [24, 8, 24, 0], "step": [3, 4, 0, 4]})
    ranked = analysis.ranked(cands, 24)
    assert list(ranked["id"]) == ["best", "seed", "cut", "rejected"]
    assert list(ranked["validated"]) == ["24 of 24", "24 of 24", "8 of 24 · mean 1.000", ""]
    assert ranked["full_mean"].isna().tolist() == [False, False, True, True]

    db, run_id = studio
    accepted = [c for c in repo.list_candidates(db, run_id, ["accepted"]) if c.origin != "seed"]
    cut = accepted[0]
    cut.val_mean, cut.val_count, cut.val_cut_short = 1.0, 3, "stopped early after 3 of 12 examples"
    repo.save_candidate(db, cut)
    at = _open("pages/dashboard.py", run=run_id)
    table = next(d.value for d in at.dataframe if "validated on" in d.value.columns)
    assert table.iloc[0]["id"] == repo.get_run(db, run_id).best_candidate_id != cut.id
    row = table[table["id"] == cut.id].iloc[0]
    assert pd.isna(row["val score"]) and row["validated on"] == "3 of 12 · mean 1.000"
    page = _open("pages/candidate.py", run=run_id, candidate=cut.id)
    assert any(m.label == "Validation score · 3 of 12 only" and "partly validated" in m.help for m in page.metric)
    assert page.selectbox(key="cand_select").format_func(cut.id).endswith("· 1.000 on 3 of 12")


def test_a_vetoed_candidates_page_no_longer_says_it_is_on_the_frontier(studio):
    import streamlit as st

    from engine.commands import send_command
    from storage import repo
    from ui import data

    db, run_id = studio
    repo.transition_run(db, run_id, "running", "")  # a live run, steered
    st.cache_data.clear()
    view = data.frontier_of(db.url, data.run_overview(db.url, run_id))
    member = next(c for c in view.members if c != repo.get_run(db, run_id).best_candidate_id)
    at = _open("pages/candidate.py", run=run_id, candidate=member)
    badges = next(m.value for m in at.markdown if "-badge[" in m.value)
    assert f"frontier · best on {int(view.best_on[member])} of 12 examples" in badges
    cmd = send_command(db, run_id, "veto", {"candidate_id": member}, author="ana")
    apply_veto(db, run_id, member)  # as the engine applies it: the flag and the frontier without it
    repo.finish_command(db, cmd, "applied", f"{member} vetoed", 9)
    st.cache_data.clear()
    at.run()
    badges = next(m.value for m in at.markdown if "-badge[" in m.value)
    assert "frontier" not in badges and "vetoed" in badges


def test_best_on_says_examples_and_objectives_apart():
    import pandas as pd

    from ui.analysis import FrontierView

    matrix = pd.DataFrame([[1.0] * 8], index=["c1"], columns=[f"e{i}" for i in range(8)])
    empty = pd.Series(dtype="float64")
    plain = FrontierView(matrix, empty, pd.Series({"c1": 7}), empty, ["c1"])
    assert plain.best_on_text("c1") == "best on 7 of 8 examples"
    typed = FrontierView(matrix, empty, pd.Series({"c1": 10}), empty, ["c1"],
                         held={"c1": {"examples": 8, "objectives": 2, "pairs": 0}})
    assert typed.best_on_text("c1") == "best on 8 of 8 examples, 2 objectives"  # was "best on 10"
