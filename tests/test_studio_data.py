"""Studio data layer: the synthetic run, the read queries, the pure analysis / chart / form code."""

from __future__ import annotations

import json
import sys
import time

import pandas as pd
import pytest
from sqlalchemy import event

from storage import queries
from tests.support.synthetic import generate_run
from ui import analysis, charts, form_carry, form_drafts, keys as K, run_form
from ui.lineage import layout, lineage_figure


@pytest.fixture
def run(db):
    return db, generate_run(db, n_candidates=40, n_val=12, n_train=20)


def test_synthetic_run_is_deterministic(tmp_path):
    from storage.db import Database

    a, b = Database(f"sqlite:///{tmp_path}/a.db"), Database(f"sqlite:///{tmp_path}/b.db")
    a.create_all(), b.create_all()
    ra, rb = generate_run(a, 30, 8), generate_run(b, 30, 8)
    ca, cb = queries.candidate_rows(a, ra), queries.candidate_rows(b, rb)
    assert ra == rb
    assert list(ca["id"]) == list(cb["id"]) and list(ca["status"]) == list(cb["status"])
    assert queries.val_scores(a, ra)["score"].tolist() == queries.val_scores(b, rb)["score"].tolist()


def test_queries_return_plain_data(run):
    db, run_id = run
    ov = queries.run_overview(db, run_id)
    assert isinstance(ov, dict) and ov["status"] == "completed" and ov["created_at"].tzinfo is not None
    assert set(ov["cost_by_purpose"]) >= {"reflection", "merge", "task", "evaluator"}
    assert ov["cost_by_purpose"]["reflection"] > 0
    cands = queries.candidate_rows(db, run_id)
    assert len(cands) == 40 and set(cands["status"]) <= {"accepted", "rejected", "failed"}
    assert "content" not in cands.columns  # light rows: no candidate text in the table read
    scores = queries.val_scores(db, run_id)
    accepted = cands[cands["val_mean"].notna()]
    assert len(scores) == len(accepted) * 12
    steps = queries.step_rows(db, run_id)
    assert steps["index"].tolist() == sorted(steps["index"].tolist()) and isinstance(steps["events"][0], list)
    detail = queries.candidate_detail(db, ov["best_candidate_id"])
    assert detail["candidate"]["content"] and detail["lm_call"]["messages"]
    assert [e["split"] for e in detail["evaluations"]].count("val") == 12
    assert detail["comments"] and any("<b>" in c["text"] for c in detail["comments"])
    assert queries.candidate_detail(db, "nope") is None and queries.run_overview(db, "nope") is None
    assert len(queries.runs_table(db)) == 1
    log = queries.command_log(db, run_id)
    assert set(log["kind"]) == {"pin", "veto"}
    cmp = queries.compare_runs(db, [run_id])
    assert cmp["best"].is_monotonic_increasing and cmp["metric_calls"].is_monotonic_increasing
    objectives = queries.objective_means(db, run_id)
    assert {"accuracy", "brevity"} <= set(objectives.columns) and len(objectives) == len(accepted)


def test_each_query_is_one_statement(run):
    db, run_id = run
    seen = []
    # transaction and connection settings (BEGIN, PRAGMA, the time limit's SET LOCAL) are not queries
    listener = lambda *a: seen.append(a[2]) if not a[2].lstrip().upper().startswith(("BEGIN", "PRAGMA", "SET")) else None
    event.listen(db.reader, "before_cursor_execute", listener)
    try:
        for fn in (queries.run_overview, queries.candidate_rows, queries.val_scores, queries.step_rows,
                   queries.objective_means, queries.command_log):
            seen.clear()
            fn(db, run_id)
            assert len(seen) == 1, (fn.__name__, seen)
    finally:
        event.remove(db.reader, "before_cursor_execute", listener)


def test_frontier_matches_the_engine(run):
    from engine.search.frontier import compute_frontier

    db, run_id = run
    cands, scores = queries.candidate_rows(db, run_id), queries.val_scores(db, run_id)
    view = analysis.frontier(scores, cands)
    vetoed = set(cands.loc[cands["vetoed"], "id"])
    nested = {cid: dict(zip(g["example"], g["score"])) for cid, g in scores.groupby("candidate_id")}
    engine_front = compute_frontier(nested, eligible=[c for c in nested if c not in vetoed])
    assert set(view.members) == engine_front.members()
    assert not (set(view.members) & vetoed)


def test_score_progress_and_speedup(run):
    db, run_id = run
    ov = queries.run_overview(db, run_id)
    progress = analysis.score_progress(ov, queries.candidate_rows(db, run_id), queries.step_rows(db, run_id))
    assert progress["best"].is_monotonic_increasing
    assert progress["metric_calls"].iloc[-1] == pytest.approx(ov["metric_calls"])
    assert progress["best"].iloc[-1] == pytest.approx(ov["best_val_mean"])
    assert analysis.measured_speedup(queries.step_rows(db, run_id)) > 1
    for x in charts.X_LABELS:
        assert charts.score_progress_figure(progress, x).data


def test_budgets_pick_the_binding_one():
    run = {"metric_calls": 90, "cost_usd": 0.5, "steps_done": 3, "best_val_mean": 0.5,
           "config": {"budget": {"max_metric_calls": 100, "max_cost_usd": 2.0}}}
    b = analysis.budgets(run)
    assert [x.name for x in b] == ["metric calls", "dollars"] and b[0].fraction == pytest.approx(0.9)


def test_lineage_layout_and_figure(run):
    db, run_id = run
    cands = queries.candidate_rows(db, run_id)
    pos = layout(cands)
    assert set(pos) == set(cands["id"])
    seed = cands.loc[cands["origin"] == "seed", "id"].iloc[0]
    assert pos[seed][0] == -1  # left of step 0, whose proposals it parents
    overlays = ("pinned", "merge (ring)", "human edit (ring)")
    collapsed = lineage_figure(cands, None, [], show_rejected=False)
    shown = sum(len(t.customdata) for t in collapsed.data if t.customdata is not None and t.name not in overlays)
    assert shown == int((~cands["status"].isin(["rejected", "failed"]) | cands["pinned"]).sum())  # pinned never hidden
    full = lineage_figure(cands, None, [], show_rejected=True)
    assert sum(len(t.customdata) for t in full.data if t.customdata is not None and t.name not in overlays) == len(cands)


def test_lineage_frontier_node_keeps_its_merge_and_human_marks():
    cands = pd.DataFrame({
        "id": ["s", "a", "b", "m", "h", "h2"], "parent_ids": [[], ["s"], ["s"], ["a", "b"], ["a"], ["b"]],
        "step": [0, 0, 0, 1, 1, 1], "origin": ["seed", "reflection", "reflection", "merge", "human", "human"],
        "status": ["accepted"] * 6, "val_mean": [0.1, 0.5, 0.6, 0.9, 0.8, 0.2], "pinned": [False] * 6,
        "vetoed": [False] * 6, "component": [None] * 6, "author": ["", "", "", "", "ana", "bob"]})
    fig = lineage_figure(cands, "m", ["m", "h", "b"])
    traces = {t.name: set(t.customdata) for t in fig.data if t.customdata is not None}
    assert traces["best"] == {"m"} and traces["frontier"] == {"h", "b"} and traces["human"] == {"h2"}
    assert traces["merge (ring)"] == {"m"} and traces["human edit (ring)"] == {"h"}  # the origin is not lost
    assert list(fig.layout.xaxis.ticktext[:2]) == ["seed", "0"]


def test_lineage_handles_a_deep_chain():
    n = 5000  # deeper than Python's recursion limit: the layout is iterative
    cands = pd.DataFrame({"id": [f"c{i}" for i in range(n)], "parent_ids": [[]] + [[f"c{i}"] for i in range(n - 1)],
                          "step": range(n)})
    assert len(layout(cands)) == n and n > sys.getrecursionlimit()


def test_draft_to_config_and_field_errors():
    d = run_form.default_draft("openai/gpt-4.1-mini")
    cfg, errors = run_form.validate(d)
    assert cfg is None and K.NEW_NAME in errors  # empty name
    d[K.NEW_NAME] = "t"
    _, errors = run_form.validate(d)
    assert errors[K.NEW_SEED_MODE][0].startswith("the seed candidate is empty, and so is the objective")  # at the seed, in the form's words
    d[K.NEW_SEED_TEXT] = "hello"
    d[K.NEW_MAX_CALLS], d[K.NEW_P] = 1, 0
    _, errors = run_form.validate(d)
    assert K.NEW_MAX_CALLS in errors or K.NEW_P in errors
    d[K.NEW_P], d[K.NEW_MAX_CALLS] = 2, 100
    d[K.NEW_EVALUATOR] = "def evaluate(candidate, example:\n    return 1"
    _, errors = run_form.validate(d)
    assert "line 1" in errors[K.NEW_EVALUATOR][0]
    d[K.NEW_EVALUATOR] = run_form.EVALUATOR_TEMPLATE
    d[K.NEW_DATA_SOURCE], d[K.NEW_DATA_TEXT] = run_form.DATA_SOURCES[2], '{"answer": "a"}\n{"answer": oops}\n'
    _, errors = run_form.validate(d)
    assert "line 2" in errors[K.NEW_DATA_SOURCE][0]
    d[K.NEW_DATA_TEXT] = "".join(f'{{"id": "e{i}", "answer": "{i}"}}\n' for i in range(20))
    d[K.NEW_SPLIT_VAL], d[K.NEW_SPLIT_TEST] = 25, 10
    cfg, errors = run_form.validate(d)
    assert errors == {} and cfg.mode == "generalization"
    assert (len(cfg.dataset), len(cfg.valset), len(cfg.testset)) == (13, 5, 2)


def test_builtin_templates_validate():
    templates = run_form.list_templates()
    assert {"iso_date_regex", "slugify_code", "tagline", "toy_words"} <= {p.parent.name for p in templates.values()}
    for path in templates.values():
        draft, problems = run_form.template_draft(path, "openai/gpt-4.1-mini")
        assert problems == []
        cfg, errors = run_form.validate(draft)
        assert errors == {}, (path, errors)


def test_a_run_started_from_the_form_does_what_its_config_does_from_the_command_line():
    """Settings the form has no field for (max_score, the reflection LM's max_tokens, the task LM's
    temperature, the evaluator's time limit …) were dropped when an example was loaded into the form."""
    from engine.config import LOCAL_MODEL, load_config

    for path in run_form.list_templates().values():
        draft, _ = run_form.template_draft(path, LOCAL_MODEL)  # the studio's default without a key
        from_form, errors = run_form.validate(draft)
        assert errors == {}, (path, errors)
        from_file = load_config(path)
        for section in ("search", "budget", "executor", "limits", "task_lm", "judge_lm"):
            assert getattr(from_form, section) == getattr(from_file, section), (path.parent.name, section)
        assert from_form.reflection_lm.model_dump(exclude={"model"}) == from_file.reflection_lm.model_dump(exclude={"model"})


def test_a_duplicated_run_keeps_its_schedule_merges_and_every_other_setting():
    path = next(p for p in run_form.list_templates().values() if p.parent.name == "toy_words")
    draft, _ = run_form.template_draft(path, "m")
    cfg, _ = run_form.validate(draft)
    stored = cfg.stored()
    stored["search"].update(schedule="async", accept="all", merge_siblings=True, top_k=3, seed=7, max_score=1.0)
    stored["reflection_lm"].update(max_tokens=321, num_retries=1)
    stored["executor"]["timeout_seconds"] = 12
    draft = run_form.draft_from_config(stored, "m")
    assert (draft[K.NEW_SCHEDULE], draft[K.NEW_MERGE_SIBLINGS]) == ("async", True)
    text = form_carry.summary(draft[K.NEW_CARRIED])
    assert "top_k = 3" in text and "seed = 7" in text and "max_tokens = 321" in text and "timeout_seconds = 12" in text
    assert "workers" not in text and "schedule" not in text  # fields of the form are not listed as carried
    again, errors = run_form.validate(draft)
    assert errors == {}
    for section in ("search", "reflection_lm", "executor", "budget"):
        assert getattr(again, section).model_dump() == stored[section], section
    # what the form edits wins over what it carries
    draft[K.NEW_SCHEDULE], draft[K.NEW_P] = "sync", 3
    edited, _ = run_form.validate(draft)
    assert (edited.search.schedule, edited.search.parents_per_step, edited.search.top_k) == ("sync", 3, 3)


def test_the_form_downloads_a_toml_file_that_reads_back_to_the_same_config(tmp_path):
    import tomllib

    from engine.config import LOCAL_MODEL, load_config

    for path in run_form.list_templates().values():
        draft, _ = run_form.template_draft(path, LOCAL_MODEL)
        draft[K.NEW_SCHEDULE], draft[K.NEW_MERGE_SIBLINGS] = "async", True
        want, errors = run_form.validate(draft)
        assert errors == {}
        text = run_form.config_toml(draft)
        tomllib.loads(text)  # a TOML file, whatever its content (multi-line evaluator, inline datasets)
        again, problems = run_form.draft_from_toml(text, {}, LOCAL_MODEL)  # the form's upload
        assert problems == []
        got, errors = run_form.validate(again)
        assert errors == {} and got == want, path.parent.name
        saved = tmp_path / run_form.toml_file_name(draft)
        saved.write_text(text)
        assert load_config(saved) == want  # and python -m engine run reads it alike
    assert run_form.toml_file_name({K.NEW_NAME: "ISO date regex!"}) == "iso-date-regex.toml"


def test_template_keeps_its_train_val_test_files():
    path = next(p for p in run_form.list_templates().values() if p.parent.name == "toy_words")
    draft, _ = run_form.template_draft(path, "m")
    assert draft[K.NEW_DATA_SOURCE] == run_form.SEPARATE
    cfg, errors = run_form.validate(draft)
    assert errors == {}
    lines = [(path.parent / f).read_text().splitlines() for f in ("train.jsonl", "val.jsonl", "test.jsonl")]
    assert [len(cfg.dataset), len(cfg.valset), len(cfg.testset)] == [len(x) for x in lines]
    assert cfg.valset[0] == json.loads(lines[1][0])  # the same examples, in the same order: no reshuffle
    # a bad validation set is reported as such, at the dataset field
    draft[K.NEW_DATA_VAL_TEXT] = '{"word": oops}\n'
    _, errors = run_form.validate(draft)
    assert any(e.startswith("validation set, line 1") for e in errors[K.NEW_DATA_SOURCE])


def test_toml_upload_needs_its_files():
    text = 'name = "x"\nseed_candidate = "s"\nevaluator_file = "ev.py"\n'
    _, problems = run_form.draft_from_toml(text, {})
    assert "ev.py was not uploaded" in problems[0]
    draft, problems = run_form.draft_from_toml(text, {"ev.py": "def evaluate(c):\n    return 1.0\n"})
    assert problems == [] and draft[K.NEW_EVALUATOR].startswith("def evaluate")
    assert run_form.draft_from_toml("name = ", {})[1][0].startswith("config: the TOML file: not valid TOML")


def test_drafts_round_trip(tmp_path):
    d = run_form.default_draft("m")
    d[K.NEW_NAME] = "kept"
    form_drafts.save_draft(tmp_path, "ana ../x", d)
    assert form_drafts.load_draft(tmp_path, "ana ../x")[K.NEW_NAME] == "kept"
    assert list(tmp_path.iterdir())[0].parent == tmp_path  # the user name cannot escape the folder


def test_supervisor_restarts_and_stops_the_worker(tmp_path):
    from engine.worker.supervisor import WorkerSupervisor

    sup = WorkerSupervisor("sqlite:///x.db", tmp_path, command=[sys.executable, "-c", "import time; time.sleep(60)"],
                           min_backoff=0.1, stop_timeout=5)
    other = WorkerSupervisor("sqlite:///x.db", tmp_path, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    sup.start()
    try:
        deadline = time.monotonic() + 10
        while (sup.proc is None or sup.proc.poll() is not None) and time.monotonic() < deadline:
            time.sleep(0.05)
        first = sup.proc
        assert first.poll() is None and sup.owns_worker
        assert not other._acquire()  # one worker per database: the second supervisor only watches
        first.kill()
        while (sup.proc is first or sup.proc.poll() is not None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.proc is not first and sup.proc.poll() is None and sup.restarts == 1
    finally:
        sup.stop()
    assert sup.proc.poll() is not None and not sup.owns_worker
    assert other._acquire()
    other._release()


@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_the_step_timeline_puts_each_step_where_it_ran(sqlite_db, tmp_path, schedule):
    """The engine records event times from their step's start; the dashboard's timeline shows
    seconds since the run started, so each step's events lie within that step's span."""
    from tests.support.harness import run_toy, toy_config

    cfg = toy_config(6, search={"schedule": schedule, "parents_per_step": 2, "proposals_per_parent": 1},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, latency=0.3)
    run, steps = queries.run_overview(sqlite_db, run_id), queries.step_rows(sqlite_db, run_id)
    events = analysis.timeline_events(steps, run["started_at"])
    t0 = pd.to_datetime(run["started_at"], utc=True)
    spans = {s.index: ((s.started_at - t0).total_seconds(), (s.ended_at - t0).total_seconds())
             for s in steps.itertuples() if s.events}
    assert len(spans) >= 2 and min(b for b, _ in spans.values()) >= 0
    assert spans[max(spans)][0] > 0.5  # the later steps start well after the run did
    for step, rows in events.groupby("step"):
        begin, end = spans[step]
        assert rows["start"].min() >= begin - 0.1 and rows["end"].max() <= end + 0.1, (step, begin, end, rows)
    assert charts.timeline_figure(events).data


def test_a_flat_score_line_is_drawn_near_its_score():
    flat = pd.DataFrame({"metric_calls": [20, 32], "best": [0.75, 0.75], "mean": [0.75, 0.75], "when": ["", ""]})
    assert tuple(charts.score_progress_figure(flat).layout.yaxis.range) == pytest.approx((0.70, 0.80))
    rising = flat.assign(best=[0.5, 0.75])
    assert charts.score_progress_figure(rising).layout.yaxis.range is None  # plotly's own range


def test_the_frontier_is_read_incrementally_and_matches_a_whole_read(db):
    """A live run's frontier reads only the scores recorded since its last read (plus a margin
    read again); what it then shows is what a whole read shows."""
    import streamlit as st

    from tests.support.synthetic_live import add_validated
    from ui import data

    run_id = generate_run(db, n_candidates=40, n_val=12, n_train=20)
    repo_run = queries.run_overview(db, run_id)
    before = len(queries.val_scores(db, run_id))
    whole, last = queries.val_scores_since(db, run_id, 0)
    assert len(whole) == before and queries.val_scores_since(db, run_id, last)[0].empty
    added = add_validated(db, run_id)
    new, _ = queries.val_scores_since(db, run_id, last)
    assert set(new["candidate_id"]) == {added} and len(new) == 12

    url = str(db.writer.url.render_as_string(hide_password=False))
    running = {**repo_run, "status": "running"}
    try:
        st.cache_resource.clear()
        token = data.frontier_token(running)
        first = data.val_scores(url, run_id, token)
        add_validated(db, run_id, seed=1)
        second = data.val_scores(url, run_id, data.frontier_token({**running, "frontier_version": 99}))
        cands = queries.candidate_rows(db, run_id)
        incremental = analysis.frontier(second, cands)
        full = analysis.frontier(queries.val_scores(db, run_id), cands)
        assert len(second) >= len(first) + 12
        assert incremental.members == full.members and incremental.best.equals(full.best)
    finally:
        st.cache_resource.clear()


def test_the_steps_are_read_incrementally_and_match_a_whole_read(db):
    """A live run's steps: those up to the last one seen ended are kept, the later ones read
    again; what that shows is what a whole read shows (an open step that ended since included)."""
    import streamlit as st
    from datetime import datetime, timezone

    from sqlmodel import select

    from storage.models import Step
    from ui import data

    run_id = generate_run(db, n_candidates=40, n_val=6, n_train=10, status="running")
    url = str(db.writer.url.render_as_string(hide_password=False))
    with db.write() as s:  # the step in flight: not ended yet
        s.add(Step(run_id=run_id, index=999, parent_ids=["x"], proposal_ids=[], accepted_ids=[], metric_calls=3))
    try:
        st.cache_resource.clear()
        run = {**queries.run_overview(db, run_id), "status": "running"}
        first = data.steps_of(url, run)
        assert first["ended_at"].isna().sum() == 1
        assert data._steps_of(url, run_id).ended_through == int(first["index"].iloc[-2])  # the last ended one
        with db.write() as s:  # it ends, and the next one starts
            step = s.exec(select(Step).where(Step.run_id == run_id, Step.index == 999)).one()
            step.ended_at, step.metric_calls = datetime.now(timezone.utc), 7
            s.add(step)
            s.add(Step(run_id=run_id, index=1000, parent_ids=["y"], proposal_ids=[], accepted_ids=[]))
        second = data.steps_of(url, {**run, "metric_calls": run["metric_calls"] + 1})
        whole = queries.step_rows(db, run_id)
        assert list(second["index"]) == list(whole["index"]) and list(second["metric_calls"]) == list(whole["metric_calls"])
        assert second.loc[second["index"] == 999, "ended_at"].notna().all()
    finally:
        st.cache_resource.clear()


def test_a_big_lineage_draws_the_best_the_pinned_and_the_strongest_members_with_their_ancestors():
    from ui.lineage import drawn_part, lineage_figure

    rows = [{"id": "s", "parent_ids": [], "status": "accepted", "origin": "seed", "step": 0, "val_mean": 0.1,
             "pinned": False, "vetoed": False, "component": None, "author": "", "merge_path": ""}]
    for i in range(1, 60):  # a chain s → c1 → … and a side branch of leaves under each
        rows.append({**rows[0], "id": f"c{i}", "parent_ids": [f"c{i - 1}" if i > 1 else "s"], "origin": "reflection",
                     "step": i, "val_mean": i / 100})
        rows.append({**rows[0], "id": f"l{i}", "parent_ids": [f"c{i}"], "origin": "reflection", "step": i + 1,
                     "val_mean": 0.0})
    cands = pd.DataFrame(rows)
    cands.loc[cands["id"] == "l30", "pinned"] = True
    part, undrawn = drawn_part(cands, ["c59", "l30", "l5"], limit=70)
    drawn = set(part["id"])
    assert {"c59", "l30", "l5", "s", "c1", "c30"} <= drawn and len(drawn) <= 70
    assert sum(undrawn.values()) == len(cands) - len(drawn)  # every other one is counted once, under an ancestor
    assert drawn_part(cands, [], limit=500)[0] is cands  # small enough: all of it
    fig = lineage_figure(cands.assign(frontier_examples=0), "c59", ["c58"])
    assert "candidates drawn" not in (fig.layout.title.text or "")  # 119 nodes: every one


def test_a_per_step_chart_of_many_steps_draws_the_mean_of_runs_of_steps():
    from ui.charts import MAX_BARS, utilisation_figure

    steps = pd.DataFrame({"index": range(1, 2501), "worker_utilisation": [0.5] * 2500})
    fig = utilisation_figure(steps)
    assert len(fig.data[0].x) <= MAX_BARS and "mean of every 13 steps" in fig.layout.title.text
    assert list(utilisation_figure(steps.head(20)).data[0].x) == list(range(1, 21))
