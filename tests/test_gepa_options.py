"""The options GEPA users reach for: reflection LM kwargs (allow-listed), a custom reflection prompt
template, skip_perfect_score, the component selector, top_k_pareto's k, and the proposal and
no-improvement stoppers. Config errors are checked at load; behaviour in whole runs (scripted LM)."""

from __future__ import annotations

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.lm import client as lm_module
from engine.config import ConfigError, LMConfig
from engine.search.reflection import ExampleFeedback, build_prompt
from engine.search.selection import PoolView, make_selector
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from tests.support import toy
from tests.support.harness import lm_calls, lm_client, run_toy, toy_config
from tests.support.components import _component_script, _multi_config


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


# ---------------------------------------------------------------- load-time errors


@pytest.mark.parametrize("over, message", [
    ({"reflection_lm": {"kwargs": {"api_base": "http://evil"}}},
     "reflection_lm.kwargs: 'api_base' is not passed to the LM (it could redirect the request or the key)"),
    ({"reflection_lm": {"kwargs": {"base_url": "http://evil"}}}, "reflection_lm.kwargs: 'base_url' is not passed"),
    ({"reflection_lm": {"kwargs": {"custom_llm_provider": "openai"}}}, "'custom_llm_provider' is not passed"),
    ({"reflection_lm": {"kwargs": {"api_key": "sk-1"}}}, "'api_key' is not passed"),
    ({"task_lm": {"model": "scripted/toy", "kwargs": {"extra_headers": {"a": "b"}}}},
     "task_lm.kwargs: 'extra_headers' is not passed"),
    ({"reflection_lm": {"kwargs": {"temperature": 0.1}}}, "reflection_lm.kwargs: 'temperature' has its own field"),
    ({"reflection_lm": {"prompt_template": "Improve {candidate}."}}, "reflection_lm.prompt_template: missing {side_info}"),
    ({"reflection_lm": {"prompt_template": "Nothing here"}}, "reflection_lm.prompt_template: missing {candidate}, {side_info}"),
    ({"task_lm": {"model": "scripted/toy", "prompt_template": "{candidate} {side_info}"}},
     "task_lm.prompt_template: only the reflection LM has a prompt template"),
    ({"search": {"skip_perfect_score": True}}, "search.skip_perfect_score: needs search.max_score"),
    ({"search": {"frontier": "pairs"}}, "search.frontier: must be one of 'instance', 'objective', 'hybrid' or 'cartesian', not 'pairs'"),
    ({"search": {"component_selector": "random"}}, "search.component_selector: must be one of 'round_robin' or 'all', not 'random'"),
    ({"budget": {"max_candidate_proposals": 0}}, "budget.max_candidate_proposals: must be at least 1, not 0"),
])
def test_bad_options_are_field_errors(over, message):
    with pytest.raises(ConfigError) as err:
        toy_config(**over)
    assert message in str(err.value)


def test_allowed_kwargs_and_gepa_template_spelling_load():
    cfg = toy_config(reflection_lm={"kwargs": {"reasoning_effort": "high", "top_p": 0.9, "seed": 3},
                                    "prompt_template": "Value:\n<curr_param>\nData:\n<side_info>\n"})
    assert cfg.reflection_lm.kwargs == {"reasoning_effort": "high", "top_p": 0.9, "seed": 3}
    assert cfg.search.frontier == "hybrid" and cfg.search.top_k_pareto_k == 5  # GEPA's defaults


# ---------------------------------------------------------------- kwargs reach litellm


def test_kwargs_are_passed_to_litellm_and_never_the_server(tmp_path, monkeypatch):
    install_script(lambda messages, params: "ok")
    seen = []
    real = lm_module.litellm.completion

    def spy(**kwargs):
        seen.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(lm_module.litellm, "completion", spy)
    cfg = LMConfig(model="scripted/toy", num_retries=0, kwargs={"reasoning_effort": "low", "top_p": 0.5})
    res = lm_client(tmp_path).complete(cfg, [{"role": "user", "content": "hi"}])
    assert res.error is None and res.text == "ok"
    assert seen[0]["reasoning_effort"] == "low" and seen[0]["top_p"] == 0.5
    assert "api_base" not in seen[0] and "base_url" not in seen[0]
    # a different parameter is a different request: not answered from the cache of the first
    cfg2 = cfg.model_copy(update={"kwargs": {"reasoning_effort": "high"}})
    assert not lm_client(tmp_path).complete(cfg2, [{"role": "user", "content": "hi"}]).cached


# ---------------------------------------------------------------- prompt template


def test_prompt_template_fills_named_placeholders_once():
    fb = [ExampleFeedback("k", 0.0, {"word": "alpha"}, {"expected": "alpha"})]
    p = build_prompt(kind="", objective="OBJ", background="BG", component="text", components=["text"],
                     current_text="cur {side_info}", feedback=fb, human_feedback=[], tried=[],
                     template="C=<curr_param>|O={objective}|B={background}|S={side_info}|{json: 1}")
    user = p.messages[1]["content"]
    assert user.startswith("C=cur {side_info}|O=OBJ|B=BG|S=## Evaluation feedback on a minibatch")
    assert user.endswith("|{json: 1}") and "**expected:**\n```\nalpha" in user


def test_a_run_uses_the_prompt_template(sqlite_db, tmp_path):
    template = "MY TEMPLATE\n## Current version\n```\n{candidate}\n```\n\n{side_info}\n"
    cfg = toy_config(4, reflection_lm={"prompt_template": template}, budget={"max_steps": 2, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg)
    prompts = [m[1]["content"] for m, _ in stats.calls]
    assert prompts and all(p.startswith("MY TEMPLATE\n## Current version\n```\nstart") for p in prompts[:1])
    assert all("## Task" not in p for p in prompts)  # the built-in instructions are replaced
    assert repo.get_run(sqlite_db, run_id).best_val_mean > 0  # the toy script still reads it and improves


# ---------------------------------------------------------------- skip_perfect_score


def test_skip_perfect_score_makes_no_proposal_for_a_perfect_minibatch(sqlite_db, tmp_path):
    cfg = toy_config(3, seed_candidate="alpha bravo", search={"parents_per_step": 1, "proposals_per_parent": 1,
                                                             "minibatch_size": 1, "skip_perfect_score": True,
                                                             "max_score": 1.0, "selection": "best"},
                     budget={"max_steps": 3, "stop_at_score": None})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg)
    children = [c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection"]
    # a perfect minibatch is drawn again to find a failure (engine.search.minibatch); a parent
    # that aces every slice tried goes without a proposal
    skipped = [c for c in children if c.reason.startswith("skipped: ")]
    assert skipped and all(not c.content and c.lm_call_id is None for c in skipped)
    reflected = {c.candidate_id for c in lm_calls(sqlite_db, run_id) if c.purpose == "reflection"}
    assert reflected == {c.id for c in children} - {c.id for c in skipped}
    assert len(reflected) >= 1  # the imperfect minibatch (charlie) still got its proposal


# ---------------------------------------------------------------- component selector


def test_component_selector_all_rewrites_every_component(sqlite_db, tmp_path):
    cfg = _multi_config(search={"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 4,
                                "component_selector": "all"})
    run_id, stats = run_toy(sqlite_db, tmp_path, cfg, script=_component_script)
    child = next(c for c in repo.list_candidates(sqlite_db, run_id) if c.origin == "reflection")
    assert child.content == {"a": "start alpha", "b": "start charlie"}
    calls = [c for c in lm_calls(sqlite_db, run_id) if c.purpose == "reflection"]
    assert len(calls) == 2 and {c.candidate_id for c in calls} == {child.id}
    assert repo.get_run(sqlite_db, run_id).proposals_total == 1


# ---------------------------------------------------------------- top_k_pareto k


@pytest.mark.parametrize("k, allowed", [(1, {"A"}), (2, {"A", "B"})])
def test_top_k_pareto_k_limits_the_parents(k, allowed):
    import random

    scores = {"A": {"e1": 1, "e2": 1, "e3": 1, "e4": 0}, "B": {"e1": 0, "e2": 0, "e3": 0, "e4": 1},
              "C": {"e1": 0, "e2": 0, "e3": 0, "e4": 1}}
    scores["B"]["e5"], scores["C"]["e6"], scores["A"]["e5"], scores["A"]["e6"] = 1, 1, 0, 0
    scores["B"]["e6"], scores["C"]["e5"] = 0, 0
    view = PoolView(scores=scores)
    picked = {c for _ in range(30) for c, _ in make_selector("top_k_pareto", k=k).select(view, 1, random.Random(_))}
    assert picked == allowed


def test_top_k_pareto_k_setting_is_used_by_the_engine(sqlite_db, tmp_path):
    cfg = toy_config(6, search={"selection": "top_k_pareto", "top_k_pareto_k": 1}, budget={"max_steps": 2,
                                                                                          "stop_at_score": None})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg)
    reasons = [r for s in repo.list_steps(sqlite_db, run_id) for r in s.parent_reasons.values()]
    assert reasons and set(reasons) == {"top-1 frontier member"}


# ---------------------------------------------------------------- stoppers


def test_max_candidate_proposals_stops_the_run(sqlite_db, tmp_path):
    cfg = toy_config(8, budget={"max_candidate_proposals": 6, "stop_at_score": None, "max_metric_calls": 1000})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=toy.endless)
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "completed"
    assert run.status_reason == "proposal limit reached (8 of max_candidate_proposals = 6)"
    assert run.steps_done == 2  # 4 proposals a step: the check runs between steps


def test_no_improvement_stopper_counts_steps_since_the_best_rose(sqlite_db, tmp_path):
    cfg = toy_config(2, search={"parents_per_step": 1, "proposals_per_parent": 1},
                     budget={"max_steps_without_improvement": 2, "stop_at_score": None, "max_metric_calls": 1000})
    run_id, _ = run_toy(sqlite_db, tmp_path, cfg, script=toy.endless)
    run = repo.get_run(sqlite_db, run_id)
    assert run.best_val_mean == 1.0
    assert "no improvement of the best mean for 2 steps (max_steps_without_improvement = 2)" in run.status_reason
    best = repo.get_candidate(sqlite_db, run.best_candidate_id)
    assert run.steps_done == best.step + 1 + 2


def test_every_option_in_the_readme_table_is_a_config_field():
    import re

    from engine.config import RunConfig
    from tests.support.harness import ROOT

    readme = (ROOT / "README.md").read_text()
    table = readme.split("**Options, as GEPA names them.**")[1].split("## Evaluator contract")[0]
    named = re.findall(r"^\| `\[(\w+)\] (\w+)`", table, re.M)
    # the table may grow; these GEPA options must stay in it
    assert {"frontier", "top_k_pareto_k", "skip_perfect_score", "component_selector", "merge",
            "max_candidate_proposals", "max_steps_without_improvement", "kwargs"} <= {n for _, n in named}
    for section, name in named:
        assert name in RunConfig.model_fields[section].annotation.model_fields, (section, name)
