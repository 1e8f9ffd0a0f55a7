"""Does the candidate regex accept exactly the valid ISO dates (YYYY-MM-DD)?

Each example is {"text": ..., "match": true/false}. Score 1 when the regex's verdict
(re.fullmatch) agrees with "match"; the side information says what went wrong, which is what
the reflection LM reads.
"""

import re


def validate(candidate):
    """Cheap check before any metric call: one line, and a regular expression that compiles."""
    text = candidate.strip()
    if "\n" in text:
        return "the answer must be a regular expression on ONE line, not code or prose"
    if text.startswith(("import ", "def ", "re.")) or re.match(r"""^\(?\s*[rRbBuU]?['"]""", text):
        return ("give the bare regular expression itself (e.g. \\d{4}), not Python code, "
                "not a quoted string literal, not r'...'")
    try:
        re.compile(text)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


def evaluate(candidate, example):
    pattern = re.compile(candidate.strip())
    matched = pattern.fullmatch(example["text"]) is not None
    ok = matched == example["match"]
    if ok:
        verdict = "correct"
    elif example["match"]:
        verdict = f"WRONG: {example['text']!r} is a valid date but the regex rejects it"
    else:
        verdict = f"WRONG: {example['text']!r} is not a valid date ({example['why']}) but the regex accepts it"
    return (1.0 if ok else 0.0), {"verdict": verdict}
