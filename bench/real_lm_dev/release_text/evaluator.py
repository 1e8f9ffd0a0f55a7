"""Keyword scorer: the share of the question's keywords the help text contains, with a length
penalty past 100 words."""

LIMIT = 100


def evaluate(candidate, example):
    text = candidate.lower()
    keywords = example["keywords"]
    missing = [k for k in keywords if k.lower() not in text]
    words = len(candidate.split())
    score = (len(keywords) - len(missing)) / len(keywords)
    if words > LIMIT:
        score *= LIMIT / words
    info = {"question": example["question"], "words": words}
    if missing:
        info["missing"] = missing
    if words > LIMIT:
        info["too_long"] = f"{words} words, the limit is {LIMIT}"
    return score, info
