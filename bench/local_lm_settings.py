"""Which runtime settings make the local model slow? Interleaved ratios on this machine.

Each trial is a fresh process that loads Qwen2.5-Coder-1.5B with one variant of the runtime
settings (thread count, OpenMP wait policy, batch sizes, context size, flash attention), then
answers two reflection-sized prompts (about 600 tokens each, fresh text so nothing is reused) and
generates a fixed number of tokens for each (``ignore_eos``). Prompt and generated tokens/s are
reported separately, each with the 1-minute load average at the time. Variants run in rounds
(every variant once per round, in a shuffled order), so outside load on a shared machine hits all
of them alike; the table gives medians and each variant's ratio to the baseline of the same rounds.

``--busy N`` runs N busy-looping processes beside the model during each trial (as evaluation
workers or another program would be).

Run: ``.venv/bin/python bench/local_lm_settings.py [--rounds 3] [--busy 1] [variant ...]``;
appends/replaces its section in docs/benchmarks-local-lm.md.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.lm import local_model  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-local-lm.md"
GEN_TOKENS = 48

# name -> (environment for the process, runtime settings); "old" is the provider before this
# benchmark (OMP_WAIT_POLICY=PASSIVE), "new" the provider's current settings.
VARIANTS: dict[str, tuple[dict, dict]] = {
    "old: PASSIVE wait, 2 threads, ctx 8192": ({"OMP_WAIT_POLICY": "PASSIVE"}, {}),
    "OpenMP default wait (spin, then sleep)": ({}, {}),
    "ACTIVE wait": ({"OMP_WAIT_POLICY": "ACTIVE"}, {}),
    "GOMP_SPINCOUNT=2000": ({"GOMP_SPINCOUNT": "2000"}, {}),
    "GOMP_SPINCOUNT=20000": ({"GOMP_SPINCOUNT": "20000"}, {}),
    "1 thread": ({}, {"threads": 1}),
    "flash attention on": ({}, {"flash_attn": True}),
    "flash attention off": ({}, {"flash_attn": False}),
    "n_ubatch 256": ({}, {"n_ubatch": 256}),
    "n_ctx 2048": ({}, {"n_ctx": 2048}),
}

_TRIAL = r"""
import json, os, sys, time
settings = json.loads(sys.argv[2])
import xllamacpp as x
p = x.CommonParams()
p.model.path = sys.argv[1]
p.n_ctx = settings.get("n_ctx", 8192); p.n_parallel = 1; p.verbosity = 0
threads = settings.get("threads", len(os.sched_getaffinity(0)))
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads
if "n_ubatch" in settings: p.n_ubatch = settings["n_ubatch"]
if "flash_attn" in settings:
    p.flash_attn_type = (x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED if settings["flash_attn"]
                         else x.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED)
s = x.Server(p)
out = []
for i in range(2):
    lines = "\n".join(f"- example {i}.{j}: input `{time.time_ns() % 100000}-{j:02d}-{(j * 7) % 31:02d}`, "
                      f"score {j % 2}, the regex {'matched' if j % 2 else 'rejected'} it" for j in range(14))
    msg = [{"role": "system", "content": "You improve a regular expression by reflecting on feedback."},
           {"role": "user", "content": f"## Feedback\n{lines}\n\nWrite an improved regex in one fenced block."}]
    t = s.handle_chat_completions({"messages": msg, "max_tokens": int(sys.argv[3]), "temperature": 0.3,
                                   "ignore_eos": True})["timings"]
    out.append([t["prompt_n"], t["prompt_per_second"], t["predicted_per_second"], os.getloadavg()[0]])
print(json.dumps(out))
"""


def trial(model: str, name: str, busy: int) -> list[list[float]]:
    env_extra, settings = VARIANTS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        done = subprocess.run([sys.executable, "-c", _TRIAL, model, json.dumps(settings), str(GEN_TOKENS)],
                              env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return []  # starved by outside load: reported as a missing trial, not a figure
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(names: list[str], rounds: int, busy: int) -> dict[str, list[list[float]]]:
    model = str(local_model.ensure_model_file())
    results: dict[str, list[list[float]]] = {name: [] for name in names}
    rng = random.Random(0)
    for r in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            rows = trial(model, name, busy)
            results[name] += rows
            print(f"round {r} {name}: {rows}", flush=True)
    return results


def section(results: dict[str, list[list[float]]], rounds: int, busy: int) -> str:
    base = next(iter(results.values()))  # the first variant is the baseline and must have run
    base_pp = statistics.median(r[1] for r in base)
    base_tg = statistics.median(r[2] for r in base)
    heading = f"## Runtime settings, interleaved ({busy} busy process{'es' if busy != 1 else ''} beside the model)"
    lines = [heading, "",
             f"`bench/local_lm_settings.py --busy {busy}`: {rounds} rounds, every variant once per round in a "
             f"shuffled order, 2 prompts of ~{int(base[0][0])} tokens + {GEN_TOKENS} generated tokens per trial "
             f"(fresh process, fresh text). Medians; ratios to the first row.", "",
             "| variant | prompt tokens/s | ratio | generated tokens/s | ratio | load average (min–max) |",
             "|---|---|---|---|---|---|"]
    for name, rows in results.items():
        if not rows:
            lines.append(f"| {name} | timed out | | | | |")
            continue
        pp, tg = statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows)
        loads = [r[3] for r in rows]
        lines.append(f"| {name} | {pp:.1f} | {pp / base_pp:.2f} | {tg:.1f} | {tg / base_tg:.2f} | "
                     f"{min(loads):.1f}–{max(loads):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = sys.argv[1:]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
    busy = int(args[args.index("--busy") + 1]) if "--busy" in args else 0
    names = [a for a in args if a in VARIANTS] or list(VARIANTS)
    text = section(run(names, rounds, busy), rounds, busy)
    print(text)
    doc = OUT.read_text()
    heading = text.splitlines()[0]
    if heading in doc:  # replace this section, keep the rest
        before, after = doc.split(heading, 1)
        rest = after.split("\n## ", 1)
        doc = before + text + ("\n## " + rest[1] if len(rest) > 1 else "")
    else:
        doc = doc.rstrip() + "\n\n" + text
    OUT.write_text(doc)


if __name__ == "__main__":
    main()
