"""What one reflection costs the local model, and a whole run of the regex example (or another).

``prompts``: for the ISO-date regex example, three reflections in a row (the seed on two
minibatches, then another parent), as the engine sends them one after another to the one runtime,
built by the reflection prompt of a given source tree (``--tree``: e.g. an export of an earlier
commit, to compare). Per call: prompt tokens, tokens the runtime reused from the previous call
(``cache_n``), tokens it had to process, and seconds.

``run``: ``python -m engine run`` on examples/iso_date_regex shaped 1x1 with 160 metric calls (the
shape the offline default is judged on), or with ``--example NAME`` another example as configured,
in a fresh database and LM cache, from the given tree;
reports wall-clock, seed and best validation score, and per reflection call: count (retries
included), mean seconds (each call's wait for the runtime included), the runtime's busy time per
call (``busy_s_per_call``: what a reflection costs when siblings' calls queue), prompt and
generated tokens, from the run's own LM-call rows.

``--keep DIR`` keeps the run's folder (its database holds every LM call's prompt and answer).

``replay DIR``: the reflection prompts of a run kept with ``--keep DIR``, sent again in their
order to a fresh runtime (temperature 0.3, 200 tokens, a fixed seed per call), so that runtime
settings and prompt layouts are compared on the very same prompts: per call the tokens it
processed, prompt and generation seconds, and the totals. ``--speculative TYPE`` turns on one of
llama.cpp's speculative decodings (e.g. ``ngram_simple``: drafts from the text already seen, no
second model); ``--tried-first`` moves each prompt's "Already tried" section before its minibatch
feedback.

Run: ``.venv/bin/python bench/reflection_cost.py prompts|run [--tree DIR] [--label NAME] [--keep DIR]
[--example NAME]``; prints one JSON line (the load average beside each figure) for
docs/benchmarks-local-lm.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "iso_date_regex"


def _arg(name: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


_PROMPTS = r"""
import importlib.util, json, os, sys, time
sys.path.insert(0, os.getcwd())
import engine.lm.client  # litellm's offline price map first
from engine.config import load_config
from engine.lm import local as local_lm
from engine.search import reflection as r
cfg = load_config(sys.argv[1] + "/config.toml")
spec = importlib.util.spec_from_file_location("ev", sys.argv[1] + "/evaluator.py")
ev = importlib.util.module_from_spec(spec); spec.loader.exec_module(ev)
rows = [json.loads(line) for line in open(sys.argv[1] + "/train.jsonl")]
compact = "compact" in r.build_prompt.__code__.co_varnames
runtime = local_lm.get_runtime()
out = []
for parent, batch in ((cfg.seed_candidate, rows[0:4]), (cfg.seed_candidate, rows[4:8]), (r"\d{4}-\d{2}-\d{2}", rows[8:12])):
    scored = [(ex, *ev.evaluate(parent, ex)) for ex in batch]
    feedback = sorted((r.ExampleFeedback(ex["id"], s, ex, info) for ex, s, info in scored), key=lambda f: (f.score, f.key))
    kwargs = dict(kind=cfg.artifact_kind, objective=cfg.objective, background=cfg.background, component="text",
                  components=["text"], current_text=parent, feedback=feedback, human_feedback=[], tried=[])
    if compact:
        kwargs["compact"] = cfg.reflection_lm.model.startswith("local/")
    messages = r.build_prompt(**kwargs).messages
    cap = r.answer_token_cap(parent, cfg.reflection_lm.max_tokens) if hasattr(r, "answer_token_cap") else cfg.reflection_lm.max_tokens
    started = time.monotonic()
    answer = runtime.chat({"messages": messages, "max_tokens": cap, "temperature": 0.3, "seed": 0})
    t = answer["timings"]
    out.append({"prompt_tokens": t["cache_n"] + t["prompt_n"], "reused": t["cache_n"], "processed": t["prompt_n"],
                "prompt_s": t["prompt_ms"] / 1000, "generated": t["predicted_n"], "gen_s": t["predicted_ms"] / 1000,
                "seconds": time.monotonic() - started, "load": os.getloadavg()[0]})
print(json.dumps(out))
"""


_REPLAY = r"""
import json, os, re, sqlite3, sys, time
sys.path.insert(0, os.getcwd())
import xllamacpp
db, speculative, tried_first = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if speculative:
    make = xllamacpp.CommonParams
    def with_speculative():
        params = make()
        params.speculative.types = [getattr(xllamacpp.common_speculative_type, "COMMON_SPECULATIVE_TYPE_" + speculative.upper())]
        return params
    xllamacpp.CommonParams = with_speculative
from engine.lm import local as local_lm
runtime = local_lm.get_runtime()
rows = sqlite3.connect(db).execute("select messages from lmcall where purpose = 'reflection' order by id").fetchall()
out = []
for i, (text,) in enumerate(rows):
    messages = json.loads(text)
    section = re.search(r"(## Evaluation feedback.*?)(## Already tried.*?)(## Task)", messages[-1]["content"], re.S)
    if tried_first and section:
        u = messages[-1]["content"]
        messages[-1] = {**messages[-1], "content": u[:section.start()] + section.group(2) + section.group(1)
                        + section.group(3) + u[section.end():]}
    started = time.monotonic()
    t = runtime.chat({"messages": messages, "temperature": 0.3, "max_tokens": 200, "seed": 1000 + i})["timings"]
    out.append({"seconds": time.monotonic() - started, "processed": t["prompt_n"], "prompt_s": t["prompt_ms"] / 1000,
                "generated": t["predicted_n"], "gen_s": t["predicted_ms"] / 1000,
                "drafted": t.get("draft_n"), "accepted": t.get("draft_n_accepted")})
later = out[1:] or out
print(json.dumps({"calls": len(out), "s_per_call": sum(o["seconds"] for o in out) / len(out),
                  "s_per_call_after_first": sum(o["seconds"] for o in later) / len(later),
                  "processed_tokens": sum(o["processed"] for o in out), "prompt_s": sum(o["prompt_s"] for o in out),
                  "generated_tokens": sum(o["generated"] for o in out), "gen_s": sum(o["gen_s"] for o in out),
                  "drafted": sum(o["drafted"] or 0 for o in out), "accepted": sum(o["accepted"] or 0 for o in out),
                  "load": os.getloadavg()[0], "per_call": out}))
"""


def replay(tree: Path, kept: Path) -> dict:
    args = [str(kept / "bench.db"), _arg("--speculative", "") or "", "1" if "--tried-first" in sys.argv else "0"]
    done = subprocess.run([sys.executable, "-c", _REPLAY, *args], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "REFRACT_MODELS": str(kept / "models")} if (kept / "models").is_dir()
                          else None)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def prompts(tree: Path) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", _PROMPTS, str(EXAMPLE)], cwd=tree, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _config(tmp: Path, name: str) -> Path:
    """The regex example shaped 1x1 with 160 metric calls and time enough to spend them; any other
    example as it is configured."""
    folder = tmp / name
    shutil.copytree(ROOT / "examples" / name, folder)
    if name != EXAMPLE.name:
        return folder / "config.toml"
    text = (folder / "config.toml").read_text()
    text = text.replace("proposals_per_parent = 2", "proposals_per_parent = 1")
    text = text.replace("max_metric_calls = 300", "max_metric_calls = 160").replace("max_seconds = 600", "max_seconds = 3600")
    (folder / "config.toml").write_text(text)
    return folder / "config.toml"


def whole_run(tree: Path) -> dict:
    keep = _arg("--keep")  # a folder to keep the run's database in, to read its LM calls afterwards
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        config, db = _config(Path(tmp), _arg("--example", EXAMPLE.name)), f"{tmp}/bench.db"
        env = {**os.environ, "REFRACT_DATA": tmp}
        load_before, started = os.getloadavg()[0], time.monotonic()
        done = subprocess.run([sys.executable, "-m", "engine", "run", str(config), "--db", f"sqlite:///{db}", "--quiet"],
                              cwd=tree, capture_output=True, text=True, env=env)
        seconds = time.monotonic() - started
        con = sqlite3.connect(db)
        calls = con.execute("select tokens_in, tokens_out, seconds, answer, started_at from lmcall "
                            "where purpose = 'reflection'").fetchall()
        run = con.execute("select metric_calls, steps_done, proposals_total, best_val_mean, status_reason from run").fetchone()
        seed = con.execute("select val_mean from candidate where origin = 'seed'").fetchone()[0]
    return {"seconds": round(seconds), "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
            "metric_calls": run[0], "steps": run[1], "proposals": run[2], "reflection_calls": len(calls),
            "seed_val": seed, "best_val": run[3], "status": run[4] or done.stdout.strip().splitlines()[-1:],
            "s_per_call": round(statistics.mean(c[2] for c in calls), 1) if calls else None,
            # the runtime answers one call at a time: siblings' calls queue, so a call's seconds count
            # its wait too; the time the runtime was busy with any call, per call, does not
            "busy_s_per_call": round(_busy_seconds(calls) / len(calls), 1) if calls else None,
            "s_per_proposal": round(sum(c[2] for c in calls) / max(1, run[2]), 1),
            "tokens_in": round(statistics.mean(c[0] for c in calls)) if calls else None,
            "tokens_out": round(statistics.mean(c[1] for c in calls)) if calls else None,
            # answers cut by the token cap inside their fenced block (a loop, or a rewrite too long)
            "cut": sum(1 for c in calls if c[3] and c[3].count("```") == 1)}


def _busy_seconds(calls: list) -> float:
    """The length of the union of the calls' [start, start + seconds] intervals."""
    spans = sorted((datetime.fromisoformat(c[4]).timestamp(), c[2]) for c in calls)
    busy, end = 0.0, float("-inf")
    for start, seconds in spans:
        busy += max(0.0, start + seconds - max(start, end))
        end = max(end, start + seconds)
    return busy


def main() -> None:
    tree = Path(_arg("--tree", str(ROOT))).resolve()
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what not in ("prompts", "run", "replay") or (what == "replay" and len(sys.argv) < 3):
        sys.exit("usage: bench/reflection_cost.py prompts|run [--tree DIR] [--label NAME] [--keep DIR] [--example NAME]\n"
                 "       bench/reflection_cost.py replay KEPT_DIR [--speculative TYPE] [--tried-first]")
    if what == "replay":
        result = replay(tree, Path(sys.argv[2]).resolve())
    else:
        result = prompts(tree) if what == "prompts" else whole_run(tree)
    print(json.dumps({"label": _arg("--label", tree.name), "what": what, "result": result}), flush=True)


if __name__ == "__main__":
    main()
