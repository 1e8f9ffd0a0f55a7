"""The batching benchmark's simulated reflection LM (bench/incremental_task.py) answers a retry:
told that its answer was the version unchanged, it writes another version from the first prompt,
as a real model does, instead of finding no version in the retry's message (which made every
retry of the keywords task fail and cost a whole LM call)."""

from __future__ import annotations

import re

from bench import incremental_task as task
from engine.search.retries import UNCHANGED_RETRY

FENCED = re.compile(r"```\n(.*?)\n```", re.S)


def test_a_told_retry_is_answered_with_a_new_version_from_the_first_prompt():
    task.set_layout("keywords")
    try:
        task.set_seed(0)
        current = task.make_task(0)["seed"]
        prompt = f"Current version:\n```\n{current}\n```\n\nMissing behaviour [R20] and Missing behaviour [R31]."
        answers = []
        for k in range(20):
            first = task.simulated_lm([{"role": "user", "content": prompt}], {"sample_index": k})
            retry = task.simulated_lm([{"role": "user", "content": prompt}, {"role": "assistant", "content": first},
                                       {"role": "user", "content": UNCHANGED_RETRY}], {"sample_index": k})
            answers.append(FENCED.findall(retry))
        assert all(a for a in answers)  # every retry holds a version
        changed = [a[0] for a in answers if a[0] != current]
        assert len(changed) >= 15 and all("[R20]" in v or "[R31]" in v for v in changed)  # 10 % answer unchanged
    finally:
        task.set_layout("lines")
