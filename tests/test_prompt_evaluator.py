"""[prompt_evaluator]: the configuration's checks, each assertion type, and a whole run.

The assertion types are scored by the runtime half (refract_prompt) directly; one run goes
through the real sandbox and the optimizer with a scripted task LM, reflection LM and judge.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlmodel import select

import engine  # noqa: F401  first: offline price map, and the runtime modules importable
from engine.config import ConfigError, load_config, parse_config
from engine.runs import submit_run
from storage import queries, repo
from storage.compare_queries import pair_evaluations
from ui import compare, prompt_view
from storage.models import LMCall
from tests.support.harness import run_optimizer
from tests.support.prompt_task import BETTER, ROWS, config as _config, script
from tests.support.scripted_lm import install_script


def _error(data: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return str(exc.value)


# ---------------------------------------------------------------- bad input, where it was made


@pytest.mark.parametrize("assertion, expected", [
    ({"type": "contain", "value": "x"}, "prompt_evaluator.assert.0.type: must be one of"),
    ({"type": "regex", "value": "([a-z]"}, "prompt_evaluator.assert.0.value: not a valid regular expression: missing )"),
    ({"type": "json_schema", "value": {"type": "strin"}}, "prompt_evaluator.assert.0.value: not a JSON schema: at type"),
    ({"type": "json_schema", "value": "{not json"}, "prompt_evaluator.assert.0.value: not a JSON schema: the text is not JSON"),
    ({"type": "python", "value": "output ==="}, "prompt_evaluator.assert.0.value: not Python"),
    ({"type": "python", "value": "x = 1\ny = 2"}, "prompt_evaluator.assert.0.value: Python that is not one expression must define check"),
    ({"type": "max_length", "value": "short"}, "prompt_evaluator.assert.0.value: max_length needs value = a whole number"),
    ({"type": "contains"}, "prompt_evaluator.assert.0.value: missing; a contains assertion needs a value"),
    ({"type": "equals", "value": "{labl}"}, "prompt_evaluator.assert.0.value: {labl} names no field of the dataset (row 1 lacks it; fields: label, text)"),
    ({"type": "icontains", "value": "x", "weight": 0}, "prompt_evaluator.assert: every weight is 0"),
])
def test_a_bad_assertion_is_refused_where_it_was_written(assertion, expected):
    assert expected in _error(_config(assertion))


def test_placeholders_are_checked_against_the_first_rows():
    assert _error(_config(prompt_evaluator={"user": "Ticket: {body}", "assert": [{"type": "is_json"}]})).startswith(
        "prompt_evaluator.user: {body} names no field of the dataset (row 1 lacks it; fields: label, text) nor a "
        "component (candidate)")
    rows = ROWS[:2] + [{"text": "no label here"}]
    assert "prompt_evaluator.assert.0.value: {label} names no field of the dataset (row 3 lacks it" in _error(
        _config(dataset=rows))
    assert "prompt_evaluator.system: {rules} appears in neither system nor user" in _error(
        _config(seed_candidate={"role": "You route tickets.", "rules": "Answer with one label."},
                prompt_evaluator={"system": "{role}", "user": "{text}", "assert": [{"type": "is_json"}]}))
    assert "dataset: row 1 is a str" in _error(_config(dataset=["just text"]))


def test_a_prompt_evaluator_and_an_evaluator_are_not_both_given():
    assert "prompt_evaluator: give prompt_evaluator or an evaluator" in _error(_config(evaluator="def evaluate(c, e): return 1"))
    assert "prompt_evaluator: needs executor.backend = \"local\"" in _error(_config(executor={"backend": "dask"}))


def test_the_generated_evaluator_is_regenerated_from_the_stored_table():
    cfg = parse_config(_config({"type": "icontains", "value": "{label}"}, {"type": "python", "value": "len(output) < 40"},
                               {"type": "python", "value": "def check(output, example):\n    return 0.5, 'half'"}))
    assert "from refract_prompt import PromptEvaluator" in cfg.evaluator and "def check_2(output, example):" in cfg.evaluator
    stored = cfg.stored()
    assert [a["name"] for a in stored["prompt_evaluator"]["assert"]] == ["icontains", "python", "python#2"]
    stored["evaluator"] = "tampered"
    assert type(cfg).model_validate(stored).evaluator == cfg.evaluator


# ---------------------------------------------------------------- each assertion type


def _score(assertion: dict, output: str, example: dict | None = None, candidate="Classify.") -> tuple[float, str]:
    cfg = parse_config(_config(assertion))
    ns: dict = {}
    exec(compile(cfg.evaluator, "evaluator.py", "exec"), ns)  # the generated source, as the sandbox runs it
    prompt = ns["PROMPT"]
    example = example or ROWS[0]
    values = prompt.values(candidate, example)
    return prompt.score_one(prompt.assertions[0], output, example, values, "Ticket: x")


@pytest.mark.parametrize("assertion, good, bad, why", [
    ({"type": "equals", "value": "{label}"}, " billing\n", "Billing", "expected exactly 'billing'; the answer was 'Billing'"),
    ({"type": "contains", "value": "{label}"}, "label: billing", "BILLING", "expected 'billing' (same case)"),
    ({"type": "icontains", "value": "{label}"}, "Category: BILLING", "Category: refund request",
     "expected 'billing' (any case) in the answer; the answer was 'Category: refund request'"),
    ({"type": "not_contains", "value": "sorry"}, "billing", "sorry, billing", "expected no 'sorry' in the answer; it appears at character 0"),
    ({"type": "regex", "value": r"^label: {label}$"}, "label: billing", "label: bug", "expected a match of /^label: billing$/"),
    ({"type": "is_json"}, '```json\n{"label": "billing"}\n```', "{label: billing}", "expected JSON; the answer is not valid JSON"),
    ({"type": "json_schema", "value": {"type": "object", "required": ["label"], "properties": {"label": {"enum": ["billing", "bug"]}}}},
     '{"label": "bug"}', '{"label": "refund"}', "does not fit the schema at label: 'refund' is not one of"),
    ({"type": "max_length", "value": 10}, "billing", "billing because the customer", "expected at most 10 characters; the answer has 28"),
    ({"type": "python", "value": "output.strip() == example['label']"}, "billing", "bug", "the check python gave 0"),
    ({"type": "python", "value": "def check(output, example):\n    ok = output.startswith(example['label'])\n"
                                  "    return ok, 'starts with the label' if ok else 'must start with the label'"},
     "billing.", "it is billing", "must start with the label"),
])
def test_each_assertion_type_passes_and_fails_with_a_reason(assertion, good, bad, why):
    assert _score(assertion, good)[0] == 1.0
    score, reason = _score(assertion, bad)
    assert score == 0.0 and why in reason


def test_a_regex_placeholder_is_matched_literally():
    assert _score({"type": "regex", "value": "^{label}$"}, "a.b", {"text": "t", "label": "a.b"})[0] == 1.0
    assert _score({"type": "regex", "value": "^{label}$"}, "axb", {"text": "t", "label": "a.b"})[0] == 0.0


def test_a_python_check_that_raises_scores_zero_and_says_why():
    score, reason = _score({"type": "python", "value": "example['missing'] in output"}, "billing")
    assert score == 0.0 and "raised KeyError" in reason


# ---------------------------------------------------------------- a whole run


def test_a_prompt_run_tunes_the_prompt_and_accounts_for_task_and_judge_calls(db, tmp_path):
    install_script(script, price_per_token=1e-4)
    cfg = parse_config(_config({"type": "icontains", "value": "{label}", "weight": 2},
                               {"type": "llm_rubric", "value": "The answer is only the label, no other words.", "threshold": 0.7},
                               budget={"max_steps": 1, "max_metric_calls": 40}))
    run_id = submit_run(db, cfg)
    run_optimizer(db, run_id, tmp_path)
    evals = repo.evaluations_for(db, run_id)
    assert evals and not [e for e in evals if e.error]
    seed_side = next(e.side_info for e in evals if e.side_info["output"].startswith("Category: refund"))
    failed = {a["assertion"]: a for a in seed_side["assertions"]}
    assert not failed["icontains"]["passed"] and "expected 'billing' (any case) in the answer; the answer was " \
        "'Category: refund request ticket'" in failed["icontains"]["reason"]
    assert not failed["llm_rubric"]["passed"] and "the judge gave 0.3" in failed["llm_rubric"]["reason"]
    scores = sorted({round(e.score, 4) for e in evals})
    assert scores[-1] == 1.0 and scores[0] < 0.5  # (2·0 + 0.3)/3 for the seed's billing tickets; 1 for the better prompt
    run = queries.run_overview(db, run_id)
    assert run["best_val_mean"] == 1.0
    assert run["calls_by_purpose"]["task"] > 0 and run["calls_by_purpose"]["judge"] > 0
    assert run["cost_by_purpose"]["task"] > 0 and run["cost_by_purpose"]["judge"] > 0
    with db.read() as s:
        calls = list(s.exec(select(LMCall).where(LMCall.run_id == run_id)))
    assert {c.model for c in calls if c.purpose == "judge"} == {"scripted/reflect"}  # the reflection LM by default
    assert all(c.candidate_id and c.example_key for c in calls if c.purpose in ("task", "judge"))
    assert BETTER in [c.content["text"] for c in repo.list_candidates(db, run_id)]
    assert json.dumps(seed_side)  # side information is plain JSON for the reflection prompt and the studio
    # the studio's compare view and the dashboard's pass rates read the same evaluations
    seed_id = next(c.id for c in repo.list_candidates(db, run_id) if c.origin == "seed")
    rows = pair_evaluations(db, run_id, seed_id, run["best_candidate_id"])
    assert len(rows) == len(ROWS) and all(r["score_b"] == 1.0 for r in rows)
    table = compare.pair_table(rows, compare.validation_split(rows))
    assert list(table["output B"]) == [r["label"] for r in ROWS]
    assert list(table["failed A"]) == ["icontains, llm_rubric", "llm_rubric", "llm_rubric", "icontains, llm_rubric"]
    rates = prompt_view.pass_rates(rows, "train").set_index("assertion")
    assert rates.loc["icontains"].tolist() == [0.5, 1.0] and rates.loc["llm_rubric"].tolist() == [0.0, 1.0]


def test_the_studio_form_round_trips_a_prompt_evaluator():
    from ui import keys as K, prompt_form, run_form

    cfg = parse_config(_config({"type": "json_schema", "value": {"type": "object"}, "weight": 2},
                               {"type": "max_length", "value": 30}, {"type": "is_json"},
                               {"type": "python", "value": "len(output) < 20", "threshold": 0.5, "name": "short"}))
    draft = run_form.draft_from_config(cfg.stored(), "scripted/reflect")
    assert draft[K.NEW_EVAL_KIND] == "prompt" and draft[K.NEW_TASK_MODEL] == "scripted/task"
    assert draft[K.NEW_PROMPT_ASSERTS][0] == {"type": "json_schema", "value": '{"type": "object"}', "weight": 2.0,
                                              "threshold": 1.0, "name": "json_schema"}
    assert draft[K.NEW_PROMPT_ASSERTS][3]["threshold"] == 0.5 and draft[K.NEW_PROMPT_ASSERTS][3]["name"] == "short"
    again, errors = run_form.validate(draft)
    # every field of every assertion comes back, the threshold and name too (they were dropped)
    assert not errors and again.prompt_evaluator.assertions == cfg.prompt_evaluator.assertions
    assert again.evaluator == cfg.evaluator
    draft[K.NEW_PROMPT_ASSERTS].append({"type": "regex", "value": "([a-z]", "weight": 1.0})
    draft[K.NEW_PROMPT_USER] = "Ticket: {body}"
    errors = run_form.validate(draft)[1]
    assert any("not a valid regular expression" in e for e in errors[K.NEW_PROMPT_ASSERTS])
    draft[K.NEW_PROMPT_ASSERTS].pop()
    assert run_form.validate(draft)[1][K.NEW_PROMPT_USER][0].startswith("{body} names no field")
    draft[K.NEW_EVAL_KIND] = "code"  # the code path keeps the task model, which its lm() calls, and its settings
    assert run_form.config_from_draft(draft)[0]["task_lm"] == {"model": "scripted/task", "temperature": 0.0,
                                                               "num_retries": 0}
    assert (cfg.task_lm.temperature, cfg.task_lm.num_retries) == (0.0, 0)
    assert "prompt_evaluator" not in run_form.config_from_draft(draft)[0]
    assert prompt_form.assertion_config({"type": "is_json", "value": float("nan"), "weight": None}) == \
        {"type": "is_json", "weight": 1.0}


def test_the_new_run_page_loads_the_prompt_example_shows_its_evaluator_and_ejects_it(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.support.studio import studio_database
    from ui import keys as K

    studio_database(tmp_path, monkeypatch)
    app = str(Path(__file__).resolve().parent.parent / "app.py")
    at = AppTest.from_file(app, default_timeout=60)
    at.switch_page(str(Path(app).parent / "pages/new_run.py")).run()
    name = next(o for o in at.selectbox(key=K.NEW_TEMPLATE).options if "ticket_routing" in o)
    at.selectbox(key=K.NEW_TEMPLATE).set_value(name).run()
    at.button(key=K.NEW_LOAD_TEMPLATE).click().run()
    assert at.radio(key=K.NEW_EVAL_KIND).value == "prompt" and at.text_area(key=K.NEW_PROMPT_USER).value == "Ticket: {text}"
    assert at.button(key=K.NEW_PREVIEW).label == "Preview on three examples"
    at.toggle(key=K.NEW_SHOW_SOURCE).set_value(True).run()
    source = at.code[0].value
    assert "from refract_prompt import PromptEvaluator" in source and "'value': '{label}'" in source
    at.button(key=K.NEW_EJECT).click().run()
    at.toggle(key="new_plain_editor").set_value(True).run()
    assert not at.exception
    assert at.radio(key=K.NEW_EVAL_KIND).value == "code" and at.text_area(key=K.NEW_EVALUATOR).value.strip() == source.strip()


README_TOML = re.compile(r"## Tuning a prompt\n.*?```toml\n(.*?)```", re.S)
TICKETS_CSV = "text,label\nI was charged twice,billing\nThe app crashes,bug\n"  # the columns the README names


def _readme_config(tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    (tmp_path / "config.toml").write_text(README_TOML.search(readme).group(1))
    (tmp_path / "tickets.csv").write_text(TICKETS_CSV)
    return load_config(tmp_path / "config.toml")


def test_the_readme_example_loads_and_says_what_it_does(tmp_path):
    from engine.lm.params import evaluator_lm

    cfg = _readme_config(tmp_path)
    assert [a.type for a in cfg.prompt_evaluator.assertions] == ["icontains", "max_length", "llm_rubric"]
    assert cfg.task_lm.model == "openai/gpt-4.1-mini" and "from refract_prompt import PromptEvaluator" in cfg.evaluator
    assert evaluator_lm(cfg, "judge", {})[0].model == cfg.reflection_lm.model  # no [judge_lm]: the reflection LM
    stored = {k: v for k, v in cfg.stored().items() if v is not None and k not in ("evaluator", "dataset_file")}
    judged = parse_config({**stored, "judge_lm": {"model": "scripted/judge"}})
    assert evaluator_lm(judged, "judge", {"temperature": 0.0})[0].model == "scripted/judge"
    assert evaluator_lm(judged, None, {})[1] == "task"
    with pytest.raises(RuntimeError, match="refused"):
        evaluator_lm(judged, "openai/gpt-4o", {})
    # braces that are not {identifier} are no placeholders; a graded python check scores between 0 and 1
    assert _score({"type": "regex", "value": r"^[a-z]{3,}$"}, "billing")[0] == 1.0
    assert _score({"type": "python", "value": "len(output) / 20"}, "0123456789")[0] == 0.5


def test_the_readme_example_runs(sqlite_db, tmp_path):
    """The README's config as written, only its models swapped for the scripted ones (no key here)."""
    stored = {k: v for k, v in _readme_config(tmp_path).stored().items() if v is not None and k not in ("evaluator", "dataset")}
    install_script(script)
    cfg = parse_config({**stored, "task_lm": {"model": "scripted/task"}, "reflection_lm": {"model": "scripted/reflect"},
                        "budget": {"max_steps": 1}}, base_dir=tmp_path)
    run_id = submit_run(sqlite_db, cfg)
    assert run_optimizer(sqlite_db, run_id, tmp_path) == "completed"
    seed = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "seed")
    verdicts = {(e.side_info["output"], a["assertion"]): a["passed"]
                for e in repo.evaluations_for(sqlite_db, run_id, [seed.id]) for a in e.side_info["assertions"]}
    assert verdicts == {("Category: refund request ticket", "icontains"): False, ("Category: bug ticket", "icontains"): True,
                        ("Category: refund request ticket", "max_length"): False, ("Category: bug ticket", "max_length"): True,
                        ("Category: refund request ticket", "llm_rubric"): False, ("Category: bug ticket", "llm_rubric"): False}
    assert queries.run_overview(sqlite_db, run_id)["best_val_mean"] == 1.0  # the reflection's "label only" prompt


def test_a_later_row_without_a_field_is_an_evaluation_error_that_names_it():
    cfg = parse_config(_config())
    ns: dict = {}
    exec(compile(cfg.evaluator, "evaluator.py", "exec"), ns)
    with pytest.raises(KeyError, match="this example has no field 'text', which the prompt evaluator uses as {text}"):
        ns["PROMPT"].messages("Classify.", {"label": "billing"})
