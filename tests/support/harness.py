"""Running whole optimizations in tests: a toy config, an LM client with its own cache, and
helpers that run a run to its end in this process (real sandbox pool, scripted LM).

Every run gets an ``LMClient`` whose disk cache lives in the test's tmp_path: a shared cache
would answer a second run from the first one's calls (cost $0, cached=True) and hide bugs.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

from engine.lm.client import LMClient  # first: offline price map before litellm is imported elsewhere

from engine.config import RunConfig, parse_config
from engine.optimizer import Optimizer
from engine.runs import submit_run
from tests.support.scripted_lm import SUBPROCESS_ENV, install_script
from storage import leases, repo
from storage.db import Database
from storage.models import Evaluation, LMCall
from tests.support import toy

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def toy_data(n: int = 6, **over: Any) -> dict:
    """The toy task of tests/support/toy.py as a config dict (before validation)."""
    base = {
        "name": "toy",
        "seed_candidate": "start",
        "evaluator": toy.EVALUATOR,
        "dataset": toy.dataset(n),
        # every improving child validated, no sibling merge: the shape the toy's tests count on (not the
        # default of a 2×2 step, engine.config.default_shape)
        "search": {"parents_per_step": 2, "proposals_per_parent": 2, "minibatch_size": 3, "seed": 0,
                   "accept": "all", "merge_siblings": False},
        "budget": {"max_metric_calls": 300, "stop_at_score": 1.0},
        "reflection_lm": {"model": "scripted/toy", "num_retries": 0},
        "executor": {"workers": 2, "timeout_seconds": 20},
    }
    return deep_merge(base, over)


def toy_config(n: int = 6, **over: Any) -> RunConfig:
    return parse_config(toy_data(n, **over))


def toy_project(folder: Path, name: str, tables: str) -> Path:
    """The toy task as files, as a user writes them: evaluator.py, train.jsonl (6 words) and
    run.toml (the top-level keys, then ``tables``: the TOML tables, e.g. ``[search]``). Returns
    the TOML's path."""
    import json
    import textwrap

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evaluator.py").write_text(toy.EVALUATOR)
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in toy.dataset(6)))
    head = (f'name = "{name}"\nseed_candidate = "start"\nevaluator_file = "evaluator.py"\n'
            'dataset_file = "train.jsonl"\n')
    (folder / "run.toml").write_text(head + textwrap.dedent(tables))
    return folder / "run.toml"


def lm_client(tmp_path: Path) -> LMClient:
    return LMClient(tmp_path / "lm-cache", sleep=lambda _s: None, backoff_base=0.0)


WORKER, LEASE = "test-worker", 60.0


def run_optimizer(db: Database, run_id: str, tmp_path: Path, on_step: Optional[Callable] = None) -> str:
    """Claim ``run_id`` like a worker would and run it to wherever it stops; the status."""
    assert leases.claim_run(db, WORKER, LEASE, run_id=run_id) == run_id
    return _run_held(db, run_id, tmp_path, on_step)


def _run_held(db: Database, run_id: str, tmp_path: Path, on_step: Optional[Callable] = None) -> str:
    try:
        return Optimizer(db, run_id, lm=lm_client(tmp_path), on_step=on_step).run()
    finally:
        leases.release_run(db, run_id, WORKER)


def run_toy(db: Database, tmp_path: Path, cfg: RunConfig | None = None, script=toy.script, latency: float = 0.0,
            price: float = 0.0, on_step: Optional[Callable] = None):
    """Submit ``cfg`` (default: the toy) and run it to its end. Returns (run id, script stats).
    The run is stored already held by this process (as ``python -m engine run`` does), so that
    a studio's worker polling the same database cannot take it first."""
    stats = install_script(script, latency=latency, price_per_token=price)
    run_id = submit_run(db, cfg or toy_config(), held_by=(WORKER, LEASE))
    _run_held(db, run_id, tmp_path, on_step=on_step)
    return run_id, stats


# ---------------------------------------------------------------- reading a run back


def evaluations(db: Database, run_id: str) -> list[tuple[Evaluation, str, str]]:
    """(evaluation, example key, split) for every evaluation row of a run."""
    examples = {e.pk: e for e in repo.get_examples(db, run_id)}
    return [(ev, examples[ev.example_pk].key, examples[ev.example_pk].split) for ev in repo.evaluations_for(db, run_id)]


def lm_calls(db: Database, run_id: str) -> list[LMCall]:
    return repo.lm_calls_for(db, run_id)


def paid_search_evaluations(db: Database, run_id: str) -> int:
    """Evaluations that cost a metric call: not cached, not on the held-out test split."""
    return sum(1 for ev, _, split in evaluations(db, run_id) if not ev.cached and split != "test")


def assert_consistent_totals(db: Database, run_id: str) -> None:
    """What the run's counters say equals what its rows say."""
    run = repo.get_run(db, run_id)
    evs = evaluations(db, run_id)
    assert run.metric_calls == paid_search_evaluations(db, run_id)
    pairs = Counter((ev.candidate_id, ev.example_pk) for ev, _, _ in evs)
    assert max(pairs.values(), default=1) == 1, "an evaluation was recorded twice"
    calls = lm_calls(db, run_id)
    # the held-out test pass's LM dollars are kept apart from the budgeted ones
    assert abs(run.cost_usd - sum(c.cost_usd for c in calls if c.purpose != "test")) < 1e-9
    assert abs(run.test_cost_usd - sum(c.cost_usd for c in calls if c.purpose == "test")) < 1e-9
    assert run.tokens_in == sum(c.tokens_in for c in calls)
    assert run.tokens_out == sum(c.tokens_out for c in calls)
    steps = repo.list_steps(db, run_id)
    assert run.steps_done == sum(1 for s in steps if s.ended_at is not None)
    assert sum(s.metric_calls for s in steps) <= run.metric_calls  # the seed's pass is in no step


def paid_twice(db: Database, base_id: str, branch_id: str) -> int:
    """Evaluations a branch paid for (not cached) of a text on an example (the same payload) its
    base run had already evaluated it on: what a branch must never do."""
    def pairs(run_id: str):
        payloads = {ex.pk: json.dumps(ex.payload, sort_keys=True) for ex in repo.get_examples(db, run_id)}
        return [(ev, (ev.content_hash, payloads[ev.example_pk])) for ev in repo.evaluations_for(db, run_id)]

    known = {pair for _, pair in pairs(base_id)}
    return sum(1 for ev, pair in pairs(branch_id) if not ev.cached and pair in known)


def by_content(db: Database, run_id: str) -> dict[str, str]:
    """candidate id -> its content as one string (ids differ between runs; contents do not)."""
    return {c.id: repr(sorted(c.content.items())) for c in repo.list_candidates(db, run_id)}


def subprocess_env(tmp_path: Path, **extra: str) -> dict:
    """Environment for ``python -m engine`` subprocesses: the repo importable, the toy's
    scripted LM (loaded through the engine's plug-in hook), and data (LM cache) under tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFRACT_")}
    env.update(PYTHONPATH=str(ROOT), REFRACT_DATA=str(tmp_path / "data"),
               REFRACT_SCRIPTED_LM="tests.support.toy:script", LITELLM_LOCAL_MODEL_COST_MAP="True", **SUBPROCESS_ENV)
    env.update(extra)
    return env
