"""One reflection, three prompts: which does the local model answer best on the development tasks?

For each task of ``bench/real_lm_dev/`` (tasks kept apart from the frozen ones of
``bench/real_lm.py``, for trying changes) and each of N minibatches (3 training examples drawn with
``random.Random(i)``), the seed is scored on the minibatch, and the local model answers ONE
reflection on that feedback per prompt variant (temperature 0.7, the engine's answer cap, seed i).
The answer is parsed as the engine parses it and its text scored on the task's validation split
(an unusable answer counts as the seed's score). Variants:

- ``change``: the reflection prompt before 2026-12-03 (name one change on a `Change:` line, then the block);
- ``rules``: ``engine.search.reflection`` as it is (work out the rules the current version misses);
- ``gepa``: GEPA 0.1.4's own ``optimize_anything`` reflection template, filled by GEPA's own renderer.

Run: ``.venv/bin/python bench/reflection_dev.py [--minibatches 6] [--variants change,rules,gepa]
[--tasks defect_prompt,...] [--raw FILE] [--out FILE]``; ``--report`` rebuilds the page from ``--raw``.
Rows already in ``--raw`` are not run again.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from real_lm import append_row, raw_rows  # noqa: E402

DEV = ROOT / "bench" / "real_lm_dev"
RAW = ROOT / "docs" / "benchmarks-reflection-dev.jsonl"
OUT = ROOT / "docs" / "benchmarks-reflection-dev.md"
VARIANTS = ("change", "rules", "gepa")
# the texts of the prompt before the change, for the "change" variant
CHANGE_TASK = (
    "Study the feedback: find why the low-scoring examples fail and keep what works. First write ONE "
    "line that starts with `Change:` and names the concrete change that makes the failing examples "
    "pass while keeping the passing ones passing. Then give one fenced code block holding the complete "
    "new {kind_short} — only {kind}, nothing else inside the fence.")
CHANGE_REMINDER = "## Task\nWrite the `Change:` line, then one fenced code block holding the complete new {kind_short} ({kind})."


def _arg(name: str, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def _messages(variant: str, task: dict, feedback: list) -> list[dict]:
    from engine.search import reflection as R

    if variant == "gepa":
        from gepa.optimize_anything import _build_reflection_prompt_template
        from gepa.strategies.instruction_proposal import InstructionProposalSignature as S

        samples = [{"Inputs": {k: v for k, v in fb.example.items() if k != "id"}, "Score": fb.score, **fb.side_info}
                   for fb in feedback]
        text = S.prompt_renderer({"current_instruction_doc": task["seed"], "dataset_with_feedback": samples,
                                  "prompt_template": _build_reflection_prompt_template(task["objective"],
                                                                                        task["background"])})
        return [{"role": "user", "content": text}]
    saved = R.TASK, R.REMINDER
    if variant == "change":
        R.TASK, R.REMINDER = CHANGE_TASK, CHANGE_REMINDER
    try:
        return R.build_prompt(kind="", objective=task["objective"], background=task["background"],
                              component="candidate", components=["candidate"], current_text=task["seed"],
                              feedback=feedback, human_feedback=[], tried=[], compact=True).messages
    finally:
        R.TASK, R.REMINDER = saved


def _text(variant: str, answer: str, seed: str):
    from engine.search.reflection import parse_answer

    if variant == "gepa":
        from gepa.strategies.instruction_proposal import InstructionProposalSignature as S

        text = S.output_extractor(answer)["new_instruction"]
        return (text, "") if text.strip() and text.strip() != seed.strip() else (None, "unchanged or empty")
    parsed = parse_answer(answer, seed)
    return parsed.text, parsed.reason


def seed_feedback(task_name: str, i: int) -> tuple[dict, Any, list]:
    """The development task, its evaluator, and the seed's feedback on minibatch ``i`` (3 training
    examples drawn with ``random.Random(i)``)."""
    import real_lm as H
    from engine.search.reflection import ExampleFeedback

    folder = DEV / task_name
    task, evaluate = H.load_task(folder), H.load_evaluator(folder)
    feedback = []
    for n, ex in enumerate(random.Random(i).sample(task["train"], 3)):
        score, side = evaluate(task["seed"], ex)
        feedback.append(ExampleFeedback(key=ex.get("id", f"train-{n}"), score=score, example=ex, side_info=side))
    return task, evaluate, feedback


def one(task_name: str, i: int, variant: str) -> dict:
    import litellm

    import real_lm as H
    from engine.search.reflection import answer_token_cap

    task, evaluate, feedback = seed_feedback(task_name, i)
    started = time.monotonic()
    r = litellm.completion(model=H.LOCAL, messages=_messages(variant, task, feedback), temperature=0.7,
                           max_tokens=answer_token_cap(task["seed"], 2000), seed=i)
    answer = r.choices[0].message.content or ""
    text, reason = _text(variant, answer, task["seed"])
    seed_val = H.mean_score(evaluate, task["seed"], task["val"])
    return {"task": task_name, "minibatch": i, "variant": variant, "seconds": round(time.monotonic() - started, 1),
            "parsed": text is not None, "reason": reason, "seed_val": seed_val,
            "val": H.mean_score(evaluate, text, task["val"]) if text else seed_val, "answer": answer[:600]}


def write_page(rows: list[dict], out: Path) -> None:
    by: dict[tuple, list] = {}
    for r in rows:
        by.setdefault((r["task"], r["variant"]), []).append(r)
    lines = ["# Benchmark: one reflection, three prompts, on the development tasks", "",
             "Produced by `bench/reflection_dev.py` (the method is in its docstring): the local model "
             "(`local/qwen2.5-coder-1.5b`) answers one reflection per minibatch and prompt; the answer's text is "
             "scored on the task's validation split (an unusable answer keeps the seed's score). These are the "
             "development tasks, not the frozen ones of `docs/benchmarks-real-lm.md`.", "",
             "| task | variant | minibatches | usable answers | mean val of the answer (seed) | better than the seed |",
             "|---|---|---|---|---|---|"]
    for (task, variant), rs in sorted(by.items(), key=lambda kv: (kv[0][0], VARIANTS.index(kv[0][1]))):
        lines.append(f"| {task} | {variant} | {len(rs)} | {sum(r['parsed'] for r in rs)} / {len(rs)} | "
                     f"{statistics.fmean(r['val'] for r in rs):.3f} ({rs[0]['seed_val']:.3f}) | "
                     f"{sum(r['val'] > r['seed_val'] for r in rs)} / {len(rs)} |")
    lines += ["", "| variant | answers | usable | better than the seed | mean val gain |", "|---|---|---|---|---|"]
    for v in VARIANTS:
        rs = [r for r in rows if r["variant"] == v]
        if rs:
            lines.append(f"| {v} | {len(rs)} | {100 * sum(r['parsed'] for r in rs) / len(rs):.0f} % | "
                         f"{sum(r['val'] > r['seed_val'] for r in rs)} | "
                         f"{statistics.fmean(r['val'] - r['seed_val'] for r in rs):+.3f} |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    if "--help" in sys.argv or "-h" in sys.argv:  # not a run (which also rewrites the page)
        print(__doc__)
        return
    raw, out = Path(_arg("--raw", RAW)), Path(_arg("--out", OUT))
    rows = raw_rows(raw)
    if "--report" not in sys.argv:
        from engine.lm.providers import register_builtin_providers

        register_builtin_providers()
        tasks = _arg("--tasks", ",".join(sorted(p.name for p in DEV.iterdir() if p.is_dir()))).split(",")
        variants = _arg("--variants", ",".join(VARIANTS)).split(",")
        for task in tasks:
            for i in range(int(_arg("--minibatches", 6))):
                for v in variants:
                    if any(r["task"] == task and r["minibatch"] == i and r["variant"] == v for r in rows):
                        continue
                    row = one(task, i, v)
                    rows.append(row)
                    append_row(raw, row)
                    print(task, i, v, row["seconds"], "s", "usable" if row["parsed"] else row["reason"],
                          f"val {row['val']:.3f}", flush=True)
    write_page(rows, out)


if __name__ == "__main__":
    main()
