"""Benchmark: the built-in prompt-tuning example (examples/ticket_routing) with the local model as
task LM and reflection LM, measured end to end. Writes docs/benchmarks-prompt-tuning.md.

Run: ``.venv/bin/python bench/prompt_tuning.py`` (up to ~15 minutes on 2 cores: the search has a
10-minute time budget, then the held-out test pass). ``--db URL --run ID`` reports on a run of the
example that already finished instead of starting one.

Reported: wall-clock, minutes to the first improvement (the first accepted candidate whose
validation mean beats the seed's), seed vs best on validation and on the held-out test set, and
the task LM's calls, their share of the wall-clock and the local model's tokens per second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.lm import local_model  # noqa: E402
from storage import repo  # noqa: E402
from storage.db import Database  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-prompt-tuning.md"
EXAMPLE = "examples/ticket_routing/config.toml"
READING = "## Reading"


def run_example() -> tuple[str, str, float]:
    """(db url, run id, seconds) of a fresh run of the example in its own data folder (an LM
    cache left by earlier runs would answer every call in 0 s)."""
    tmp = tempfile.mkdtemp(prefix="prompt-bench-")
    db = f"sqlite:///{tmp}/bench.db"
    env = {**os.environ, "REFRACT_DATA": tmp, "REFRACT_MODELS": str(local_model.default_models_dir())}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "engine", "run", EXAMPLE, "--db", db, "--quiet"], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    run_id = next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("run "))
    return db, run_id, seconds


def measure(db_url: str, run_id: str) -> dict:
    db = Database(db_url)
    run = repo.get_run(db, run_id)
    cands = repo.list_candidates(db, run_id)
    seed = next(c for c in cands if c.origin == "seed")
    better = sorted((c for c in cands if c.val_mean is not None and seed.val_mean is not None
                     and c.val_mean > seed.val_mean and c.origin != "seed"), key=lambda c: c.created_at)
    calls = [c for c in repo.lm_calls_for(db, run_id) if not c.cached and not c.error]
    wall = (run.finished_at - run.started_at).total_seconds()

    def of(purposes):
        chosen = [c for c in calls if c.purpose in purposes]
        secs, out = sum(c.seconds for c in chosen), sum(c.tokens_out for c in chosen)
        return {"calls": len(chosen), "seconds": secs, "tokens_in": sum(c.tokens_in for c in chosen),
                "tokens_out": out, "out_per_s": out / secs if secs else 0.0}

    best = next((c for c in cands if c.id == run.best_candidate_id), seed)
    return {"run": run, "wall": wall, "seed_text": seed.content.get("text", ""), "best_text": best.content.get("text", ""), "seed_val": seed.val_mean, "best_val": run.best_val_mean,
            "seed_test": run.seed_test_mean, "best_test": run.test_mean,
            "first_improvement": (better[0].created_at - run.started_at).total_seconds() if better else None,
            "task": of({"task", "test"}), "reflection": of({"reflection", "seed", "merge"}),
            "load": os.getloadavg()[0]}


def report(m: dict) -> str:
    run, task, refl = m["run"], m["task"], m["reflection"]
    first = "none" if m["first_improvement"] is None else f"{m['first_improvement'] / 60:.1f} min"

    def f(x):
        return "—" if x is None else f"{x:.3f}"

    lines = [
        "# Benchmark: tuning a prompt offline (examples/ticket_routing, local model)", "",
        "Produced by `bench/prompt_tuning.py`: `python -m engine run examples/ticket_routing/config.toml` in a fresh data "
        "folder; the local model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, CPU) is the task LM and the reflection LM. "
        f"Machine: 2 cores shared with other work; load average (1 min) {m['load']:.1f} when this report was written.", "",
        "| measure | value |", "|---|---|",
        f"| wall-clock (search + held-out test pass) | {m['wall'] / 60:.1f} min |",
        f"| status | {run.status}: {run.status_reason or ''} |" if hasattr(run, "status_reason") else f"| status | {run.status} |",
        f"| steps / metric calls | {run.steps_done} / {run.metric_calls} |",
        f"| time to the first improvement on validation | {first} |",
        f"| validation mean: seed → best | {f(m['seed_val'])} → {f(m['best_val'])} |",
        f"| held-out test mean: seed → best | {f(m['seed_test'])} → {f(m['best_test'])} |",
        f"| task LM calls (search + test pass) | {task['calls']} |",
        f"| task LM call time summed over calls, against the wall-clock | {task['seconds'] / 60:.1f} min, "
        f"{task['seconds'] / m['wall']:.0%} |",
        f"| task LM tokens in / out, generated tokens per second | {task['tokens_in']:,} / {task['tokens_out']:,}, "
        f"{task['out_per_s']:.1f} |",
        f"| reflection LM calls, time | {refl['calls']}, {refl['seconds'] / 60:.1f} min |",
        f"| reflection LM tokens in / out, generated tokens per second | {refl['tokens_in']:,} / {refl['tokens_out']:,}, "
        f"{refl['out_per_s']:.1f} |", "",
        "Call times overlap: two sandbox workers and the reflection ask the one local model at once, and it answers "
        "one request at a time, so each call's time includes its wait (the sums can exceed the wall-clock, and the "
        "tokens per second here are per call, not the model's own speed).", "",
        f"Seed prompt: `{m['seed_text']}`", "", f"Best prompt: `{m['best_text']}`", ""]
    return "\n".join(lines)


def main() -> None:
    if "--db" in sys.argv:
        db_url, run_id = sys.argv[sys.argv.index("--db") + 1], sys.argv[sys.argv.index("--run") + 1]
    else:
        db_url, run_id, _ = run_example()
    text = report(measure(db_url, run_id))
    old = OUT.read_text() if OUT.exists() else ""
    reading = old[old.index(READING):] if READING in old else ""  # written by hand: kept
    OUT.write_text(text + "\n" + reading)
    print(text)


if __name__ == "__main__":
    main()
