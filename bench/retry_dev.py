"""After an unchanged answer in prose, which retry wording does the local model answer best?

On a development task (``bench/real_lm_dev/``, never a frozen one of ``bench/real_lm.py``) and each of N
minibatches (3 training examples drawn with ``random.Random(i)``), the seed is scored on the minibatch
and the local model answers the engine's reflection prompt once (temperature 0.7, the engine's answer
cap, seed i). When that first answer is the seed unchanged (the small model's commonest answer on a
prompt task), each retry wording is sent after it, as the engine sends a retry (the first exchange, then
the wording; temperature 1.0, 128 more answer tokens), twice with seeds 100·i and 100·i + 1. Each
retry's text is parsed as the engine parses it and scored on the validation split (an unusable answer
keeps the seed's score). "Copies the prompt" counts usable texts holding a section of the reflection
prompt itself ("## Objective", "Objective:", "What you are improving", "Keep its kind", …).

Wordings: ``list`` (before 2026-12-07: list the rules first, then the version with them written in),
``sentences`` (``engine.search.retries.UNCHANGED_RETRY``: the current text with sentences added that
state the rules the failing examples break) and ``three_lines`` (at most three lines of rules before the
fence, then the version with them added; ``--wordings list,sentences`` leaves it out).

Run: ``.venv/bin/python bench/retry_dev.py [--task defect_prompt] [--minibatches 16] [--first 0]
[--wordings list,sentences,three_lines] [--raw FILE] [--out FILE]``; ``--report`` rebuilds the page from ``--raw``. The raw rows are appended as
they come, so two processes (one per core, different ``--first``) can share a file.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_lm import append_row, raw_rows  # noqa: E402
from reflection_dev import ROOT, _arg, seed_feedback  # noqa: E402

RAW = ROOT / "docs" / "benchmarks-retry-dev.jsonl"
OUT = ROOT / "docs" / "benchmarks-retry-dev.md"
# the retry wording before 2026-12-07, for the "list" arm
LIST_RETRY = ("That is the current version, unchanged: it gets the failing examples wrong. First list, as short "
              "lines, the rules from the objective, the background and the expected outputs that the current "
              "version does not state or follow (whoever or whatever reads it sees only it). Then give the "
              "complete new version, with those rules written into it, in one fenced code block.")
# a shorter list, kept before the fence (tried on the first minibatches, then dropped: fewer usable answers)
THREE_LINES_RETRY = ("That is the current version, unchanged: it gets the failing examples wrong. Below the fence, "
                     "nothing; before it, at most three short lines naming the rules from the objective, the background "
                     "and the expected outputs that the current version does not state (whoever or whatever reads it "
                     "sees only it). Then one fenced code block: the current version with those rules added to it as "
                     "plain sentences, without this conversation's headings.")
# sections of the reflection prompt that a retry's answer should never carry into the artifact
PROMPT_SECTIONS = ("## Objective", "Objective:", "**Objective", "## Background", "Background:",
                   "What you are improving", "Keep its kind")


def wordings() -> dict[str, str]:
    from engine.search.retries import UNCHANGED_RETRY

    return {"list": LIST_RETRY, "sentences": UNCHANGED_RETRY, "three_lines": THREE_LINES_RETRY}


def run_minibatch(task_name: str, i: int) -> list[dict]:
    import litellm

    import real_lm as H
    from engine.search import reflection as R
    from engine.search.retries import RULES_TOKENS, told_retry

    task, evaluate, feedback = seed_feedback(task_name, i)
    seed_val = H.mean_score(evaluate, task["seed"], task["val"])
    messages = R.build_prompt(kind="", objective=task["objective"], background=task["background"],
                              component="candidate", components=["candidate"], current_text=task["seed"],
                              feedback=feedback, human_feedback=[], tried=[], compact=True).messages
    cap = R.answer_token_cap(task["seed"], 2000)
    started = time.monotonic()
    first = litellm.completion(model=H.LOCAL, messages=messages, temperature=0.7, max_tokens=cap, seed=i)
    first_text = first.choices[0].message.content or ""
    parsed = R.parse_answer(first_text, task["seed"])
    rows = [{"task": task_name, "minibatch": i, "wording": "first", "seconds": round(time.monotonic() - started, 1),
             "reason": parsed.reason, "seed_val": seed_val,
             "val": H.mean_score(evaluate, parsed.text, task["val"]) if parsed.text else seed_val}]
    if parsed.reason != R.UNCHANGED:
        return rows
    chosen = _arg("--wordings", ",".join(wordings())).split(",")
    for name, told in ((n, t) for n, t in wordings().items() if n in chosen):
        for sample in (0, 1):
            started = time.monotonic()
            r = litellm.completion(model=H.LOCAL, messages=told_retry(messages, first_text, told), temperature=1.0,
                                   max_tokens=cap + RULES_TOKENS, seed=100 * i + sample)
            q = R.parse_answer(r.choices[0].message.content or "", task["seed"])
            rows.append({"task": task_name, "minibatch": i, "wording": name, "sample": sample,
                         "seconds": round(time.monotonic() - started, 1), "tokens": r.usage.completion_tokens,
                         "reason": q.reason, "seed_val": seed_val,
                         "copies_prompt": bool(q.text and any(x in q.text for x in PROMPT_SECTIONS)),
                         "val": H.mean_score(evaluate, q.text, task["val"]) if q.text else seed_val,
                         "text": (q.text or "")[:600]})
    return rows


def summary(rows: list[dict]) -> dict[str, dict]:
    """Per wording: retries, usable, copies of the prompt, above the seed, mean val, mean tokens and seconds."""
    out = {}
    for name in wordings():
        rs = [r for r in rows if r["wording"] == name]
        if rs:
            out[name] = {"retries": len(rs), "usable": sum(not r["reason"] for r in rs),
                         "copies_prompt": sum(r["copies_prompt"] for r in rs),
                         "above_seed": sum(r["val"] > r["seed_val"] for r in rs),
                         "mean_val": statistics.fmean(r["val"] for r in rs),
                         "tokens": statistics.fmean(r["tokens"] for r in rs),
                         "seconds": statistics.fmean(r["seconds"] for r in rs)}
    return out


def write_page(rows: list[dict], out: Path) -> None:
    from engine.search.reflection import UNCHANGED

    firsts = [r for r in rows if r["wording"] == "first"]
    retried = sorted({(r["task"], r["minibatch"]) for r in rows if r["wording"] != "first"})
    tasks = ", ".join(sorted({f"`{r['task']}`" for r in rows}))
    lines = ["# Benchmark: the retry after an unchanged answer in prose", "",
             "Produced by `bench/retry_dev.py` (the method is in its docstring) with the local model "
             f"(`local/qwen2.5-coder-1.5b`) on the development task {tasks}, not a frozen one of "
             f"`docs/benchmarks-real-lm.md`. First answers: {len(firsts)}, of which "
             f"{sum(r['reason'] == UNCHANGED for r in firsts)} were the seed "
             f"unchanged; {len(retried)} of those got the retries, two samples per wording, after the same first exchange "
             "(`three_lines` only on the first minibatches, then dropped; a run stopped in the middle of a minibatch "
             "leaves it with fewer).",
             "", "| wording | retries | usable | copies the reflection prompt | above the seed on val | mean val (seed) "
             "| answer tokens | seconds |", "|---|---|---|---|---|---|---|---|"]
    seed_val = firsts[0]["seed_val"] if firsts else 0.0
    for name, s in summary(rows).items():
        lines.append(f"| {name} | {s['retries']} | {s['usable']} | {s['copies_prompt']} | {s['above_seed']} | "
                     f"{s['mean_val']:.3f} ({seed_val:.3f}) | {s['tokens']:.0f} | {s['seconds']:.1f} |")
    lines += ["", "Seconds are one answer's, on one core (the first exchange's prefix already processed)."]
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return
    raw, out = Path(_arg("--raw", RAW)), Path(_arg("--out", OUT))
    if "--report" not in sys.argv:
        from engine.lm.providers import register_builtin_providers

        register_builtin_providers()
        task, first = _arg("--task", "defect_prompt"), int(_arg("--first", 0))
        done = {(r["task"], r["minibatch"]) for r in raw_rows(raw)}
        for i in range(first, first + int(_arg("--minibatches", 16))):
            if (task, i) in done:
                continue
            for row in run_minibatch(task, i):
                append_row(raw, row)
                print(task, i, row["wording"], row["seconds"], "s", row["reason"] or "usable", f"val {row['val']:.3f}",
                      flush=True)
    write_page(raw_rows(raw), out)


if __name__ == "__main__":
    main()
