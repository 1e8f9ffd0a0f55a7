"""A GEPA program runs unchanged: GEPA's config objects, its result fields, its module names under
``import refract_evaluator as oa``, a callable reflection LM that sees images, evaluators that
use ``signal``, the smallest budgets. Real SQLite, the real engine, Python callables as the LM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

import engine  # noqa: F401  first: offline price map, and refract_evaluator importable
import refract_evaluator as oa
from engine import optimize_anything
from engine.api import gepa_config as rg
from engine.api.result import OptimizeResult
from engine.config import ConfigError
from storage import repo
from tests.support.harness import PYTHON, ROOT, subprocess_env

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


def _grow(prompts: list):
    """A scripted reflection LM: the current text plus one word (GEPA's mock LMs are callables too)."""

    def lm(prompt):
        prompts.append(prompt)
        return f"```\nword {'word ' * len(prompts)}\n```"

    return lm


def _length(candidate) -> tuple[float, dict]:
    text = candidate if isinstance(candidate, str) else candidate["text"]
    return min(len(text.split()) / 10, 1.0), {"words": len(text.split())}


def _runs(db) -> int:
    return len(repo.list_runs(db))


# ---------------------------------------------------------------- GEPA's config objects


@pytest.mark.parametrize("kind", ["gepa", "refract"])
def test_gepas_config_objects_are_read_field_by_field(sqlite_db, kind):
    mod = pytest.importorskip("gepa.optimize_anything") if kind == "gepa" else rg
    prompts: list = []
    stopped: list = []
    cfg = mod.GEPAConfig(engine=mod.EngineConfig(max_metric_calls=6, seed=7, max_workers=3, frontier_type="instance",
                                                 candidate_selection_strategy="current_best"),
                         reflection=mod.ReflectionConfig(reflection_lm=_grow(prompts), skip_perfect_score=True,
                                                         perfect_score=1.0, reflection_lm_kwargs={"temperature": 0.2}),
                         stop_callbacks=lambda state: stopped.append(state.i) and False)
    result = optimize_anything("word", evaluator=_length, config=cfg, db=sqlite_db.url)
    run = repo.get_run(sqlite_db, result.run_id)
    search, lm = run.config["search"], run.config["reflection_lm"]
    assert (search["parents_per_step"], search["proposals_per_parent"], search["minibatch_size"]) == (1, 1, 1)  # GEPA's
    assert (search["seed"], search["frontier"], search["selection"], search["max_score"]) == (7, "instance", "best", 1.0)
    assert search["skip_perfect_score"] and run.config["executor"]["workers"] == 3 and lm["temperature"] == 0.2
    assert lm["model"].startswith("python/lm-") and prompts and stopped  # the callable reflected; the stopper was asked
    assert result.total_metric_calls == run.metric_calls <= 6


def test_dicts_of_gepas_parts_and_the_batch_shape_strategies(sqlite_db):
    gs = pytest.importorskip("gepa.strategies.proposal_sampling")
    sel = pytest.importorskip("gepa.strategies.proposal_selection")
    cfg = rg.GEPAConfig(engine={"max_metric_calls": 12, "sampling_strategy": gs.PxNSampling(2, 3),
                                "selection_strategy": sel.TopKImprovements(2)},
                        reflection={"reflection_lm": _grow([])}, merge=rg.MergeConfig(max_merge_invocations=2))
    result = optimize_anything("word", evaluator=_length, config=cfg, db=sqlite_db.url)
    search = repo.get_run(sqlite_db, result.run_id).config["search"]
    assert (search["parents_per_step"], search["proposals_per_parent"]) == (2, 3)
    assert (search["accept"], search["top_k"], search["merge"], search["max_merges"]) == ("top_k", 2, True, 2)
    assert rg.GEPAConfig.from_dict(cfg.to_dict()).engine.max_metric_calls == 12


@pytest.mark.parametrize("change, field", [
    (dict(engine=rg.EngineConfig(val_evaluation_policy=object())), "config.engine.val_evaluation_policy: "),
    (dict(callbacks=[object()]), "config.callbacks: observation callbacks are not supported"),
    (dict(refiner=rg.RefinerConfig()), "config.refiner: GEPA's refiner"),
    (dict(tracking=rg.TrackingConfig(use_wandb=True)), "config.tracking.use_wandb: W&B tracking is not supported"),
    (dict(reflection=rg.ReflectionConfig(reflection_prompt_template={"text": "<curr_param> <side_info>"})),
     "config.reflection.reflection_prompt_template: a template per component"),
    (dict(reflection=rg.ReflectionConfig(custom_candidate_proposer=print)), "config.reflection.custom_candidate_proposer"),
    (dict(engine=rg.EngineConfig(sampling_strategy=object())), "config.engine.sampling_strategy: object is not supported"),
    (dict(engine=rg.EngineConfig(cache_evaluation=True, cache_evaluation_storage="disk")),
     "config.engine.cache_evaluation_storage: cache_evaluation_storage='disk' requires run_dir"),
])
def test_a_gepa_field_refract_cannot_honour_is_refused_by_name_and_nothing_is_stored(sqlite_db, change, field):
    before = _runs(sqlite_db)
    fields = {"engine": rg.EngineConfig(max_metric_calls=5), **change}
    with pytest.raises(ConfigError) as caught:
        optimize_anything("x", evaluator=_length, config=rg.GEPAConfig(**fields), db=sqlite_db.url)
    assert str(caught.value).startswith(field) and isinstance(caught.value, ValueError)
    assert _runs(sqlite_db) == before


def test_batch_evaluator_and_a_seedless_call_without_objective_or_lm_are_refused_as_gepa_words_it(sqlite_db):
    with pytest.raises(ConfigError, match="^batch_evaluator: not supported"):
        optimize_anything("x", evaluator=_length, batch_evaluator=print, db=sqlite_db.url)
    with pytest.raises(ValueError, match="^objective: 'objective' is required when seed_candidate is None"):
        optimize_anything(None, evaluator=_length, objective="  ", db=sqlite_db.url)
    with pytest.raises(ValueError, match="^reflection_lm: reflection_lm is required when seed_candidate is None"):
        optimize_anything(None, evaluator=_length, objective="grow", db=sqlite_db.url,
                          config=rg.GEPAConfig(reflection=rg.ReflectionConfig(reflection_lm=None)))
    assert _runs(sqlite_db) == 0


def test_raise_on_exception_ends_the_run_and_the_call_raises_the_evaluators_error(sqlite_db):
    def broken(candidate):
        raise KeyError("no such field")

    with pytest.raises(KeyError, match="no such field"):
        optimize_anything("x", evaluator=broken, db=sqlite_db.url,
                          config=rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=5),
                                               reflection=rg.ReflectionConfig(reflection_lm=_grow([]))))
    (run,) = repo.list_runs(sqlite_db)
    assert run.status == "failed" and "KeyError" in run.status_reason
    relaxed = rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=5, raise_on_exception=False),
                            reflection=rg.ReflectionConfig(reflection_lm=_grow([])))
    result = optimize_anything("x", evaluator=broken, db=sqlite_db.url, config=relaxed)
    assert result.status == "failed" and "the evaluator failed on every validation example" in result.status_reason


def test_a_run_dir_holds_gepa_stop_which_ends_the_run(sqlite_db, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "gepa.stop").touch()
    cfg = rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=20, run_dir=str(run_dir)),
                        reflection=rg.ReflectionConfig(reflection_lm=_grow([])))
    result = optimize_anything("word", evaluator=_length, config=cfg, db=sqlite_db.url)
    assert result.run_dir == str(run_dir) and "(StopFile) returned True" in result.status_reason
    assert result.total_metric_calls == 1  # the seed's evaluation, then the stop


# ---------------------------------------------------------------- the smallest budgets, the result


@pytest.mark.parametrize("budget, reflections", [(1, 0), (2, 1)])
def test_the_smallest_single_task_budgets_run_as_in_gepa(sqlite_db, budget, reflections):
    prompts: list = []
    cfg = rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=budget),
                        reflection=rg.ReflectionConfig(reflection_lm=_grow(prompts)))
    result = optimize_anything("word", evaluator=_length, config=cfg, db=sqlite_db.url)
    assert (result.total_metric_calls, len(prompts)) == (budget, reflections)  # never more than the budget
    assert result.best_candidate.startswith("word") and result.status == "completed"


def test_the_result_has_gepas_fields_and_round_trips(sqlite_db):
    def scored(candidate, example):
        n = len(candidate["text"].split())
        hit = float(example["n"] <= n)
        return hit, {"scores": {"length": n / 10, "hit": hit}}

    dataset = [{"n": n} for n in (1, 2, 3)]
    cfg = rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=30), reflection=rg.ReflectionConfig(reflection_lm=_grow([])))
    result = optimize_anything({"text": "word"}, evaluator=scored, dataset=dataset, config=cfg, db=sqlite_db.url)
    n = result.num_candidates
    assert n > 1 and result.num_val_instances == 3 and result.num_full_val_evals == n
    assert result.candidates[0] == {"text": "word"} and result._str_candidate_key is None
    assert all(set(row) == {0, 1, 2} for row in result.val_subscores)  # keyed by validation index, as in GEPA
    assert result.val_aggregate_scores[result.best_idx] == max(result.val_aggregate_scores)
    assert all(result.best_idx in holders for holders in result.per_val_instance_best_candidates.values())
    assert set(result.val_aggregate_subscores[0]) == {"length", "hit"} and result.objective_pareto_front["hit"] == 1.0
    assert len(result.discovery_eval_counts) == n and result.discovery_eval_counts[0] == 0
    again = OptimizeResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert (again.candidates, again.best_idx, again.per_val_instance_best_candidates) == (
        result.candidates, result.best_idx, result.per_val_instance_best_candidates)
    dot, page = result.candidate_tree_dot(), result.candidate_tree_html()
    assert dot.startswith("digraph") and "0 -> 1;" in dot and f'{result.best_idx} [label=' in dot
    assert "<script" not in page and "<pre>text:\nword</pre>" in page


def test_a_string_seed_gives_gepas_dict_form_and_partly_validated_candidates_are_apart(sqlite_db):
    result = optimize_anything("word", evaluator=lambda c, e: float(e["n"] <= len(c.split())),
                               dataset=[{"n": n} for n in (1, 2, 3, 4)], db=sqlite_db.url, progress=False,
                               config={"budget": {"max_metric_calls": 40}}, reflection_lm=_grow([]))
    assert result.num_candidates > 1
    assert result.candidates[0] == {"current_candidate": "word"} and result.best_candidate.startswith("word")
    # a candidate whose validation pass stopped early, with a higher mean over the examples it saw
    cand = repo.list_candidates(sqlite_db, result.run_id, ["accepted"])[-1]
    repo.update_candidate(sqlite_db, cand.id, val_mean=2.0, val_count=1)
    from engine.api.result import build_result

    again = build_result(sqlite_db, result.run_id)
    assert again.val_aggregate_scores[again.best_idx] == max(again.val_aggregate_scores) < 2.0
    assert again.partially_validated == [{"candidate": {"current_candidate": cand.content["text"]},
                                          "val_mean": 2.0, "val_count": 1}]


# ---------------------------------------------------------------- images, signal, oa.log


def test_a_callable_lm_gets_gepas_message_list_with_the_images_and_a_string_without(sqlite_db):
    gepa_image = pytest.importorskip("gepa.image")
    prompts: list = []

    def evaluator(candidate):
        return 0.5, {"Rendering": gepa_image.Image(base64_data=PNG_B64, media_type="image/png"),
                     "Link": oa.Image(url="https://example.com/x.png"), "Feedback": "too blue"}

    cfg = rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=2), reflection=rg.ReflectionConfig(reflection_lm=_grow(prompts)))
    optimize_anything({"text": "draw"}, evaluator=evaluator, config=cfg, db=sqlite_db.url)
    (prompt,) = prompts
    assert isinstance(prompt, list) and prompt[0]["role"] == "user"
    text, *images = prompt[0]["content"]
    assert "draw" in text["text"] and "too blue" in text["text"] and "[IMAGE-1" in text["text"]
    assert [p["image_url"]["url"][:22] for p in images] == ["data:image/png;base64,", "https://example.com/x."]
    plain: list = []
    optimize_anything({"text": "draw"}, evaluator=lambda c: (0.5, {"Feedback": "x"}), db=sqlite_db.url,
                      config=rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=2),
                                           reflection=rg.ReflectionConfig(reflection_lm=_grow(plain))))
    assert plain and all(isinstance(p, str) for p in plain)


def test_an_evaluator_using_signal_runs_without_a_dataset_and_with_pool_main(sqlite_db):
    def with_alarm(candidate, example=None):
        old = signal.signal(signal.SIGALRM, lambda *_: None)  # raises ValueError outside the main thread
        signal.signal(signal.SIGALRM, old)
        return _length(candidate)[0]

    for kwargs in ({}, {"dataset": [{"a": 1}, {"a": 2}], "pool": "main"}):
        result = optimize_anything("word", evaluator=with_alarm, db=sqlite_db.url, reflection_lm=_grow([]),
                                   progress=False, config={"budget": {"max_metric_calls": 8}}, **kwargs)
        evs = repo.evaluations_for(sqlite_db, result.run_id)
        assert evs and not any(ev.error for ev in evs), [ev.error for ev in evs]


def test_gepas_in_process_code_execution_time_limit_works_in_an_evaluator(sqlite_db):
    code_execution = pytest.importorskip("gepa.utils.code_execution")

    def evaluate(candidate):
        # SIGALRM: only on the main thread. Not kill_child_processes (its default): on a timeout it kills
        # every child of this process, here the test session's PostgreSQL server
        ran = code_execution.execute_code(candidate, timeout=0.3, kill_child_processes=False)
        return float(ran.success), {"error": ran.error}

    result = optimize_anything("import time\ntime.sleep(30)", evaluator=evaluate, db=sqlite_db.url,
                               config=rg.GEPAConfig(engine=rg.EngineConfig(max_metric_calls=1),
                                                    reflection=rg.ReflectionConfig(reflection_lm=_grow([]))))
    (ev,) = repo.evaluations_for(sqlite_db, result.run_id)
    assert ev.error is None and ev.side_info["error"].startswith("TimeLimitError") and ev.seconds < 10


def test_gepas_code_execution_kills_every_child_of_its_caller_by_default(tmp_path):
    """What the README warns of: on a timeout, GEPA's execute_code (kill_child_processes=True)
    kills the calling process's other children too. Run in a child process of its own."""
    pytest.importorskip("gepa.utils.code_execution")
    script = textwrap.dedent("""
        import subprocess, sys
        from gepa.utils import code_execution
        bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        code_execution.execute_code("import time\\ntime.sleep(30)", timeout=0.5)
        try:
            bystander.wait(timeout=10)
            print("killed", bystander.returncode)
        except subprocess.TimeoutExpired:
            bystander.kill()
            print("alive")
    """)
    out = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=60, env=subprocess_env(tmp_path))
    assert out.stdout.strip().startswith("killed"), (out.stdout, out.stderr[-2000:])


def test_oa_log_key_collision_get_log_context_outside_and_the_seedless_prompt(sqlite_db):
    def evaluate(candidate, example):
        oa.log("captured")
        return 1.0, {"log": "mine"}

    prompts: list = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = optimize_anything(None, evaluator=evaluate, objective="Write a greeting.", dataset=[{"who": "ada"}],
                                   db=sqlite_db.url, reflection_lm=_grow(prompts), progress=False,
                                   config={"budget": {"max_metric_calls": 3}})
    assert any("conflicts with the captured log" in str(w.message) for w in seen)
    (ev, *_) = repo.evaluations_for(sqlite_db, result.run_id)
    assert (ev.side_info["log"], ev.side_info["_gepa_log"]) == ("mine", "captured\n")
    assert "## Goal\n\nWrite a greeting." in prompts[0] and '- Example 1: {"who": "ada"}' in prompts[0]
    with pytest.raises(RuntimeError, match="No active log context"):
        oa.get_log_context()


def test_gepas_evaluator_wrapper_under_refract(sqlite_db):
    state = oa.OptimizationState(best_example_evals=[{"score": 1.0, "side_info": {}}])
    seen = []

    def evaluate(candidate, opt_state=None, **kwargs):
        seen.append((candidate, opt_state, kwargs))
        print("printed")
        return 0.5, None

    wrapped = oa.EvaluatorWrapper(evaluate, single_instance_mode=True, str_candidate_mode=True)
    score, output, side = wrapped({"current_candidate": "text"}, opt_state=state)
    assert (score, output, side) == (0.5, None, {"stdout": "printed\n"}) and seen == [("text", state, {})]
    with pytest.raises(ZeroDivisionError):
        oa.EvaluatorWrapper(lambda c: 1 / 0, single_instance_mode=True)({"x": "1"})
    score, _, side = oa.EvaluatorWrapper(lambda c: 1 / 0, single_instance_mode=True, raise_on_exception=False)({"x": "1"})
    assert score == 0.0 and side["error"].startswith("ZeroDivisionError")


def test_the_one_line_port_in_a_fresh_process_needs_no_engine_import_nor_litellm(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import refract_evaluator as oa
        n = []
        def lm(prompt):
            n.append(prompt)
            return "```\\n" + "word " * (len(n) + 1) + "\\n```"
        def evaluate(candidate):
            oa.log("words", len(candidate.split()))
            return min(len(candidate.split()) / 5, 1.0)
        config = oa.GEPAConfig(engine=oa.EngineConfig(max_metric_calls=4), reflection=oa.ReflectionConfig(reflection_lm=lm))
        result = oa.optimize_anything("word", evaluator=evaluate, config=config)
        print(result.best_candidate.split().count("word"), result.total_metric_calls, len(n), "litellm" in sys.modules)
    """)
    env = subprocess_env(tmp_path, REFRACT_DB=f"sqlite:///{tmp_path / 'port.db'}")
    env.pop("REFRACT_LM_PLUGINS", None)  # the test hook would import litellm itself
    out = subprocess.run([PYTHON, "-c", script], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "4", "3", "False"]
