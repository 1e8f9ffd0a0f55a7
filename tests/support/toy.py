"""A toy task with a known optimum, and a scripted reflection LM that solves it step by step.

The candidate is a list of words; example i asks for the word ``w_i``; the score is 1 when
the word is in the candidate. The scripted LM reads the current version and the failing
examples from the reflection prompt and adds the first (proposal 0) or second (proposal 1…)
missing word, so siblings fix different failures — the incremental task of docs/benchmarks-batching.md.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

# the evaluator of the built-in example examples/toy_words: one source for the example and the tests
EVALUATOR = (Path(__file__).resolve().parents[2] / "examples" / "toy_words" / "evaluator.py").read_text()

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima"]


def dataset(n: int = 8) -> list[dict]:
    return [{"id": f"w{i}", "word": w} for i, w in enumerate(WORDS[:n])]


def current_version(prompt: str) -> str:
    m = re.search(r"## Current version\n(`{3,})\n(.*?)\n\1", prompt, re.S)
    return m.group(2) if m else ""


def missing_words(prompt: str) -> list[str]:
    out = []
    for m in re.finditer(r"### Example `[^`]*` — score ([0-9.]+)\n\n\*\*Input / expected:\*\*\n```json\n(.*?)\n```", prompt, re.S):
        if float(m.group(1)) < 1:
            out.append(json.loads(m.group(2))["word"])
    return sorted(set(out))


def diagnosis(prompt: str) -> str:
    """Analyze's written diagnosis (``engine.analyze.diagnosis``), as a small model might write it:
    the first two findings listed, each cited."""
    ids = re.findall(r"^\[(F\d+)\]", prompt, re.M)[:2]
    return "\n".join(f"{i}. Deal with {fid} before anything else: it explains the rest. [{fid}]"
                     for i, fid in enumerate(ids, 1)) or "Nothing to do."


def script(messages: list[dict], params: dict) -> str:
    """Add one missing word; which one depends on the proposal's sample index. (Asked for a
    written diagnosis of a run instead, answer one: ``diagnosis``.)"""
    prompt = messages[1]["content"]
    if "Findings (most severe first):" in prompt:
        return diagnosis(prompt)
    current = current_version(prompt)
    missing = [w for w in missing_words(prompt) if w not in current.split()]
    if not missing:
        return "No change needed.\n```\n" + current + " " + "extra\n```"
    word = missing[min(params.get("sample_index", 0), len(missing) - 1)]
    return f"Adding {word}.\n```\n{current} {word}\n```"


_fillers = itertools.count()


def endless(messages: list[dict], params: dict) -> str:
    """Like ``script``, but never runs out of new proposals: once no word is missing it adds a
    fresh filler word (never an improvement, never a repeat), so a run only ends by its budget."""
    prompt = messages[1]["content"]
    current = current_version(prompt)
    if [w for w in missing_words(prompt) if w not in current.split()]:
        return script(messages, params)
    return f"Padding.\n```\n{current} filler{next(_fillers)}\n```"
