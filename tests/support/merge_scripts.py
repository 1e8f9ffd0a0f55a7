"""Scripted reflection LMs for merges: a merge answer as the union of every version's words, or one that drops a fix."""

from __future__ import annotations

import re

from tests.support import toy


def _versions(prompt: str) -> tuple[str, list[str]]:
    base = re.search(r"## Base version[^\n]*\n(`{3,})\n(.*?)\n\1", prompt, re.S)
    versions = [m.group(2) for m in re.finditer(r"Full text:\n(`{3,})\n(.*?)\n\1", prompt, re.S)]
    return (base.group(2) if base else versions[0]), versions


def merging_script(messages, params):
    """toy.script for reflections; a merge answer is the union of every version's words."""
    if "You combine improvements" not in messages[0]["content"]:
        return toy.script(messages, params)
    base, versions = _versions(messages[1]["content"])
    words = list(dict.fromkeys(w for text in [base] + versions for w in text.split()))
    return "Combined.\n```\n" + " ".join(words) + "\n```"


def lossy_merging_script(messages, params):
    """A merge answer that keeps the base and the first version's new words only: it drops a fix."""
    if "You combine improvements" not in messages[0]["content"]:
        return toy.script(messages, params)
    base, versions = _versions(messages[1]["content"])
    return "Combined.\n```\n" + " ".join(dict.fromkeys(base.split() + versions[0].split() + ["extra"])) + "\n```"
