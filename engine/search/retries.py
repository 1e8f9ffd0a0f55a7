"""What a reflection's retry is told after an unusable first answer, by what was wrong with it."""

from __future__ import annotations

from engine.search.reflection import CHANGE_ONLY, NO_FENCE, UNCHANGED


# what a retry is asked after being told what was wrong with the first answer
ASK_AGAIN = "Make a different, concrete change that fixes the failing examples, and answer again with one fenced code block."
# An unchanged answer is the small model's commonest (most first answers on a prompt task): told
# only "unchanged", it reworded the question or copied it again (0 of 9 retries scored on the
# training set). Asked for the rules the version does not state, written into it, it writes a version
# whose reader is told what the expected outputs need (as GEPA's best prompt-task answers restate the
# background). Asked to *list* them first (the wording before 2026-12-07), it put the list and copies
# of this prompt's own sections ("## Objective", "Keep its kind") inside the fence: 12 of 16 retries
# on the development prompt task, 210 answer tokens on average; asked to add sentences to the current
# text, 0 of 15 carried such a copy, in 85 tokens (half the time), and 8 of 15 scored above the seed on
# the validation set against 4 of 16 (the same unchanged first answers of 8 minibatches, two samples each).
UNCHANGED_RETRY = ("That is the current version, unchanged: it gets the failing examples wrong. Whoever reads it sees "
                   "only it, so it must say every rule the expected outputs follow. Write the complete new version: "
                   "the current text with short sentences added that state the rules the failing examples break (the "
                   "exact form of the answer too). Answer with one fenced code block holding only the new version.")
RULES_TOKENS = 128  # more answer tokens for the rules, on the local model
# Only for prose (``is_prose``: a prompt, a help text), where rules can be written into the version.
# Asked for the rules, the 1.5B model put them in a fenced block of their own before the unchanged
# function, so the new "code" was the list (a SyntaxError): on two development code tasks 18 such
# retries, 11 SyntaxErrors, none improved, each 55-72 s on one core (a quarter of a 240 s run). On a
# development regex task it fenced the objective itself, or the list, as the new "regular expression":
# 11 of 13 rules-list retries in three runs, answers of 130-440 tokens (five cut at the cap) where its
# other answers took 46 (median); the three that "improved" matched nothing (which wins on every
# invalid input). A notation is told only that it is unchanged.
UNCHANGED_TOLD_RETRY = f"That is the current version, unchanged: it gets the failing examples wrong.\n{ASK_AGAIN}"

# unusable answers worth one retry, and what the retry is told
RETRIED = {UNCHANGED: UNCHANGED_RETRY,
           # a small model often stops after its `Change:` line: asked again (its prompt already read,
           # so the retry costs the answer only), it writes the block
           NO_FENCE: f"Your answer has no fenced code block, so it holds no new version.\n{ASK_AGAIN}",
           CHANGE_ONLY: "Your fenced block held only the `Change:` line. The `Change:` line goes before the fence; "
                        f"inside the fence goes the complete new version.\n{ASK_AGAIN}"}


def told_retry(messages: list[dict], answer: str, told: str) -> list[dict]:
    """The first call's messages, its answer and what was wrong with it, so the retry is told (and
    sampled a little hotter). The whole first exchange is the retry's prefix, which a local runtime
    has already processed. Not for the local model's repeated answer: shown its own answer again, it
    gave the same one again; it gets the same messages sampled anew (its own seed, hotter), whose
    prefix the runtime has processed too. Its unchanged answer is told: on a regex prompt it had
    answered unchanged, 4 of 4 told retries changed it against 1 of 4 resamples, each in a third of
    the time (the answer is the only new text)."""
    return messages + [{"role": "assistant", "content": answer}, {"role": "user", "content": told}]
