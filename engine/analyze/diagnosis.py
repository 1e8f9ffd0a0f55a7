"""Analyze, layer 2: a written diagnosis of a run by its reflection LM, from the findings alone.

The LM is given the run's objective and the findings (``engine.analyze``: their titles and what
they mean), nothing else, and asked for the two or three things most worth doing, each
citing the findings it rests on as ``[F1]``. The call goes through ``engine.lm.client`` like
every LM call and is recorded on the run as an LM call of purpose ``analysis`` (its dollars
count in the run's spend, outside the search's budget checks). The answer is a draft: it is
shown with its citations checked (an item that cites no finding, or one that does not exist,
is marked), and nothing in it is ever applied by itself.
"""

from __future__ import annotations

import re
import time
from typing import Iterable, Optional

from storage import repo
from storage.db import Database

from engine.analyze.finding import Finding
from engine.lm.journal import RunJournal

PURPOSE = "analysis"
MAX_FINDINGS = 8  # the most severe ones: a small model reads a short prompt faster and better
MAX_TOKENS = 320
CITE = re.compile(r"\[(F\d+)\]")
TITLE_END = " — "  # in the prompt, between a finding's title and what it means

SYSTEM = ("You advise a person who runs an automatic optimizer of text artifacts. You are given the run's "
          "objective and findings computed from its records. Use only these findings; invent no number.")

ASK = ("Write the 2 or 3 things most worth doing now, most important first, as a numbered list. Each item is one or "
       "two sentences: first what to do, then why, then the findings it rests on in brackets. The form of an item:\n"
       "1. <what to do>, because <why>. [F<n>]\n"
       "Write nothing else.")


def prompt(objective: str, findings: list[Finding]) -> list[dict]:
    """The messages of a diagnosis: the objective and the findings, then what to write."""
    lines = [f"Objective of the run: {objective.strip() or '(not given: the seed is what to improve)'}", "",
             "Findings (most severe first):"]
    for f in findings[:MAX_FINDINGS]:
        # one line per finding, its title before " — " (no title holds one): a recorded diagnosis's cited titles are
        # read back from it. (Title and detail on lines of their own made the local model answer with citations alone.)
        lines.append(f"[{f.id}] ({f.severity}) {f.title}" + (f"{TITLE_END}{f.detail}" if f.detail else ""))
    # no evidence lines: ids and counts tell a model nothing, and a local model reads the prompt at a few dozen
    # tokens a second (the panel shows each finding with its evidence above the draft)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines) + "\n\n" + ASK}]


def parse(answer: str, known: Iterable[str]) -> list[dict]:
    """The answer's items: {"text", "cites": [ids in ``known``], "unknown": [cited ids that are no
    finding]}. An item is a numbered or bulleted line with what follows it up to the next item."""
    known = set(known)
    items: list[str] = []
    for line in (answer or "").splitlines():
        if re.match(r"\s*(\d+[.)]|[-*•])\s+", line):
            items.append(re.sub(r"^\s*(\d+[.)]|[-*•])\s+", "", line).strip())
        elif line.strip() and items:
            items[-1] += " " + line.strip()
    if not items and (answer or "").strip():
        items = [answer.strip()]
    out = []
    for text in items:
        if len(CITE.sub(" ", text).split()) < 3:
            continue  # citations alone, or a word or two: no advice to show
        cited = list(dict.fromkeys(CITE.findall(text)))
        out.append({"text": text, "cites": [c for c in cited if c in known], "unknown": [c for c in cited if c not in known]})
    return out


def reflection_lm(config: dict):
    """The run's reflection LM settings, the answer kept short (a diagnosis, not a candidate)."""
    from engine.config import LMConfig

    lm = LMConfig.model_validate(config.get("reflection_lm") or {})
    # temperature 0: the same findings get the same draft (a small model's sampled drafts ranged from useful
    # advice to a bare list of citations)
    return lm.model_copy(update={"max_tokens": min(lm.max_tokens, MAX_TOKENS), "temperature": 0.0})


def diagnose(db: Database, run_id: str, findings: list[Finding], lm=None) -> dict:
    """Ask the run's reflection LM for the diagnosis and record the call; {"text", "items",
    "lm_call_id", "model", "seconds", "error", "findings"}. ``lm``: an ``LMClient`` (a new one
    by default, with the studio's LM cache)."""
    from engine.lm.client import LMClient

    run = repo.get_run(db, run_id)
    cfg = reflection_lm(run.config or {})
    messages = prompt(str((run.config or {}).get("objective") or ""), findings)
    ids = [f.id for f in findings[:MAX_FINDINGS]]
    journal = RunJournal(db, run_id=run_id, purpose=PURPOSE, candidate_id=None, example_key=None, step=None,
                         model=cfg.model, messages=messages)
    t0 = time.monotonic()
    res = (lm or LMClient()).complete(cfg, messages, journal=journal)
    call_id = journal.ids[-1] if journal.ids else journal.record_unsent(res)
    items = [] if res.error else parse(res.text, ids)
    error = res.error or (None if items else f"the answer held no advice to show: {(res.text or '').strip()[:200]!r}")
    return {"text": res.text or "", "items": items, "lm_call_id": call_id,
            "model": cfg.model, "seconds": round(time.monotonic() - t0, 2), "error": error,
            "findings": [{"id": f.id, "severity": f.severity, "title": f.title} for f in findings[:MAX_FINDINGS]]}


def from_call(call: Optional[dict], findings: list[Finding]) -> Optional[dict]:
    """A recorded diagnosis (``storage.analyze_queries.last_diagnosis``) parsed against ``findings``."""
    if call is None:
        return None
    return {"text": call["answer"], "items": parse(call["answer"], [f.id for f in findings]), "lm_call_id": call["id"],
            "model": call["model"], "seconds": call["seconds"], "error": None}


def as_text(diagnosis: dict) -> str:
    """The diagnosis for the terminal: a draft, each item with the findings it cites."""
    if diagnosis.get("error"):
        return f"written diagnosis: none usable: {diagnosis['error']}"
    lines = [f"Written diagnosis (a draft by {diagnosis['model']}, {diagnosis['seconds']:.1f} s; nothing is applied):"]
    for i, item in enumerate(diagnosis["items"], 1):
        note = "" if item["cites"] else "  (cites no finding)"
        if item["unknown"]:
            note += f"  (cites unknown {', '.join(item['unknown'])})"
        lines.append(f"{i}. {item['text']}{note}")
    return "\n".join(lines)
