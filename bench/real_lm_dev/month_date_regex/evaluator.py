"""Score a regex on one example: 1 when re.fullmatch's decision is right."""

import re


def evaluate(candidate, example):
    try:
        pattern = re.compile(candidate.strip())
    except re.error as exc:
        return 0.0, {"input": example["text"], "error": f"the regex does not compile: {exc}"}
    matched = pattern.fullmatch(example["text"]) is not None
    if matched == example["match"]:
        return 1.0, {"input": example["text"], "result": "correct"}
    if example["match"]:
        return 0.0, {"input": example["text"], "result": "rejected, but it is a valid date"}
    return 0.0, {"input": example["text"], "result": f"matched, but it is not a valid date ({example['why']})"}
