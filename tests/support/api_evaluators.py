"""Evaluators for the Python API tests, in an importable module: a subprocess, a process pool
and a resumed run all find the same function here (the toy task of tests/support/toy.py)."""

from __future__ import annotations

import os
import time

import engine  # noqa: F401  (makes refract_evaluator importable in this process)
import refract_evaluator as oa


def words(candidate, example):
    """Score 1 when the example's word is in the candidate; slowed by REFRACT_TEST_EVAL_SLEEP."""
    time.sleep(float(os.environ.get("REFRACT_TEST_EVAL_SLEEP", "0") or 0))
    oa.log("looking for", example["word"], "in process", os.getpid())
    print("checked", example["word"])
    found = example["word"] in candidate.split()
    return (1.0 if found else 0.0), {"expected": example["word"]}


def triage_script(messages: list[dict], params: dict) -> str:
    """Scripted reflection LM for examples/python_api.py: proposes keywords that triage its
    tickets right ("is down", not "down": a ticket asks where to *down*load receipts)."""
    return "Change: name the urgent signals.\n```\nis down, outage, security, error 500\n```"
