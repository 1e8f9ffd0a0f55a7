"""Does the candidate contain the word the example asks for?

Each example is {"id": ..., "word": ...}. Score 1 when the word is one of the candidate's
space-separated words; the side information says which word was expected, which is what the
reflection LM reads.
"""


def validate(candidate):
    """Cheap check before any metric call: words on one line."""
    if "\n" in candidate.strip():
        return "give the words on ONE line, separated by spaces"
    return None


def evaluate(candidate, example):
    words = set(candidate.split())
    ok = example["word"] in words
    if not ok:
        print("missing", example["word"])
    return (1.0 if ok else 0.0), {"expected": example["word"], "got": sorted(words)[:20]}
