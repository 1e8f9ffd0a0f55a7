"""Single-task evaluator: the candidate is the answer. Sub-scores are extra objectives."""


def evaluate(candidate):
    text = candidate.strip()
    words = text.split()
    checks = {
        "short": 1.0 if len(words) <= 12 else max(0.0, 1 - (len(words) - 12) / 12),
        "mentions_prompt": 1.0 if "prompt" in text.lower() else 0.0,
        "ends_with_period": 1.0 if text.endswith(".") else 0.0,
        "calm": 0.0 if "!" in text else 1.0,
    }
    score = sum(checks.values()) / len(checks)
    failed = [name for name, v in checks.items() if v < 1]
    return score, {"scores": checks, "feedback": "failed checks: " + (", ".join(failed) or "none"), "words": len(words)}
