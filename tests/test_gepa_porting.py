"""Evaluators written for GEPA's optimize_anything run in Refract with only the import line
changed: single-task (oa.log, objectives), multi-task with a dataset (oa.Image), generalization
with a valset (opt_state). Each runs end to end through the engine (real sandbox, scripted LM),
and once through GEPA 0.1.4 itself, to show they are genuine GEPA evaluators."""

from __future__ import annotations

import difflib
import importlib.util
import sys
import warnings
from pathlib import Path

import engine  # noqa: F401  first: offline litellm price map
import pytest

from engine.config import ConfigWarning
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from tests.support.harness import evaluations, run_optimizer, toy_config
from engine.runs import submit_run

HERE = Path(__file__).parent / "support" / "gepa_evaluators"
GEPA_IMPORT = "import gepa.optimize_anything as oa"
REFRACT_IMPORT = "import refract_evaluator as oa"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]

CASES = {
    "single_task": dict(seed="Refract is a tool that helps you make things better by trying many variations",
                        answer="Refract makes every prompt better.", dataset=None, valset=None),
    "multi_task": dict(seed="red", answer="red green blue",
                       dataset=[{"id": c, "colour": c} for c in ("red", "green", "blue")], valset=None),
    "generalization": dict(seed="alpha", answer="alpha bravo charlie delta echo foxtrot",
                           dataset=[{"id": f"t{i}", "word": w} for i, w in enumerate(WORDS[:3])],
                           valset=[{"id": f"v{i}", "word": w} for i, w in enumerate(WORDS[3:])]),
}


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def ported(name: str) -> str:
    """The GEPA evaluator's source with its import line changed, and nothing else."""
    source = (HERE / f"{name}.py").read_text()
    assert GEPA_IMPORT in source
    new = source.replace(GEPA_IMPORT, REFRACT_IMPORT)
    changed = [line for line in difflib.unified_diff(source.splitlines(), new.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == [f"-{GEPA_IMPORT}", f"+{REFRACT_IMPORT}"]
    return new


@pytest.mark.parametrize("name", list(CASES))
def test_a_gepa_evaluator_runs_in_refract_with_only_the_import_changed(sqlite_db, tmp_path, name):
    case = CASES[name]
    stats = install_script(lambda messages, params: f"Change: fix it.\n```\n{case['answer']}\n```")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cfg = toy_config(evaluator=ported(name), seed_candidate=case["seed"], objective="improve it",
                         dataset=case["dataset"], valset=case["valset"],  # None: left out
                         search={"parents_per_step": 1, "proposals_per_parent": 1, "minibatch_size": 3},
                         budget={"max_metric_calls": 60, "stop_at_score": 1.0})
    assert cfg.mode == name.replace("_", "-")
    # the text-only scripted model: said once at load for the evaluator that returns images
    assert [str(w.message)[:46] for w in seen if issubclass(w.category, ConfigWarning)] == (
        ["reflection_lm.model: 'scripted/toy' cannot see"] if name == "multi_task" else [])
    run_id = submit_run(sqlite_db, cfg)
    assert run_optimizer(sqlite_db, run_id, tmp_path) == "completed"
    run = repo.get_run(sqlite_db, run_id)
    assert run.best_val_mean == 1.0, run.status_reason
    assert repo.get_candidate(sqlite_db, run.best_candidate_id).content == {"text": case["answer"]}
    rows = [ev for ev, _, _ in evaluations(sqlite_db, run_id)]
    assert rows and not any(ev.error for ev in rows)
    side = rows[0].side_info
    if name == "single_task":
        assert side["log"].startswith("problems: ") and set(side["scores"]) == {"brevity", "rules"}
    if name == "multi_task":
        assert side["swatches"]["__image__"] == "png"
        assert "[image omitted: the reflection model cannot see images]" in stats.calls[0][0][1]["content"]
    if name == "generalization":
        assert "previous_best" in side
        assert any(ev.side_info["previous_best"] is not None for ev in rows)  # opt_state was filled


def _gepa_module(name: str):
    spec = importlib.util.spec_from_file_location(f"gepa_eval_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", list(CASES))
def test_the_same_evaluators_run_under_gepa_itself(name, tmp_path):
    from gepa.optimize_anything import EngineConfig, GEPAConfig, ReflectionConfig, optimize_anything

    case = CASES[name]
    prompts = []

    def reflection_lm(prompt):
        prompts.append(prompt)
        return f"```\n{case['answer']}\n```"

    config = GEPAConfig(engine=EngineConfig(max_metric_calls=40, parallel=False, run_dir=str(tmp_path / "gepa")),
                        reflection=ReflectionConfig(reflection_lm=reflection_lm))
    result = optimize_anything(case["seed"], evaluator=_gepa_module(name).evaluate, dataset=case["dataset"],
                               valset=case["valset"], objective="improve it", config=config)
    assert result.best_candidate == case["answer"] and prompts
    if name == "multi_task":  # GEPA sends the oa.Image as an image part, as Refract does for a vision model
        parts = [part for p in prompts if isinstance(p, list) for m in p if isinstance(m.get("content"), list)
                 for part in m["content"]]
        assert any(part.get("type") == "image_url" for part in parts)
