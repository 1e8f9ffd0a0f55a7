"""DaskExecutor on a LocalCluster: the same scores as LocalPool, the same containment."""

from __future__ import annotations

import os
import random

import pytest

from engine.config import ExecutorConfig
from engine.executor import EvalTask
from engine.sandbox import make_executor
from engine.sandbox.pool import LocalPool
from engine.sandbox.worker_process import SandboxSpec

EVALUATOR = '''
import math, os
import refract_evaluator as oa
from refract_evaluator import lm

def validate(candidate):
    return None if candidate.strip() else "the candidate is empty"

def evaluate(candidate, example):
    if candidate == "hang":
        while True:
            pass
    if candidate == "ask":
        return len(lm("hello"))
    oa.log("uid", os.getuid())
    overlap = len(set(candidate) & set(example["text"]))
    score = overlap / max(1, len(set(example["text"])))
    return score, {"scores": {"length": math.log1p(len(candidate))}, "expected": example["text"]}
'''


@pytest.fixture(scope="module")
def dask_executor():
    ex = make_executor(ExecutorConfig(backend="dask", address="local", workers=2, timeout_seconds=1.5,
                                      memory_mb=256), EVALUATOR)
    yield ex
    ex.close()


def test_dask_gives_the_same_scores_as_the_local_pool(dask_executor):
    rng = random.Random(42)
    examples = [{"text": "".join(rng.choice("abcdefgh") for _ in range(8))} for _ in range(6)]
    candidates = ["abc", "defgh", "hgfedcba"]
    tasks = [EvalTask(c, e) for c in candidates for e in examples]
    local = LocalPool(SandboxSpec(timeout_seconds=1.5, memory_mb=256), EVALUATOR, 2)
    try:
        expected = [f.result() for f in [local.submit(t) for t in tasks]]
    finally:
        local.close()
    got = [f.result(timeout=60) for f in [dask_executor.submit(t) for t in tasks]]
    assert [o.error for o in got] == [None] * len(tasks)
    assert [(o.score, o.side_info) for o in got] == [(o.score, o.side_info) for o in expected]
    if os.geteuid() == 0:  # the same privilege drop on the Dask workers
        assert got[0].side_info["log"] == "uid 65534\n"
    assert dask_executor.busy_seconds() > 0 and dask_executor.workers == 2


def test_dask_contains_a_hanging_evaluator_and_goes_on(dask_executor):
    out = dask_executor.submit(EvalTask("hang", {"text": "x"})).result(timeout=60)
    assert out.error and "timed out after 1.5 s" in out.error
    assert dask_executor.submit(EvalTask("x", {"text": "x"})).result(timeout=60).score == 1.0


def test_dask_says_lm_is_unsupported(dask_executor):
    out = dask_executor.submit(EvalTask("ask", {"text": "x"})).result(timeout=60)
    assert "lm() is not supported with the Dask executor" in out.error


def test_dask_runs_validate(dask_executor):
    assert dask_executor.validate("abc") is None
    assert dask_executor.validate("  ") == "the candidate is empty"


def test_a_whole_run_on_dask_matches_the_local_pool(tmp_path):
    """The issue's CI check: the same seeded run on a LocalCluster and on the local pool."""
    from storage import repo
    from storage.db import Database
    from tests.support.harness import by_content, run_toy, toy_config

    results = {}
    for backend in ("local", "dask"):
        db = Database(f"sqlite:///{tmp_path / backend}.db")
        db.create_all()
        cfg = toy_config(6, executor={"backend": backend, "address": "local" if backend == "dask" else None,
                                      "workers": 2, "timeout_seconds": 20},
                         budget={"max_steps": 3, "stop_at_score": None})
        run_id, _ = run_toy(db, tmp_path / backend, cfg)
        content = by_content(db, run_id)
        run = repo.get_run(db, run_id)
        results[backend] = (sorted((content[c.id], c.status, c.val_mean) for c in repo.list_candidates(db, run_id)),
                            run.metric_calls, run.best_val_mean, run.status)
        db.dispose()
    assert len(results["local"][0]) > 3
    assert results["dask"] == results["local"]
