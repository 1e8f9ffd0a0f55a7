"""Fast start: from a run being claimed by a running worker to its first seed evaluation.

Method (before and after in one run of this script). For each engine version — "before" is
a git checkout of ``--before`` (the engine without the fast start), "after" is this tree — a
long-lived worker (``python -m engine worker``'s own ``engine.cli.main``) runs in a child
process on a fresh SQLite database and is left to settle until its CPU is idle. Then
``--runs`` runs are submitted one after the other, each after the previous one has ended and
the worker has settled again. Every run has 8 validation examples, 4 sandboxed workers and a
seed that already scores the run's ``stop_at_score``: the seed's validation pass is the whole
run, so no LM is called.

The child times each phase from the claim, by wrapping the engine's own functions (no change
to the engine is needed, so the old version is measured the same way): the imports of
``engine.lm.client`` (litellm) and ``engine.sandbox.pool`` done after the claim, the LM client
ready, the sandbox pool started, its first sandbox worker up, the first seed evaluation
finished, the seed's whole validation pass finished. Phases that run at the same time
overlap. The load average is recorded beside the figures (a shared machine).

    .venv/bin/python bench/fast_start.py        →   docs/benchmarks-fast-start.md
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "c3e72be"  # main before the fast start
DOC = ROOT / "docs" / "benchmarks-fast-start.md"
N_VAL = 8
EVALUATOR = '''
def evaluate(candidate, example):
    return (1.0 if example["word"] in candidate.split() else 0.0), {"expected": example["word"]}
'''
PHASES = [  # (key, label)
    ("imports", "imports on the claim path (litellm, the sandbox pool), s"),
    ("lm_client", "LM client ready, s after the claim"),
    ("pool_start", "sandbox pool started, s after the claim"),
    ("first_worker", "first sandbox worker up, s after the claim"),
    ("first_eval", "**first seed evaluation finished, s after the claim**"),
    ("seed_pass", "seed's validation pass finished (8 evaluations), s after the claim"),
]


# -- the child: a long-lived worker with timers around the engine's functions -------------------

class Probe:
    """Times (monotonic) of each run's phases, written to ``out`` as JSON after every event."""

    def __init__(self, out: str) -> None:
        self.out, self.lock = out, threading.Lock()
        self.imports: list[tuple[str, float, float]] = []
        self.runs: list[dict] = []

    def mark(self, key: str, first: bool = True) -> None:
        with self.lock:
            if self.runs and not (first and key in self.runs[-1]):
                self.runs[-1][key] = time.monotonic()
                self._write()

    def evaluated(self) -> None:
        """One more evaluation of the current run finished: the first, and the whole seed pass."""
        with self.lock:
            run = self.runs[-1] if self.runs else {}
            run["evaluations"] = run.get("evaluations", 0) + 1
        self.mark("first_eval")
        if run.get("evaluations") == N_VAL:
            self.mark("seed_pass")

    def claimed(self, run_id: str) -> None:
        with self.lock:
            self.runs.append({"run": run_id, "claim": time.monotonic()})
            self._write()

    def imported(self, name: str, start: float, end: float) -> None:
        with self.lock:
            self.imports.append((name, start, end))
            self._write()

    def _write(self) -> None:
        Path(self.out).write_text(json.dumps({"imports": self.imports, "runs": self.runs}))


def _wrap(obj, name: str, before=None, after=None) -> None:
    real = getattr(obj, name)

    def wrapper(*args, **kwargs):
        if before:
            before()
        result = real(*args, **kwargs)
        if after:
            after(result)
        return result

    setattr(obj, name, wrapper)


class ImportTimer:
    """A meta-path finder that times the import of the named modules and patches them."""

    def __init__(self, probe: Probe, hooks: dict) -> None:
        self.probe, self.hooks = probe, hooks

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader.exec_module

        def exec_module(module):
            t0 = time.monotonic()
            real(module)
            self.probe.imported(name, t0, time.monotonic())
            self.hooks[name](module)

        spec.loader.exec_module = exec_module
        return spec


def _patch_lm(probe: Probe):
    return lambda mod: _wrap(mod.LMClient, "__init__", after=lambda _: probe.mark("lm_client"))


def _patch_pool(probe: Probe):
    def patch(mod) -> None:
        pool = mod.LocalPool
        _wrap(pool, "__init__", before=lambda: probe.mark("pool_start"))
        _wrap(pool, "_start", after=lambda r: r[0] is not None and probe.mark("first_worker"))
        _wrap(pool, "submit", after=lambda fut: fut.add_done_callback(lambda _: probe.evaluated()))

    return patch


def child(root: str, db_url: str, out: str) -> int:
    sys.path.insert(0, root)
    probe = Probe(out)
    sys.meta_path.insert(0, ImportTimer(probe, {"engine.lm.client": _patch_lm(probe),
                                                "engine.sandbox.pool": _patch_pool(probe)}))
    from storage import leases

    real_claim = leases.claim_run

    def claim(*args, **kwargs):
        run_id = real_claim(*args, **kwargs)
        if run_id is not None:
            probe.claimed(run_id)
        return run_id

    leases.claim_run = claim
    from engine.cli import main

    return main(["worker", "--db", db_url, "--poll", "0.2", "--runs", "1"])


# -- the parent: submit runs to each version's worker --------------------------------------------

def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, limit: float = 180.0) -> float:
    """Wait until the worker process uses < 5 % of a core over 2 s; seconds waited."""
    t0 = time.monotonic()
    time.sleep(2)
    last = _cpu_seconds(pid)
    while time.monotonic() - t0 < limit:
        time.sleep(2)
        now = _cpu_seconds(pid)
        if now - last < 0.1:
            break
        last = now
    return time.monotonic() - t0


def run_config():
    from engine.config import parse_config

    rows = [{"id": f"e{i}", "word": f"w{i}"} for i in range(N_VAL)]
    seed = " ".join(row["word"] for row in rows)  # scores 1.0: the run ends after the seed's pass
    return parse_config({"name": "fast start", "seed_candidate": seed, "evaluator": EVALUATOR, "dataset": rows,
                         "budget": {"max_metric_calls": 100, "stop_at_score": 1.0},
                         "reflection_lm": {"model": "openai/gpt-4o-mini"},
                         "executor": {"workers": 4}})


def measure(root: Path, runs: int) -> list[dict]:
    """Each run's phases, in seconds after its claim."""
    from engine.runs import submit_run
    from storage import repo
    from storage.db import Database

    with tempfile.TemporaryDirectory() as tmp:
        url, out = f"sqlite:///{tmp}/bench.db", f"{tmp}/probe.json"
        db = Database(url)
        db.create_all()
        proc = subprocess.Popen([sys.executable, __file__, "--child", "--root", str(root), "--db", url, "--out", out],
                                cwd=root, stderr=subprocess.DEVNULL)
        try:
            settle(proc.pid)
            for _ in range(runs):
                run_id = submit_run(db, run_config())
                while repo.get_run(db, run_id).status in ("queued", "running"):
                    time.sleep(0.2)
                settle(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        data = json.loads(Path(out).read_text())
        db.dispose()
    return [_phases(run, data["imports"]) for run in data["runs"]]


def _phases(run: dict, imports: list) -> dict:
    claim = run["claim"]
    end = run.get("first_eval", claim)
    on_path = sum(max(0.0, min(b, end) - max(a, claim)) for _, a, b in imports)
    out = {"imports": on_path}
    for key, _ in PHASES[1:]:
        out[key] = run[key] - claim if key in run else None
    return out


def checkout(ref: str, where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref], check=True,
                   capture_output=True)


def remove_checkout(where: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], capture_output=True)


def _cell(values: list) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "—"
    return f"{statistics.median(got):.2f}" + (f" ({min(got):.2f}–{max(got):.2f})" if len(got) > 1 else "")


def report(results: dict, loads: tuple, runs: int) -> str:
    head = ("| phase | before: first run | before: next runs | after: first run | after: next runs |\n"
            "|---|---:|---:|---:|---:|\n")
    rows = []
    for key, label in PHASES:
        cells = []
        for version in ("before", "after"):
            phases = results[version]
            cells += [_cell([phases[0][key]]), _cell([p[key] for p in phases[1:]])]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return f"""# Fast start: from the claim to the first seed evaluation

Produced by `bench/fast_start.py` (before and after measured in one run). Load average
{loads[0]} at the start, {loads[1]} at the end (2 cores, shared with other work: figures
under load are slower than on an idle machine).

**Method.** A long-lived worker (`python -m engine worker`'s own code, one run at a time) is
started on a fresh SQLite database and left until its CPU is idle; then {runs} runs are submitted
one after the other, each after the previous one ended and the worker settled again. A run has
{N_VAL} validation examples, 4 sandboxed workers (bubblewrap), and a seed that scores 1.0, the
run's `stop_at_score` (the seed's validation pass is the whole run; no LM call). Each phase is
timed from the claim by wrapping the engine's functions, so both versions are measured alike.
"Before" is the engine at `{BEFORE}`; "after" is this version. Phases overlap where they run
concurrently; the row in bold is the measure (target: 1.5 s). "Next runs" shows the median (min–max) of runs 2–{runs}.

{head}{chr(10).join(rows)}

**What changed.** A long-lived worker imports the LM client (litellm) before its first claim
instead of inside the first run; a run builds its LM client in a thread while its sandbox pool
starts and its seed is evaluated (the LM is first needed for the first reflection); and the
worker keeps a warm stock of spawned sandbox processes between runs (`engine/sandbox/warm.py`),
so a run's pool only loads its evaluator into them. The stock holds processes that have loaded
nothing, and a pool never gives one back (they die with the run): no run's evaluator state
reaches the next run (`tests/test_warm_stock.py` checks this on both databases).
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--before", default=BEFORE, help="git ref of the engine to compare with")
    ap.add_argument("--runs", type=int, default=3, help="runs per version")
    args = ap.parse_args()
    if args.child:
        sys.exit(child(args.root, args.db, args.out))
    sys.path.insert(0, str(ROOT))
    loads = [f"{os.getloadavg()[0]:.1f}"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "before"
        checkout(args.before, where)
        try:
            results["before"] = measure(where, args.runs)
        finally:
            remove_checkout(where)
    results["after"] = measure(ROOT, args.runs)
    loads.append(f"{os.getloadavg()[0]:.1f}")
    text = report(results, tuple(loads), args.runs)
    DOC.write_text(text)
    print(text)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
