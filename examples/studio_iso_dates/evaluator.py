"""Score a regex on one example: 1.0 when it accepts a valid date / rejects an invalid one."""
import re


def validate(candidate):
    try:
        re.compile(candidate.strip())
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


def evaluate(candidate, example):
    pattern = candidate.strip()
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        return 0.0, {"error": f"does not compile: {exc}", "input": example["text"]}
    accepted = rx.fullmatch(example["text"]) is not None
    ok = accepted == example["valid"]
    return (1.0 if ok else 0.0), {
        "input": example["text"],
        "expected": "accept" if example["valid"] else "reject",
        "got": "accept" if accepted else "reject",
    }
