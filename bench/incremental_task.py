"""A synthetic *incremental* task and a simulated reflection LM for the batching benchmark.

The artifact is a support-assistant prompt made of rule lines ``- [R07] when …, …``. There are
48 failure modes (R00–R47) with long-tailed frequencies (Zipf): a few are common, most are rare.
Each example (a customer request) needs one to three of them; its score is the fraction of its
needed rules that the prompt has. The evaluator says which behaviour was missing and why, as a
real evaluator's side information would, and sleeps to simulate its latency.

The simulated reflection LM reads the current prompt (the first fenced block of the prompt it is
given — Refract's and GEPA's reflection prompts both put it there) and the "Missing behaviour"
lines of the feedback, and like a real LM it is imperfect:
- usually it adds the rule for one (sometimes two) of the failures it was shown, chosen at
  random, so siblings that saw the same failures often fix different ones;
- sometimes it only rewords (no fix), sometimes it drops an existing rule while fixing one
  (a hidden regression), sometimes it just drops a rule;
- asked to combine versions (Refract's merge prompt) it takes the union of their rules, but
  now and then loses one of them.
Its randomness comes from (the prompt, the sample index, the benchmark seed), so a run is
repeatable. It answers through litellm (the ``scripted`` provider of ``tests.support.scripted_lm``)
with a fixed latency, like any provider.
"""

from __future__ import annotations

import hashlib
import math
import random
import re

N_MODES = 48
ZIPF = 1.5
TOPICS = ["a late order", "a refund", "a damaged item", "a password reset", "an invoice", "a cancellation",
          "a delivery address change", "a discount code", "a warranty claim", "an account deletion",
          "a subscription upgrade", "a missing parcel"]
ACTIONS = ["give the exact policy and its time limit", "offer the self-service link first",
           "escalate to a human when the customer is upset", "ask for the order number before anything else"]
MODES = {f"R{i:02d}": f"when the customer mentions {TOPICS[i % 12]}, {ACTIONS[i // 12]}" for i in range(N_MODES)}
RULE = re.compile(r"^- \[(R\d\d)\] .*$", re.M)
TAG = re.compile(r"\[(R\d\d)\]")
MISSING = re.compile(r"Missing behaviour \[(R\d\d)\]")
FENCE = re.compile(r"(`{3,})[^\n`]*\n(.*?)\n\1", re.S)

HEADER = "You are the support assistant of ACME. Be brief and friendly.\nRules:"

EVALUATOR = '''
import re
import time

LATENCY = {latency!r}
MODES = {modes!r}
TAG = re.compile(r"\\[(R\\d\\d)\\]")


def evaluate(candidate, example):
    time.sleep(LATENCY)
    have = set(TAG.findall(candidate))
    needs = example["needs"]
    missing = [t for t in needs if t not in have]
    score = 1.0 - len(missing) / len(needs)
    if missing:
        feedback = "; ".join(f"Missing behaviour [{{t}}]: the answer did not {{MODES[t]}}" for t in missing)
    else:
        feedback = "All requirements met."
    return score, {{"request": example["request"], "feedback": feedback}}
'''


def evaluator_source(latency: float) -> str:
    return EVALUATOR.format(latency=latency, modes=MODES)


def rule_line(tag: str) -> str:
    return f"- [{tag}] {MODES[tag][0].upper()}{MODES[tag][1:]}."


# The "grouped" layout (the overlapping task): one line per action, listing the topics it applies
# to, ``- Give the exact policy and its time limit when the customer mentions: [R00] a late order;
# [R01] a refund.`` Fixes of one action change the same line, so their merges conflict.
_layout = ["lines"]


def set_layout(layout: str) -> None:
    """"lines", "grouped", or "keywords": the keywords task, one keyword a line (``KEYWORDS``)."""
    assert layout in ("lines", "grouped", "keywords")
    _layout[0] = layout


# The keywords task: a help text must mention each question's keywords, one sentence a line; a
# question needs 2–4 of them, less skewed than the failure modes (Zipf 1.0), and the seed has the
# 8 most common. Its LM does what the keywords task did: each answer adds one or two of
# the missing keywords it is shown, or (10 %) answers the current version unchanged, which the
# engine retries; no rewording, no dropped lines, merges never lose one.
KEYWORDS = {"zipf": 1.0, "needs": ([2, 3, 4], [0.4, 0.4, 0.2]), "seed_tags": 8, "p_unchanged": 0.10}


def _group_head(tag: str) -> str:
    action = ACTIONS[int(tag[1:]) // 12]
    return f"- {action[0].upper()}{action[1:]} when the customer mentions:"


def _item(tag: str) -> str:
    return f"[{tag}] {TOPICS[int(tag[1:]) % 12]}"


def _group_line(head: str, tags: list[str]) -> str:
    return head + " " + "; ".join(_item(t) for t in tags) + "."


def render_rules(tags: list[str]) -> str:
    """The rules for ``tags`` in the current layout (a new prompt's rule block)."""
    if _layout[0] in ("lines", "keywords"):
        return "\n".join(rule_line(t) for t in tags)
    heads = list(dict.fromkeys(_group_head(t) for t in tags))
    return "\n".join(_group_line(h, [t for t in tags if _group_head(t) == h]) for h in heads)


def _weights() -> list[float]:
    zipf = KEYWORDS["zipf"] if _layout[0] == "keywords" else ZIPF
    return [1 / (i + 1) ** zipf for i in range(N_MODES)]


def make_examples(n: int, rng: random.Random, prefix: str) -> list[dict]:
    tags, weights = list(MODES), _weights()
    out = []
    for i in range(n):
        sizes, size_weights = KEYWORDS["needs"] if _layout[0] == "keywords" else ([1, 2, 3], [0.4, 0.4, 0.2])
        k = rng.choices(sizes, weights=size_weights)[0]
        needs: list[str] = []
        while len(needs) < k:
            t = rng.choices(tags, weights=weights)[0]
            if t not in needs:
                needs.append(t)
        topic = TOPICS[int(needs[0][1:]) % 12]
        out.append({"id": f"{prefix}{i:03d}", "request": f"Customer writes about {topic} (case {prefix}{i})",
                    "needs": sorted(needs)})
    return out


def make_task(seed: int, n_train: int = 48, n_val: int = 16, n_test: int = 48) -> dict:
    """Train / val / test examples and a seed prompt (3 of the 8 most common rules), from ``seed``."""
    rng = random.Random(f"incremental-task:{seed}")
    seed_tags = sorted(rng.sample([f"R{i:02d}" for i in range(8)], 3))
    if _layout[0] == "keywords":
        seed_tags = [f"R{i:02d}" for i in range(KEYWORDS["seed_tags"])]
    seed_prompt = HEADER + "\n" + render_rules(seed_tags)
    return {"train": make_examples(n_train, rng, "tr"), "val": make_examples(n_val, rng, "va"),
            "test": make_examples(n_test, rng, "te"), "seed": seed_prompt}


def score(candidate: str, examples: list[dict]) -> float:
    have = set(TAG.findall(candidate))
    return sum(1 - len([t for t in ex["needs"] if t not in have]) / len(ex["needs"]) for ex in examples) / len(examples)


# -- the simulated reflection LM --------------------------------------------------------------

P_REWORD = 0.12  # answers with a reworded prompt, no fix
P_DROP = 0.06  # drops an existing rule, no fix
P_SLOPPY = 0.10  # fixes, but drops an existing rule too
P_TWO = 0.35  # fixes two failures instead of one
P_MERGE_LOSS = 0.15  # a merge loses one of the versions' rules
STYLE = ["Keep answers under five sentences.", "Use the customer's first name.", "Never promise dates you cannot keep.",
         "Close with a short summary.", "Avoid jargon.", "Thank the customer for their patience."]

_seed = [0]


def set_seed(seed: int) -> None:
    _seed[0] = seed


def _rng(text: str, params: dict) -> random.Random:
    h = hashlib.sha256(f"{_seed[0]}|{params.get('sample_index', 0)}|{text}".encode()).hexdigest()
    return random.Random(h)


def _with(text: str, add: list[str], drop: list[str]) -> str:
    """``text`` with the rules of the tags ``add`` added (at the end; in the grouped layout, to
    their action's line) and those of ``drop`` removed; other lines kept."""
    lines = text.splitlines()
    if _layout[0] in ("lines", "keywords"):
        return "\n".join([ln for ln in lines if not any(f"[{t}]" in ln for t in drop)] + [rule_line(t) for t in add])
    for tag in drop + add:
        head = _group_head(tag)
        at = next((i for i, ln in enumerate(lines) if ln.startswith(head)), None)
        tags = TAG.findall(lines[at]) if at is not None else []
        tags = [t for t in tags if t != tag] + ([tag] if tag in add else [])
        line = _group_line(head, tags) if tags else None
        if at is None:
            lines.append(line)
        elif line is None:
            del lines[at]
        else:
            lines[at] = line
    return "\n".join(ln for ln in lines if ln is not None)


def reflect(prompt: str, rng: random.Random) -> str:
    blocks = FENCE.findall(prompt)
    if not blocks:
        return "I cannot find the current version."
    current = blocks[0][1]
    rest = prompt[prompt.index(current) + len(current):]
    have = list(dict.fromkeys(TAG.findall(current)))
    missing = list(dict.fromkeys(t for t in MISSING.findall(rest) if t not in have))
    roll = rng.random()
    if _layout[0] == "keywords":
        if not missing or roll < KEYWORDS["p_unchanged"]:
            return f"The text already covers it.\n```\n{current}\n```"
        picks = rng.sample(missing, min(len(missing), 2 if rng.random() < P_TWO else 1))
        return f"I mentioned {', '.join(picks)}.\n```\n{_with(current, picks, [])}\n```"
    if not missing or roll < P_REWORD:
        new, why = current + f"\n- {rng.choice(STYLE)}", "I made the tone clearer."
    elif roll < P_REWORD + P_DROP and have:
        new, why = _with(current, [], [rng.choice(have)]), "I simplified the rules."
    else:
        picks = rng.sample(missing, min(len(missing), 2 if rng.random() < P_TWO else 1))
        drop = [rng.choice(have)] if have and rng.random() < P_SLOPPY / (1 - P_REWORD - P_DROP) else []
        new, why = _with(current, picks, drop), f"I added rules for {', '.join(picks)}."
    return f"{why}\n```\n{new}\n```"


def merge(prompt: str, rng: random.Random) -> str:
    base = re.search(r"## Base version[^\n]*\n(`{3,})\n(.*?)\n\1", prompt, re.S)
    versions = [m.group(2) for m in re.finditer(r"Full text:\n(`{3,})\n(.*?)\n\1", prompt, re.S)]
    if not versions:
        return "There is nothing to combine."
    start = base.group(2) if base else versions[0]
    seen = set(TAG.findall(start))
    added = [t for v in versions for t in TAG.findall(v) if t not in seen and not seen.add(t)]
    if added and rng.random() < P_MERGE_LOSS and _layout[0] != "keywords":
        added.remove(rng.choice(added))
    return "I combined the versions.\n```\n" + _with(start, added, []) + "\n```"


def latency_seconds(messages: list[dict], params: dict, mean: float, spread: float) -> float:
    """One call's latency: ``mean`` seconds, or with ``spread`` > 0 a log-normal draw of that mean
    (``spread`` is the sigma of its logarithm; 0.5 gives a coefficient of variation of about 0.53, as
    a hosted model's answers of varying length and queueing give). Drawn from the call's own prompt
    and sample index, so a repeated run waits the same."""
    if spread <= 0:
        return mean
    rng = _rng("latency|" + messages[-1]["content"], params)
    return mean * math.exp(rng.gauss(-spread * spread / 2, spread))


def simulated_lm(messages: list[dict], params: dict) -> str:
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = messages[-1]["content"]
    rng = _rng(user, params)
    if not FENCE.search(user) and any(m["role"] == "assistant" for m in messages):
        # A retry: the engine's first exchange, then what was wrong with the answer (no version in
        # it). Until 2026-12-08 this read only that last message, found no version and answered
        # without a block, so every retry failed and cost a whole LM call; it now answers the first
        # prompt anew, as a real model told "unchanged" writes another version.
        first = next(m["content"] for m in messages if m["role"] == "user")
        user, rng = first, _rng(first + "|retry|" + user, params)
    if "You combine improvements" in system:
        return merge(user, rng)
    return reflect(user, rng)
