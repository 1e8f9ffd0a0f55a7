"""Which reflection prompt does the local model follow? Parse, validity and improvement rates.

For each built-in example (examples/iso_date_regex, examples/slugify_code) and each parent, the
real local model answers N reflections per prompt variant (sample index k = 0..N-1 with the
engine's per-proposal temperature). Every answer is parsed as the engine does
(``engine.search.reflection.parse_answer``), checked with the example's ``validate()``, and, when valid
and new, scored on the validation set. Candidates run in a child ``python -I`` process with a
timeout, never in this one. Writes docs/benchmarks-reflection-prompts.md.

Variants (the prompt content is the same facts; only form and instructions change):
- ``current``: ``engine.search.reflection.build_prompt`` as the engine uses it;
- ``plan``: the same prompt, but the task asks for one line naming the change before the fence;
- ``compact+plan``: failing examples first, short values on one line (no JSON blocks), passing
  examples summarised, earlier attempts presented as failures, and the ``plan`` line.

Run: ``.venv/bin/python bench/reflection_prompts.py [N]`` (about 10-20 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine.lm.client  # noqa: E402,F401  (first: litellm's offline price map)
from engine.lm import local as local_lm  # noqa: E402
from engine.config import load_config  # noqa: E402
from engine.search.proposal import proposal_temperature  # noqa: E402
from engine.search.reflection import SYSTEM, ExampleFeedback, build_prompt, parse_answer  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-reflection-prompts.md"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 6
MINIBATCH = 4

_RUNNER = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("evaluator", sys.argv[1])
ev = importlib.util.module_from_spec(spec); spec.loader.exec_module(ev)
job = json.loads(sys.stdin.read())
if job["op"] == "validate":
    print(json.dumps(ev.validate(job["candidate"]) if hasattr(ev, "validate") else None))
else:
    out = []
    for ex in job["examples"]:
        try:
            r = ev.evaluate(job["candidate"], ex)
            score, info = (r if isinstance(r, tuple) else (r, {}))
            out.append([float(score), info, None])
        except Exception as exc:
            out.append([0.0, {}, f"{type(exc).__name__}: {exc}"])
    print(json.dumps(out, default=str))
"""


def _child(evaluator: Path, job: dict):
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _RUNNER, str(evaluator)], input=json.dumps(job),
                              capture_output=True, text=True, timeout=20)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def evaluate(evaluator: Path, candidate: str, examples: list) -> list:
    res = _child(evaluator, {"op": "evaluate", "candidate": candidate, "examples": examples})
    return res if res is not None else [[0.0, {}, "timed out"] for _ in examples]


def validate(evaluator: Path, candidate: str):
    res = _child(evaluator, {"op": "validate", "candidate": candidate})
    return res


# -- prompt variants -----------------------------------------------------------------------

PLAN_TASK = ("## Task\nFirst write ONE line that starts with `Change:` and names the concrete change that "
             "makes the failing examples pass while keeping the passing ones passing. Then give one fenced "
             "code block holding the complete new {kind} — only the {kind}, nothing else inside the fence.")


def v_current(cfg, text, feedback, tried):
    return build_prompt(kind=cfg.artifact_kind, objective=cfg.objective, background=cfg.background,
                        component="text", components=["text"], current_text=text, feedback=feedback,
                        human_feedback=[], tried=tried).messages


def v_plan(cfg, text, feedback, tried):
    messages = v_current(cfg, text, feedback, tried)
    user = messages[1]["content"]
    user = user[: user.rindex("## Task")] + PLAN_TASK.format(kind=cfg.artifact_kind)
    return [messages[0], {"role": "user", "content": user}]


def _inline(value) -> str:
    s = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return s if len(s) <= 300 and "\n" not in s else None


def _compact_example(fb: ExampleFeedback) -> str:
    lines = [f"- example `{fb.key}` (score {fb.score:.3g}):"]
    payload = fb.example if isinstance(fb.example, dict) else {"input": fb.example}
    for name, value in list(payload.items()) + list(fb.side_info.items()) + ([("error", fb.error)] if fb.error else []):
        if name == "id" or value in ("", None):
            continue
        short = _inline(value)
        lines.append(f"  - {name}: {short}" if short is not None else
                     f"  - {name}:\n```\n{str(value)[:1500]}\n```")
    return "\n".join(lines)


def v_compact_plan(cfg, text, feedback, tried):
    kind = cfg.artifact_kind
    failing = [fb for fb in feedback if fb.score < 1]
    passing = [fb for fb in feedback if fb.score >= 1]
    parts = [f"## Objective\n{cfg.objective.strip()}"]
    if cfg.background.strip():
        parts.append(f"## Background\n{cfg.background.strip()}")
    parts.append(f"## Current version ({kind})\n```\n{text}\n```")
    parts.append("## Failing examples (fix these)\n" + ("\n".join(_compact_example(fb) for fb in failing) or "(none)"))
    if passing:
        parts.append("## Passing examples (keep these passing)\n" + "\n".join(_compact_example(fb) for fb in passing))
    if tried:
        parts.append("## Already tried — these did NOT help, do not answer any of them again\n" +
                     "\n".join(f"```\n{t}\n```" for t in tried[-3:]))
    parts.append(PLAN_TASK.format(kind=kind))
    system = SYSTEM.format(kind=kind, kind_short="artifact")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


VARIANTS = {"current": v_current, "plan": v_plan, "compact+plan": v_compact_plan}


# -- measurement ---------------------------------------------------------------------------

def parents_for(name: str, cfg) -> list[tuple[str, list[str]]]:
    seed = cfg.seed_candidate
    if name == "iso_date_regex":  # also the plateau the engine reached: a shape-only regex, one retry tried
        return [(seed, []), (r"\d{4}-\d{2}-\d{2}", [r"\d{4}-\d{2}-\d{2}$"])]
    return [(seed, [])]


def measure_task(name: str) -> list[dict]:
    cfg = load_config(ROOT / "examples" / name / "config.toml")
    evaluator = ROOT / "examples" / name / "evaluator.py"
    runtime = local_lm.get_runtime()
    rows = []
    for text, tried in parents_for(name, cfg):
        batch = cfg.dataset[:MINIBATCH]
        results = evaluate(evaluator, text, batch)
        feedback = sorted((ExampleFeedback(str(ex.get("id", i)), r[0], ex, r[1], r[2])
                           for i, (ex, r) in enumerate(zip(batch, results))), key=lambda f: (f.score, f.key))
        parent_val = sum(r[0] for r in evaluate(evaluator, text, cfg.valset)) / len(cfg.valset)
        for variant, build in VARIANTS.items():
            messages = build(cfg, text, feedback, tried)
            stats = {"task": name, "parent": text, "variant": variant, "n": N, "fenced": 0, "valid": 0, "new": 0,
                     "improved": 0, "best": parent_val, "parent_val": parent_val, "seconds": 0.0,
                     "prompt_tokens": local_lm.count_tokens(messages), "answers": []}
            seen = {text.strip(), *(t.strip() for t in tried)}
            for k in range(N):
                started = time.monotonic()
                answer = runtime.chat({"messages": messages, "max_tokens": cfg.reflection_lm.max_tokens,
                                       "temperature": proposal_temperature(cfg.reflection_lm.temperature, k), "seed": k})
                stats["seconds"] += time.monotonic() - started
                reply = answer["choices"][0]["message"]["content"] if "choices" in answer else ""
                stats["answers"].append(reply)
                parsed = parse_answer(reply, text)
                if parsed.text is None:
                    continue
                stats["fenced"] += 1
                if validate(evaluator, parsed.text) is not None:
                    continue
                stats["valid"] += 1
                if parsed.text.strip() in seen:
                    continue
                seen.add(parsed.text.strip())
                stats["new"] += 1
                val = sum(r[0] for r in evaluate(evaluator, parsed.text, cfg.valset)) / len(cfg.valset)
                stats["best"] = max(stats["best"], val)
                stats["improved"] += val > parent_val
            print(json.dumps({k: v for k, v in stats.items() if k != "answers"}), flush=True)
            rows.append(stats)
    return rows


def write(rows: list[dict]) -> None:
    lines = [
        "# Benchmark: reflection prompts with the local model",
        "",
        f"Produced by `bench/reflection_prompts.py`: {N} reflections per prompt (sample index 0..{N - 1}, the "
        f"engine's per-proposal temperature), Qwen2.5-Coder-1.5B Q4_K_M on {local_lm._cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end. *Parsed*: a usable fenced block "
        "(not empty, not unchanged); *valid*: passes the example's `validate()`; *new*: valid and not the "
        "parent, an earlier attempt or an earlier answer; *improved*: new and better than the parent on "
        "the validation set.",
        "",
        "| example | parent | variant | prompt tokens | parsed | valid | new | improved | best val (parent) | s / answer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        parent = r["parent"].replace("|", "\\|").replace("\n", " ")[:40]
        lines.append(f"| {r['task']} | `{parent}` | {r['variant']} | {r['prompt_tokens']} | {r['fenced']}/{r['n']} | "
                     f"{r['valid']}/{r['n']} | {r['new']}/{r['n']} | {r['improved']}/{r['n']} | "
                     f"{r['best']:.3f} ({r['parent_val']:.3f}) | {r['seconds'] / r['n']:.1f} |")
    totals = {}
    for r in rows:
        t = totals.setdefault(r["variant"], [0, 0, 0, 0, 0])
        for i, key in enumerate(("fenced", "valid", "new", "improved", "n")):
            t[i] += r[key]
    lines += ["", "| variant | parsed | valid | new | improved |", "|---|---|---|---|---|"]
    for variant, (f, v, nw, imp, n) in totals.items():
        lines.append(f"| {variant} | {f / n:.0%} | {v / n:.0%} | {nw / n:.0%} | {imp / n:.0%} |")
    lines += ["", "## Sample answers (first two per row)", ""]
    for r in rows:
        lines.append(f"**{r['task']} / `{r['parent'][:40]}` / {r['variant']}**")
        for a in r["answers"][:2]:
            lines.append("\n    " + a.replace("\n", "\n    ") + "\n")
    OUT.write_text("\n".join(lines) + "\n")


def main() -> None:
    rows = []
    for name in ("iso_date_regex", "slugify_code"):
        rows += measure_task(name)
    write(rows)
    print(OUT.read_text())


if __name__ == "__main__":
    main()
