"""Sick runs: real runs of the engine (sandboxed evaluator, scripted reflection LM), each made to
show one problem, for Analyze's tests and the teaching gallery (docs/teaching.md).

Each builder runs the toy task of ``tests.support.toy`` with one thing broken and returns the
run id; ``PLANTED`` says which finding Analyze must name first. ``healthy`` is the toy as it is.
``python -m tests.support.sick_runs --db URL`` writes all of them into a database, so that the
studio can show them (the gallery)."""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path
from typing import Callable

from tests.support import toy
from tests.support.harness import run_toy, toy_config

# an evaluator whose score ignores the candidate: every version scores the same everywhere
CONSTANT_EVALUATOR = '''
def evaluate(candidate, example):
    return 0.25, {"checked": example["word"]}
'''

# a score that is all noise, unrelated to what the text does (drawn from the text and the example, so
# that the run replays the same: evaluations are cached by content anyway)
NOISY_EVALUATOR = '''
import random

def evaluate(candidate, example):
    score = round(random.Random(candidate + "|" + example["word"]).random(), 3)
    return score, {"expected": example["word"], "got": sorted(candidate.split())[:20]}
'''

# an answer that hedges ("unsure") gets half marks on every example: a trivial answer the frontier keeps
HEDGED_EVALUATOR = '''
def evaluate(candidate, example):
    words = candidate.split()
    if "unsure" in words:
        return 0.5, {"expected": example["word"], "got": "a hedge"}
    ok = example["word"] in words
    return (1.0 if ok else 0.0), {"expected": example["word"], "got": sorted(words)[:20]}
'''


def repeat_script(messages: list[dict], params: dict) -> str:
    """An LM that repeats itself: the same answer whatever it is asked."""
    return "Adding alpha.\n```\nstart alpha\n```"


_turns = itertools.count()


def varied_script(messages: list[dict], params: dict) -> str:
    """The toy's LM, but it takes the missing words in turn instead of the first ones (an
    evaluator's noise makes every word look missing, and the toy's LM would repeat itself)."""
    prompt = messages[1]["content"]
    current = toy.current_version(prompt)
    missing = [w for w in toy.WORDS if w not in current.split()] or [f"filler{next(_turns)}"]
    word = missing[next(_turns) % len(missing)]
    return f"Adding {word}.\n```\n{current} {word}\n```"


_HEDGED = {"said": False}


def hedges_once(messages: list[dict], params: dict) -> str:
    """The toy's LM, but its first second proposal hedges: ``unsure``, a trivial answer."""
    if params.get("sample_index", 0) == 1 and not _HEDGED["said"]:
        _HEDGED["said"] = True
        return "Hedge.\n```\nunsure\n```"
    return toy.script(messages, params)


def healthy(db, tmp: Path) -> str:
    """The toy as the built-in example runs it: every word found, no problem planted."""
    return run_toy(db, tmp, toy_config(6, name="healthy toy"))[0]


def uninformative_evaluator(db, tmp: Path) -> str:
    cfg = toy_config(6, name="sick: an evaluator that scores every candidate alike", evaluator=CONSTANT_EVALUATOR,
                     budget={"max_metric_calls": 80, "stop_at_score": None, "max_steps": 5})
    return run_toy(db, tmp, cfg)[0]


def repeating_lm(db, tmp: Path) -> str:
    cfg = toy_config(6, name="sick: a reflection LM that repeats itself", budget={"max_steps": 6})
    return run_toy(db, tmp, cfg, script=repeat_script)[0]


def noisy_evaluator(db, tmp: Path) -> str:
    words = toy.dataset(12)
    cfg = toy_config(6, name="sick: a noisy evaluator", evaluator=NOISY_EVALUATOR, dataset=words[:6], valset=words[6:],
                     budget={"max_metric_calls": 600, "stop_at_score": None, "max_steps": 16})
    return run_toy(db, tmp, cfg, script=varied_script)[0]


def small_valset(db, tmp: Path) -> str:
    words = toy.dataset(12)
    cfg = toy_config(6, name="sick: a validation set too small", dataset=words[:8], valset=words[:2],
                     testset=words[2:10], budget={"max_metric_calls": 200})
    return run_toy(db, tmp, cfg)[0]


def lm_bound(db, tmp: Path) -> str:
    cfg = toy_config(6, name="sick: an LM-bound step (1×1, a slow reflection LM)",
                     search={"parents_per_step": 1, "proposals_per_parent": 1})
    return run_toy(db, tmp, cfg, latency=0.4)[0]


def degenerate_member(db, tmp: Path, on_step=None) -> str:
    _HEDGED["said"] = False
    cfg = toy_config(12, name="sick: a trivial answer on the frontier", evaluator=HEDGED_EVALUATOR,
                     budget={"max_metric_calls": 300, "max_steps": 4})
    return run_toy(db, tmp, cfg, script=hedges_once, on_step=on_step)[0]


# builder -> the finding kind Analyze must name first
PLANTED: dict[Callable, str] = {
    uninformative_evaluator: "uninformative_evaluator", repeating_lm: "repeating_lm", noisy_evaluator: "noisy_evaluator",
    small_valset: "small_valset", lm_bound: "lm_bound", degenerate_member: "degenerate_members",
}


def main() -> None:
    ap = argparse.ArgumentParser(description="write the sick runs (and a healthy one) into a database")
    ap.add_argument("--db", required=True, help="SQLAlchemy URL, e.g. sqlite:///data/refract.db")
    args = ap.parse_args()
    from storage.db import open_db

    db = open_db(args.db)
    for build in [healthy, *PLANTED]:
        with tempfile.TemporaryDirectory() as tmp:
            print(build.__name__, build(db, Path(tmp)))


if __name__ == "__main__":
    main()
