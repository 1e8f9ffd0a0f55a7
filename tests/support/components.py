"""A two-component toy task (a, b) and a scripted LM that adds to the component being rewritten the word its failing examples ask for."""

from __future__ import annotations

import json
import re

from tests.support import toy
from tests.support.harness import toy_config


MULTI_EVALUATOR = '''
def evaluate(candidate, example):
    ok = example["word"] in candidate[example["component"]].split()
    return float(ok), {"component": example["component"], "expected": example["word"]}
'''


MULTI_DATA = [{"id": "a0", "component": "a", "word": "alpha"}, {"id": "a1", "component": "a", "word": "bravo"},
              {"id": "b0", "component": "b", "word": "charlie"}, {"id": "b1", "component": "b", "word": "delta"}]


def _component_script(messages, params):
    """Adds to the component being rewritten the first word its failing examples ask for."""
    prompt = messages[1]["content"]
    component = re.search(r"the component `(\w+)` of a multi-part candidate", prompt).group(1)
    current = toy.current_version(prompt)
    failing = []
    for m in re.finditer(r"### Example `[^`]*` — score ([0-9.]+)\n\n\*\*Input / expected:\*\*\n```json\n(.*?)\n```",
                         prompt, re.S):
        row = json.loads(m.group(2))
        if float(m.group(1)) < 1 and row["component"] == component and row["word"] not in current.split():
            failing.append(row["word"])
    word = sorted(failing)[0] if failing else "extra"
    return f"```\n{current} {word}\n```"


def _multi_config(**over):
    base = dict(seed_candidate={"a": "start", "b": "start"}, evaluator=MULTI_EVALUATOR, dataset=MULTI_DATA,
                search={"parents_per_step": 1, "proposals_per_parent": 2, "minibatch_size": 4},
                budget={"max_steps": 1, "stop_at_score": None})
    base.update(over)
    return toy_config(**base)
