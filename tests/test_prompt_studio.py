"""The prompt path in the studio's pages, with Streamlit's AppTest (no browser): a candidate's
answers beside its parent's, the dashboard's spend split, the New run assertions table and the
task model's connection test. One real prompt run (scripted task LM, judge and reflection LM,
real sandbox) serves the page tests."""

from __future__ import annotations

import pytest

import engine  # noqa: F401  first: offline price map, and the runtime modules importable
from engine.config import parse_config
from engine.worker.jobs import JobRunner
from engine.runs import submit_run
from storage import queries, repo
from tests.support.harness import run_optimizer
from tests.support.prompt_task import BETTER, ROWS, config, script
from tests.support.scripted_lm import install_script, uninstall_script
from tests.support.studio import open_page, studio_database
from ui import keys as K

ASSERTIONS = ({"type": "icontains", "value": "{label}", "weight": 2},
              {"type": "llm_rubric", "value": "The answer is only the label, no other words.", "threshold": 0.7})


@pytest.fixture(scope="module")
def prompt_run(tmp_path_factory):
    """(db, run id): a finished one-step prompt run, seed → ``BETTER``, in the studio's database."""
    tmp = tmp_path_factory.mktemp("prompt-studio")
    with pytest.MonkeyPatch.context() as mp:
        db = studio_database(tmp, mp)
        install_script(script, price_per_token=1e-4)
        try:
            run_id = submit_run(db, parse_config(config(*ASSERTIONS, budget={"max_steps": 1, "max_metric_calls": 40})))
            run_optimizer(db, run_id, tmp)
        finally:
            uninstall_script()
        yield db, run_id


def _texts(at) -> list[str]:
    return [m.value for m in at.markdown] + [c.value for c in at.caption] + [m.label for m in at.metric]


# ---------------------------------------------------------------- candidate page


def test_a_candidate_page_shows_its_answers_beside_its_parents_changed_first(prompt_run):
    db, run_id = prompt_run
    cands = repo.list_candidates(db, run_id)
    seed = next(c for c in cands if c.origin == "seed")
    child = next(c for c in cands if c.content["text"] == BETTER)
    at = open_page("pages/candidate.py", run=run_id, candidate=child.id)
    assert "Answers against the parent" in [h.value for h in at.subheader]
    tables = [d.value for d in at.dataframe]
    answers = next(t for t in tables if "changed" in t.columns)
    # the billing tickets rose most (0.1 → 1: the seed's answer lacked the label and was wordy),
    # then the others (0.767 → 1: the label was there, but the judge found the answer wordy)
    assert list(answers["changed"]) == ["score up"] * len(ROWS)
    assert list(answers["example"]) == ["train-0", "train-3", "train-1", "train-2"]  # rows 1 and 4 are billing
    assert list(answers["output this"]) == [ROWS[int(k[-1])]["label"] for k in answers["example"]]
    assert answers["input"].iloc[0] == "text: I was charged twice · label: billing"  # what the ticket was
    assert answers["output parent"].iloc[0] == "Category: refund request ticket"
    assert answers["failed parent"].iloc[0] == "icontains, llm_rubric" and answers["failed this"].iloc[0] == ""
    assert answers["this − parent"].iloc[0] == pytest.approx(0.9) and answers["this − parent"].iloc[-1] == pytest.approx(0.7 / 3)
    rates = next(t for t in tables if list(t.columns) == ["assertion", "parent", "this"]).set_index("assertion")
    assert rates.loc["icontains"].tolist() == [0.5, 1.0] and rates.loc["llm_rubric"].tolist() == [0.0, 1.0]
    line = next(m for m in _texts(at) if m.startswith("**Validation (the dataset)**"))
    assert f"{len(ROWS)} example(s) · score up on {len(ROWS)} · down on 0" in line and "→ 1.000 over the 4" in line

    at = open_page("pages/candidate.py", run=run_id, candidate=seed.id)
    assert any("A seed has no parent" in c for c in _texts(at))
    at = open_page("pages/compare.py", run=run_id, candidate=child.id)  # the link "Compare with its parent"
    assert "This run has no held-out test set." in _texts(at)


# ---------------------------------------------------------------- dashboard


def test_the_dashboard_shows_reflection_task_and_judge_spend_apart(prompt_run):
    db, run_id = prompt_run
    cost = queries.run_overview(db, run_id)["cost_by_purpose"]
    assert cost["reflection"] > 0 and cost["task"] > 0 and cost["judge"] > 0
    at = open_page("pages/dashboard.py", run=run_id)
    line = next(m for m in _texts(at) if "**parsed**" in m)
    shown = [f"{purpose} ${cost[purpose]:.4f}" for purpose in ("reflection", "task", "judge")]
    assert all(s in line for s in shown), (shown, line)
    spent = next(m for m in at.metric if m.label == "Spent")
    assert spent.value == f"${queries.run_overview(db, run_id)['cost_usd']:.4f}"
    assert all(s in spent.proto.help for s in shown)


def test_changed_answers_come_first_the_biggest_score_change_first():
    from ui import compare

    def row(key, score_a, score_b, out_a, out_b):
        side = lambda out: {"output": out, "assertions": [{"assertion": "icontains", "passed": True}]}  # noqa: E731
        return {"example": key, "split": "val", "score_a": score_a, "score_b": score_b, "side_a": None if score_a is None
                else side(out_a), "side_b": side(out_b), "error_a": None, "error_b": None}

    rows = [row("same", 1.0, 1.0, "bug", "bug"), row("reworded", 1.0, 1.0, "bug", "Bug."), row("new", None, 0.5, "", "x"),
            row("worse", 1.0, 0.0, "billing", "refund"), row("better", 0.5, 0.75, "a", "b")]
    names = ("parent", "this")
    table = compare.changed_first(compare.pair_table(rows, "val", names), names)
    assert list(table["example"]) == ["worse", "better", "reworded", "same", "new"]
    assert list(table["changed"]) == ["score down", "score up", "answer only", "", "not comparable"]


# ---------------------------------------------------------------- New run, the prompt path


def _ticket_routing_form(tmp_path, monkeypatch):
    """The New run page with the built-in prompt example loaded (two assertions: icontains, max_length)."""
    db = studio_database(tmp_path, monkeypatch)
    at = open_page("pages/new_run.py")
    name = next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options if "ticket_routing" in o)
    at.selectbox(key=K.NEW_TEMPLATE).set_value(name).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    assert not at.exception and at.radio(key=K.NEW_EVAL_KIND).value == "prompt"
    return db, at


def test_deleting_a_row_of_the_assertions_table_drops_that_assertion_from_the_run(tmp_path, monkeypatch):
    db, at = _ticket_routing_form(tmp_path, monkeypatch)
    editor = at.data_editor[0]
    assert list(editor.value["type"]) == ["icontains", "max_length"] and editor.editing_mode == "dynamic"
    at.session_state[editor.key] = {"edited_rows": {}, "added_rows": [], "deleted_rows": [1]}  # what the grid sends
    at.run()
    assert not at.exception
    assert [r["type"] for r in at.session_state[K.NEW_PROMPT_ASSERTS]] == ["icontains"]
    at.button(key=K.NEW_SUBMIT).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (run,) = repo.list_runs(db)
    assert [a["type"] for a in run.config["prompt_evaluator"]["assert"]] == ["icontains"]
    assert "max_length" not in run.config["evaluator"]


def _after(at, find) -> int:
    """The position of the first element ``find`` accepts, in the page's order."""
    return next(i for i, node in enumerate(at.main) if find(node))


def test_the_task_models_connection_test_answers_or_says_why_not_at_its_field(tmp_path, monkeypatch):
    db, at = _ticket_routing_form(tmp_path, monkeypatch)
    install_script(lambda messages, params: "ready")
    try:
        at.text_input(key=K.NEW_TASK_MODEL).set_value("scripted/task").run()
        at.button(key=K.NEW_TEST_TASK_LM).click().run()
        assert JobRunner(db, "w").run_once() is not None
        at.run()
    finally:
        uninstall_script()
    assert [s.value for s in at.success] == ["The model answered."] and not at.error
    assert any("'ready'" in c.value for c in at.code)

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    at.text_input(key=K.NEW_TASK_MODEL).set_value("openai/gpt-4.1-mini").run()
    at.button(key=K.NEW_TEST_TASK_LM).click().run()
    assert JobRunner(db, "w").run_once() is not None
    at.run()
    (error,) = [e.value for e in at.error]
    assert error.startswith("task_lm.model: no answer after ") and "OPENAI_API_KEY not set" in error, error
    field = _after(at, lambda n: n.type == "text_input" and n.key == K.NEW_TASK_MODEL)
    shown = _after(at, lambda n: n.type == "error" and n.value == error)
    dataset = _after(at, lambda n: n.type == "subheader" and n.value == "3 · Dataset")
    assert field < shown < dataset  # under the task model, before the next section
    assert K.NEW_LM_RESULT not in at.session_state  # the reflection LM's own test shows nothing
