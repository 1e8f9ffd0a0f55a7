"""A script that starts a Python-API run, for the Ctrl-C test: ``python -m tests.support.api_script DB_URL``.

It optimizes the toy task (the scripted LM named by REFRACT_SCRIPTED_LM) until interrupted or done."""

from __future__ import annotations

import sys

from engine import optimize_anything
from tests.support import toy
from tests.support.api_evaluators import words

if __name__ == "__main__":
    result = optimize_anything("start", evaluator=words, dataset=toy.dataset(6), db=sys.argv[1], name="interrupted",
                               config={"reflection_lm": {"model": "scripted/toy", "num_retries": 0},
                                       "budget": {"max_metric_calls": 100, "stop_at_score": None},
                                       "search": {"parents_per_step": 1, "proposals_per_parent": 2},
                                       "executor": {"workers": 2}}, progress=False)
    print(f"status {result.status}")
