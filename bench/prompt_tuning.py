"""Benchmark: the built-in prompt-tuning example (examples/ticket_routing) with the local model as
task LM and reflection LM, measured end to end. Writes docs/benchmarks-prompt-tuning.md.

Run: ``.venv/bin/python bench/prompt_tuning.py`` (about 10 minutes on 2 cores: the search has a
7-minute time budget, then the held-out test pass). ``--db URL --run ID`` reports on a run of the
example that already finished instead of starting one.

Reported: wall-clock (the search, then the held-out test pass that follows it), minutes to the
first improvement (the first candidate whose validation mean beats the seed's: when it was
proposed, and when its validation pass was done), seed vs best on validation and on the held-out
test set, and the task LM's calls, their share of the wall-clock and the local model's tokens per
second.
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


def _minutes_from(start, moment) -> float:
    return (moment - start).total_seconds() / 60


def _timings(db: Database, run, seed, cands) -> dict:
    """When things became known, in minutes from the run's start: the first improvement on
    validation (proposed, and its validation pass done: the time a person sees it), the end of
    the search and the end of the held-out test pass (which runs after the search)."""
    split_of = {e.pk: e.split for e in repo.get_examples(db, run.id)}
    val = "val" if "val" in split_of.values() else "train"
    evals = repo.evaluations_for(db, run.id)
    better = [c for c in cands if c.origin != "seed" and c.val_mean is not None and seed.val_mean is not None
              and c.val_mean > seed.val_mean]
    validated = [max(e.created_at for e in evals if e.candidate_id == c.id and split_of[e.example_pk] == val)
                 for c in better]
    tests = [e.created_at for e in evals if split_of[e.example_pk] == "test"]
    end = max(tests) if tests else run.finished_at
    return {"proposed": min((_minutes_from(run.started_at, c.created_at) for c in better), default=None),
            "validated": min((_minutes_from(run.started_at, t) for t in validated), default=None),
            "search": _minutes_from(run.started_at, run.finished_at), "total": _minutes_from(run.started_at, end)}


def measure(db_url: str, run_id: str, load: float | None) -> dict:
    db = Database(db_url)
    db.create_all()  # a run measured by an older release: add the columns it lacks
    run = repo.get_run(db, run_id)
    cands = repo.list_candidates(db, run_id)
    seed = next(c for c in cands if c.origin == "seed")
    calls = [c for c in repo.lm_calls_for(db, run_id) if not c.cached and not c.error]

    def of(purposes):
        chosen = [c for c in calls if c.purpose in purposes]
        secs, out = sum(c.seconds for c in chosen), sum(c.tokens_out for c in chosen)
        return {"calls": len(chosen), "seconds": secs, "tokens_in": sum(c.tokens_in for c in chosen),
                "tokens_out": out, "out_per_s": out / secs if secs else 0.0}

    best = next((c for c in cands if c.id == run.best_candidate_id), seed)
    return {"run": run, "time": _timings(db, run, seed, cands), "seed_text": seed.content.get("text", ""),
            "best_text": best.content.get("text", ""), "seed_val": seed.val_mean, "best_val": run.best_val_mean,
            "seed_test": run.seed_test_mean, "best_test": run.test_mean,
            "task": of({"task", "test"}), "reflection": of({"reflection", "seed", "merge"}), "load": load}


def report(m: dict) -> str:
    run, task, refl, t = m["run"], m["task"], m["reflection"], m["time"]

    def f(x):
        return "—" if x is None else f"{x:.3f}"

    def mins(x):
        return "none" if x is None else f"{x:.1f} min"

    load = ("not recorded (this report re-measured a finished run from its database)" if m["load"] is None
            else f"{m['load']:.1f} when the run ended")
    lines = [
        "# Benchmark: tuning a prompt offline (examples/ticket_routing, local model)", "",
        "Produced by `bench/prompt_tuning.py`: `python -m engine run examples/ticket_routing/config.toml` in a fresh data "
        "folder; the local model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, CPU) is the task LM and the reflection LM. "
        f"Machine: 2 cores shared with other work; load average (1 min): {load}. Times are minutes from the run's start.", "",
        "| measure | value |", "|---|---|",
        f"| wall-clock: search / search + held-out test pass | {mins(t['search'])} / {mins(t['total'])} |",
        f"| status | {run.status}: {run.status_reason or ''} |",
        f"| steps / metric calls | {run.steps_done} / {run.metric_calls} |",
        f"| first improvement on validation: proposed / its validation pass done | {mins(t['proposed'])} / "
        f"{mins(t['validated'])} |",
        f"| validation mean: seed → best | {f(m['seed_val'])} → {f(m['best_val'])} |",
        f"| held-out test mean: seed → best (known at the end of the test pass) | {f(m['seed_test'])} → {f(m['best_test'])} |",
        f"| task LM calls (search + test pass) | {task['calls']} |",
        f"| task LM call time summed over calls, against the whole wall-clock | {task['seconds'] / 60:.1f} min, "
        f"{task['seconds'] / 60 / t['total']:.0%} |",
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
        load = None
    else:
        db_url, run_id, _ = run_example()
        load = os.getloadavg()[0]
    text = report(measure(db_url, run_id, load))
    old = OUT.read_text() if OUT.exists() else ""
    reading = old[old.index(READING):] if READING in old else ""  # written by hand: kept
    OUT.write_text(text + "\n" + reading)
    print(text)


if __name__ == "__main__":
    main()
