"""The configurations of the batching benchmark (``bench/batching.py``): the shapes run on each
task, the 8-worker rows of issue 35's moonshot, the dollar caps, and the runtime model's shape of
each (its time-to-quality prediction)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from engine.config import SearchConfig
from engine.runtime.model import shape_of

W, BUDGET, MINIBATCH = 4, 240, 3

@dataclass
class Config:
    name: str
    search: dict = field(default_factory=dict)
    gepa: Optional[tuple[int, int]] = None  # (P, N) of GEPA's PxNSampling
    budget: dict = field(default_factory=dict)
    price: float = 0.0
    task: str = "lines"  # the incremental task's layout: "lines", or "grouped" (fixes overlap: merges conflict)
    workers: int = W  # sandboxed workers (Refract) or evaluation threads (GEPA)


def _shape(p: int, k: int, **extra) -> dict:
    return {"parents_per_step": p, "proposals_per_parent": k, **extra}


# every shape names accept and merge_siblings but "4×1 default" (only P set: what a user gets from
# engine.config_checks.default_shape with an LM other than the local model: the siblings merged,
# else the best validated)
CONFIGS = [
    Config("1×1", _shape(1, 1)),
    Config("2×2 all", _shape(2, 2, accept="all", merge_siblings=False)),
    Config("4×1 all", _shape(4, 1, accept="all", merge_siblings=False)),
    Config("8×1 all", _shape(8, 1, accept="all", merge_siblings=False)),
    Config("4×1 best", _shape(4, 1, accept="best", merge_siblings=False)),
    Config("4×1 top_k=2", _shape(4, 1, accept="top_k", top_k=2, merge_siblings=False)),
    Config("4×1 merge", _shape(4, 1, accept="all", merge_siblings=True)),
    Config("4×1 default", _shape(4, 1)),
    Config("async C=4", _shape(4, 1, schedule="async", merge_siblings=False)),
    Config("async C=8", _shape(8, 1, schedule="async", merge_siblings=False)),
    Config("async C=4 merge", _shape(4, 1, schedule="async", merge_siblings=True)),
    Config("async C=8 merge", _shape(8, 1, schedule="async", merge_siblings=True)),
    Config("async C=4 rebase", _shape(4, 1, schedule="async", merge=True, max_merges=1000)),
    Config("GEPA 1×1", gepa=(1, 1)),
    Config("GEPA 4×1", gepa=(4, 1)),
    Config("GEPA 8×1", gepa=(8, 1)),
]
# The overlapping task: the same, with the rules grouped on one line per action (time to quality only).
OVERLAP_CONFIGS = [Config(c.name, c.search, task="grouped") for c in CONFIGS
                   if c.name in ("1×1", "4×1 all", "4×1 merge", "async C=4", "async C=4 merge", "async C=4 rebase")]
# The keywords task (bench/incremental_task.py KEYWORDS): time to quality and best at equal budget,
# GEPA beside.
KEYWORD_CONFIGS = [Config(c.name, c.search, gepa=c.gepa, task="keywords") for c in CONFIGS
                   if c.name in ("1×1", "4×1 all", "4×1 merge", "4×1 default", "async C=4 merge", "async C=8 merge",
                                 "GEPA 1×1", "GEPA 4×1", "GEPA 8×1")]
# 8 workers (issue 35's moonshot: the 1×1 quality 3× sooner), on both tasks; 1×1 with 8 workers too,
# so that the ratio can be taken at equal workers.
WIDE_WORKERS = 8
MOONSHOT_CONFIGS = [Config(f"{c.name} W={WIDE_WORKERS}", c.search, task=t, workers=WIDE_WORKERS)
                    for t in ("lines", "keywords") for c in CONFIGS
                    if c.name in ("1×1", "4×1 merge", "4×1 default", "async C=4 merge")]
# The runtime model's shape of each Refract configuration (its time-to-quality prediction).
SHAPES = {c.name: shape_of(SearchConfig(minibatch_size=MINIBATCH, **c.search))
          for c in CONFIGS + MOONSHOT_CONFIGS if c.gepa is None}
# Dollar caps: the cost budget binds (metric calls are plentiful), LM priced per token.
DOLLAR_CONFIGS = [
    Config("$ cap, 4×1 all", _shape(4, 1, accept="all", merge_siblings=False),
           budget={"max_metric_calls": 100_000, "max_cost_usd": 0.25}, price=2e-5),
    Config("$ cap, async C=8", _shape(8, 1, schedule="async", merge_siblings=False),
           budget={"max_metric_calls": 100_000, "max_cost_usd": 0.25},
           price=2e-5),
]
