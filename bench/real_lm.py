"""Search quality with a real reflection LM: Refract against GEPA 0.1.4, at equal wall-clock.

Four frozen tasks of different kinds (``bench/real_lm_tasks/``: a regex, a function scored by
tests, a prompt for a task LM, a help text under a keyword scorer), each with train / val / test
splits, written before the engine was changed for them (see docs/benchmarks-real-lm.md). Each
run gets the task's number of seconds; both systems see the same seed, objective, background,
evaluator and data, and reflect with the same local model file through the same runtime
(``local/qwen2.5-coder-1.5b``, in-process; GEPA's ``reflection_lm`` is a callable that calls
it with Refract's reflection settings). Neither is given the test split: after a run, this
harness evaluates the seed and the best candidate on it itself, so both are scored the same way.

Every run is a fresh subprocess (its own database and LM cache, the model loaded and warmed
before the clock starts); runs are interleaved (task, seed, then each system) so that a load
on the machine falls on both. Raw results are appended to a JSONL file (``--raw``), which a
later call resumes; the page is rebuilt from it.

Run: ``.venv/bin/python bench/real_lm.py [--seeds 5] [--tasks DIR] [--only TASK,...]
[--systems refract,gepa] [--scale 1.0] [--raw FILE] [--out FILE] [--refract NAME=JSON …]
[--first-seed N]``; ``--first-seed`` starts at seed N (``--seeds`` is where they end: ``--first-seed 5 --seeds 10`` runs
seeds 5 to 9), so that one run's seeds can be split between two harnesses;
``--refract NAME='{"search": {"parents_per_step": 1}}'`` defines a variant run as system ``refract:NAME``;
the system ``gepa:PxN`` (e.g. ``gepa:1x2``) is GEPA with ``PxNSampling(P, N)``. ``--scale`` multiplies
every task's seconds (a quick look: 0.25). ``--report`` only rebuilds the page from ``--raw``.
Tasks of the same kinds kept elsewhere run the same way with ``--tasks DIR`` (one folder per
task: task.toml with name, kind, seconds, objective, background, seed; evaluator.py with
``evaluate(candidate, example)``; train.jsonl, val.jsonl, test.jsonl).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = ROOT / "bench" / "real_lm_tasks"
OUT = ROOT / "docs" / "benchmarks-real-lm.md"
RAW = ROOT / "docs" / "benchmarks-real-lm.jsonl"
SYSTEMS = ("refract", "gepa")
LOCAL = "local/qwen2.5-coder-1.5b"
METRIC_CALLS = 100_000  # time is the budget: no run gets near this


def _arg(name: str, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


# ------------------------------------------------------------------ one run (a subprocess)


def load_task(folder: Path) -> dict:
    task = tomllib.loads((folder / "task.toml").read_text())
    task["folder"] = folder
    for split in ("train", "val", "test"):
        task[split] = [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines() if line.strip()]
    return task


def load_evaluator(folder: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"task_{folder.name}", folder / "evaluator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.evaluate


def mean_score(evaluate, candidate: str, rows: list) -> float:
    scores = []
    for row in rows:
        out = evaluate(candidate, row)
        scores.append(float(out[0] if isinstance(out, tuple) else out))
    return sum(scores) / len(scores)


def _text(candidate) -> str:
    """A single-text candidate, whichever form a system returns it in."""
    if isinstance(candidate, dict) and len(candidate) == 1:
        return next(iter(candidate.values()))
    return candidate


def _warm_local_model() -> None:
    """Load the model before the clock starts (both systems pay it the same, outside the run)."""
    import litellm

    litellm.completion(model=LOCAL, messages=[{"role": "user", "content": "Say ok."}], max_tokens=2, temperature=0)


def _reflection_settings(seed: str) -> dict:
    """Refract's reflection settings on the local model, for GEPA's callable too."""
    from engine.config import LMConfig
    from engine.search.reflection import answer_token_cap

    lm = LMConfig()
    return {"temperature": lm.temperature, "max_tokens": answer_token_cap(seed, lm.max_tokens)}


def run_refract(task: dict, evaluate, seed: int, seconds: float, data: Path) -> dict:
    import sqlite3

    from engine.api.optimize import optimize_anything

    db = f"sqlite:///{data / 'refract.db'}"
    config = {"budget": {"max_seconds": seconds, "max_metric_calls": METRIC_CALLS},
              "search": {"seed": seed}, "reflection_lm": {"model": LOCAL}}
    for section, values in json.loads(os.environ.get("REAL_LM_REFRACT", "{}")).items():  # a variant (--refract)
        config.setdefault(section, {}).update(values)
    started = time.monotonic()
    result = optimize_anything(task["seed"], evaluator=evaluate, dataset=task["train"], valset=task["val"],
                               objective=task["objective"], background=task["background"], config=config, db=db,
                               name=f"{task['name']} s{seed}", progress=False)
    wall = time.monotonic() - started
    con = sqlite3.connect(data / "refract.db")
    total, improved, retried, calls = con.execute(
        "select proposals_total, proposals_accepted, proposals_retried, lm_calls from run where id = ?",
        (result.run_id,)).fetchone()
    reflections = con.execute("select count(*) from lmcall where run_id = ? and purpose in ('reflection', 'merge')",
                              (result.run_id,)).fetchone()[0]
    return {"best": _text(result.best_candidate), "wall": wall, "lm_calls": reflections, "proposals": total,
            "improved": improved, "retried": retried, "metric_calls": result.total_metric_calls,
            "status": f"{result.status}: {result.status_reason}"[:200]}


def run_gepa(task: dict, evaluate, seed: int, seconds: float, data: Path) -> dict:
    import litellm
    from gepa.optimize_anything import EngineConfig, GEPAConfig, ReflectionConfig, optimize_anything
    from gepa.utils.stop_condition import TimeoutStopCondition

    settings = _reflection_settings(task["seed"])
    calls = {"n": 0}

    def reflection_lm(prompt) -> str:
        calls["n"] += 1
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return litellm.completion(model=LOCAL, messages=messages, **settings).choices[0].message.content or ""

    # GEPA checks its stopper between iterations, so a run ends past its time (by up to an iteration:
    # 40-85 s were seen); its best *at the time limit* is scored, from when each candidate's
    # validation scores were all known (every evaluation is timed here)
    val_ids = {json.dumps(row, sort_keys=True) for row in task["val"]}
    known: dict[tuple[str, str], float] = {}

    def timed(candidate, example):
        out = evaluate(candidate, example)
        row = json.dumps(example, sort_keys=True)
        if row in val_ids:
            known[(_text(candidate), row)] = time.monotonic()
        return out

    stopper = TimeoutStopCondition(seconds)
    engine = {"max_metric_calls": METRIC_CALLS, "seed": seed, "run_dir": str(data / "gepa")}
    if os.environ.get("REAL_LM_GEPA_PXN"):  # gepa:PxN, e.g. gepa:1x2: PxNSampling(1, 2)
        from gepa.strategies.proposal_sampling import PxNSampling

        p, n = (int(x) for x in os.environ["REAL_LM_GEPA_PXN"].split("x"))
        engine["sampling_strategy"] = PxNSampling(p, n)
    config = GEPAConfig(engine=EngineConfig(**engine), reflection=ReflectionConfig(reflection_lm=reflection_lm),
                        stop_callbacks=[stopper])
    started = time.monotonic()
    stopper.start_time = time.time()
    result = optimize_anything(task["seed"], evaluator=timed, dataset=task["train"], valset=task["val"],
                               objective=task["objective"], background=task["background"], config=config)
    wall = time.monotonic() - started
    n_candidates = len(result.candidates)
    in_time = _best_in_time(result, known, val_ids, started + seconds)
    return {"best": _text(result.candidates[in_time]), "best_final": _text(result.best_candidate), "wall": wall,
            "lm_calls": calls["n"], "proposals": calls["n"], "improved": n_candidates - 1, "retried": 0,
            "metric_calls": result.total_metric_calls, "status": "completed"}


def _best_in_time(result, known: dict, val_ids: set, deadline: float) -> int:
    """The index of GEPA's best candidate among those whose validation was complete by the
    deadline (ties: the earliest, as GEPA's own argmax); the seed when none was."""
    best, best_score = 0, None
    for i, (cand, score) in enumerate(zip(result.candidates, result.val_aggregate_scores)):
        times = [known.get((_text(cand), row)) for row in val_ids]
        if None in times or max(times) > deadline:
            continue
        if best_score is None or score > best_score:
            best, best_score = i, score
    return best


def one(system: str, folder: Path, seed: int, seconds: float) -> dict:
    """One run in this process; prints nothing but the result line."""
    import engine.lm.client  # noqa: F401  (litellm's offline price list, before litellm loads)
    from engine.lm.providers import register_builtin_providers

    register_builtin_providers()
    task = load_task(folder)
    evaluate = load_evaluator(folder)
    _warm_local_model()
    with tempfile.TemporaryDirectory(prefix="real-lm-") as tmp:
        data = Path(tmp)
        os.environ["REFRACT_DATA"] = str(data)
        load = os.getloadavg()[0]
        out = (run_refract if system.startswith("refract") else run_gepa)(task, evaluate, seed, seconds, data)
        if os.environ.get("REAL_LM_KEEP"):  # a run's database (every prompt and answer), to study it
            import shutil

            keep = Path(os.environ["REAL_LM_KEEP"]) / f"{system.replace(':', '-')}-{task['name']}-s{seed}"
            shutil.copytree(data, keep, dirs_exist_ok=True)
    out.update(system=system, task=task["name"], kind=task["kind"], seed=seed, seconds=seconds,
               load=round(load, 2), load_after=round(os.getloadavg()[0], 2))
    out["val_best"] = mean_score(evaluate, out["best"], task["val"])
    out["test_best"] = mean_score(evaluate, out["best"], task["test"])
    if "best_final" in out:  # GEPA's best at its end, past the time limit: shown beside, not scored
        out["val_final"] = mean_score(evaluate, out["best_final"], task["val"])
    return out


# ------------------------------------------------------------------ the benchmark


def seed_scores(folder: Path) -> dict:
    """The seed's val and test means (the baseline of every run of the task), computed once."""
    code = ("import sys, json; sys.path.insert(0, %r); import bench.real_lm as b; "
            "import engine.lm.client; from engine.lm.providers import register_builtin_providers; "
            "register_builtin_providers(); from pathlib import Path; f = Path(%r); t = b.load_task(f); "
            "e = b.load_evaluator(f); print(json.dumps({'val': b.mean_score(e, t['seed'], t['val']), "
            "'test': b.mean_score(e, t['seed'], t['test'])}))") % (str(ROOT), str(folder))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _env() -> dict:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(ROOT))
    env.setdefault("REFRACT_MODELS", str(ROOT / "data" / "models"))
    return env


def raw_rows(raw: Path) -> list[dict]:
    """The rows of a raw file (one JSON object a line), none when it does not exist yet."""
    if not raw.exists():
        return []
    return [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]


def main() -> None:
    if "--help" in sys.argv or "-h" in sys.argv:  # not a run: without it, this rewrote the page from --raw
        print(__doc__)
        return
    raw = Path(_arg("--raw", RAW))
    out = Path(_arg("--out", OUT))
    if "--report" not in sys.argv:
        folders = sorted(p for p in Path(_arg("--tasks", TASKS)).iterdir() if (p / "task.toml").exists())
        only = _arg("--only")
        if only:
            folders = [f for f in folders if f.name in only.split(",")]
        systems = _arg("--systems", ",".join(SYSTEMS)).split(",")
        seeds, first_seed = int(_arg("--seeds", 5)), int(_arg("--first-seed", 0))
        if seeds <= first_seed:  # `--seeds 1 --first-seed 20` ran nothing, silently
            raise SystemExit(f"--seeds: {seeds} is not above --first-seed {first_seed}; --seeds is where the seeds end "
                             f"(seeds {first_seed} to N - 1 run), not how many")
        scale = float(_arg("--scale", 1.0))
        # --refract NAME='{"search": {...}}' (repeatable) defines the system refract:NAME
        variants = dict(a.split("=", 1) for i, a in enumerate(sys.argv) if i and sys.argv[i - 1] == "--refract")
        results = raw_rows(raw)
        baselines = {r["task"]: r for r in results if r.get("system") == "seed"}
        for folder in folders:
            name = tomllib.loads((folder / "task.toml").read_text())["name"]
            if name not in baselines:
                base = dict(seed_scores(folder), system="seed", task=name)
                append_row(raw, base)
                baselines[name] = base
        for seed in range(first_seed, seeds):
            for folder in folders:
                task = tomllib.loads((folder / "task.toml").read_text())
                seconds = task["seconds"] * scale
                for system in systems:
                    if any(r.get("system") == system and r["task"] == task["name"] and r["seed"] == seed
                           and r["seconds"] == seconds for r in raw_rows(raw)):
                        continue
                    print(f"== {system} {task['name']} seed {seed} ({seconds:g} s)", flush=True)
                    env = _env()
                    if system.startswith("refract:"):  # a variant: refract:NAME with --refract NAME=JSON
                        env["REAL_LM_REFRACT"] = variants[system.split(":", 1)[1]]
                    if system.startswith("gepa:"):  # GEPA with PxNSampling(P, N): gepa:PxN
                        env["REAL_LM_GEPA_PXN"] = system.split(":", 1)[1]
                    for attempt in range(2):  # once more if the process died (a shared machine's load)
                        proc = subprocess.run([sys.executable, __file__, "--one", system, str(folder), str(seed),
                                               str(seconds)], capture_output=True, text=True, env=env)
                        if proc.returncode == 0:
                            break
                        print(f"   exit code {proc.returncode}:\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
                    else:
                        raise SystemExit(f"{system} {task['name']} seed {seed} failed twice")
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    append_row(raw, result)
                    print(f"   val {result['val_best']:.3f} test {result['test_best']:.3f} "
                          f"calls {result['lm_calls']} wall {result['wall']:.0f} s", flush=True)
    from bench.real_lm_report import write_page

    write_page(raw_rows(raw), out, raw)


def append_row(raw: Path, row: dict) -> None:
    """One row at the end of a raw file, as soon as it is known (a run cut short keeps what it did)."""
    raw.parent.mkdir(parents=True, exist_ok=True)
    with raw.open("a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    if "--one" in sys.argv:
        i = sys.argv.index("--one")
        system, folder, seed, seconds = sys.argv[i + 1], Path(sys.argv[i + 2]), int(sys.argv[i + 3]), float(sys.argv[i + 4])
        print(json.dumps(one(system, folder, seed, seconds)), flush=True)
        # a reflection cut at the deadline still runs inside the local runtime: tearing the
        # interpreter down under it crashed the process (SIGSEGV in xllamacpp) after the result
        sys.stderr.flush()
        os._exit(0)
    else:
        main()
