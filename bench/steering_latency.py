"""Steering latency: how long after a person sends pin, veto, edit or pause it is applied.

Method: the toy words task (4 parents' worth of work per step: 2 parents x 2 proposals, 2 sandbox
workers) runs in this process on SQLite; a command is sent at a random moment while a reflection
is in flight (the worst case for a step-boundary command) and timed from ``send_command`` until
the command is ``applied`` (pin, veto, edit: at the next step boundary, the edit after its
validation pass) or, for pause, until the optimizer has returned with the run paused. Pin, veto
and edit wait for the step in flight; pause cuts it (``engine.interrupt``).

LMs: the scripted test LM with ``--lm-seconds`` per call (API speed: 3 s, a typical hosted
reflection call), and with ``--local`` the local model (pause only: the other commands wait for
a local step, minutes on a CPU, which the table states instead of measuring).

    .venv/bin/python bench/steering_latency.py [--repeats 3] [--lm-seconds 3] [--local]
        → docs/benchmarks-steering.md
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.commands import send_command  # noqa: E402
from engine.config import LOCAL_MODEL  # noqa: E402
from engine.lm.client import LMClient  # noqa: E402
from engine.optimizer import Optimizer  # noqa: E402
from engine.runs import submit_run  # noqa: E402
from storage import leases, repo  # noqa: E402
from storage.db import Database  # noqa: E402
from tests.support import toy  # noqa: E402
from tests.support.harness import toy_config  # noqa: E402
from tests.support.scripted_lm import install_script  # noqa: E402

OUT = ROOT / "docs" / "benchmarks-steering.md"


class _Running:
    """One run in a thread of this process, as a worker would run it."""

    def __init__(self, db: Database, model: str, tmp: Path) -> None:
        self.db = db
        cfg = toy_config(8, reflection_lm={"model": model, "num_retries": 0, "max_tokens": 256},
                         budget={"max_steps": 200, "stop_at_score": None, "max_metric_calls": 100_000})
        self.run_id = submit_run(db, cfg)
        leases.claim_run(db, "bench", 600, run_id=self.run_id)
        self.opt = Optimizer(db, self.run_id, lm=LMClient(tmp / "lm-cache"))
        self.thread = threading.Thread(target=self.opt.run, daemon=True)
        self.thread.start()

    def reflecting(self, timeout: float = 600) -> None:
        """Until a reflection request is in flight."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            calls = repo.lm_calls_for(self.db, self.run_id)
            if any(c.purpose == "reflection" and c.status == "started" for c in calls):
                return
            time.sleep(0.02)
        raise RuntimeError("no reflection started")

    def timed(self, kind: str, payload: dict, jitter: float) -> float:
        self.reflecting()
        time.sleep(random.uniform(0, jitter))
        t0 = time.monotonic()
        cid = send_command(self.db, self.run_id, kind, payload, author="bench", reason="latency")
        if kind == "pause":
            self.thread.join()
        else:
            while next(c for c in repo.list_commands(self.db, self.run_id) if c.id == cid).status == "pending":
                time.sleep(0.02)
        return time.monotonic() - t0

    def seed_when_ready(self, timeout: float = 600) -> str:
        """The seed's id, once it has been validated."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seed = next((c for c in repo.list_candidates(self.db, self.run_id) if c.origin == "seed"), None)
            if seed is not None and seed.val_mean is not None:
                return seed.id
            time.sleep(0.05)
        raise RuntimeError("the seed was not validated")


def measure(model: str, repeats: int, jitter: float, kinds: tuple[str, ...]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            db = Database(f"sqlite:///{tmp}/bench.db")
            db.create_all()
            run = _Running(db, model, Path(tmp))
            seed = run.seed_when_ready()
            for kind in kinds:
                payload = _payload(run, kind, seed)
                out[kind].append(run.timed(kind, payload, jitter))
            run.opt.stop_event.set()
            run.thread.join(timeout=600)
            db.dispose()
    return out


def _payload(run: _Running, kind: str, seed: str) -> dict:
    if kind == "pin":
        return {"candidate_id": seed}
    if kind == "edit":
        return {"candidate_id": seed, "content": "start alpha bravo"}
    if kind == "veto":
        human = [c.id for c in repo.list_candidates(run.db, run.run_id) if c.origin == "human"]
        return {"candidate_id": human[0] if human else seed}
    return {}


def _row(label: str, kind: str, times: list[float], note: str = "") -> str:
    if not times:
        return f"| {label} | {kind} | – | – | – | {note} |"
    return (f"| {label} | {kind} | {statistics.median(times):.2f} | {max(times):.2f} | {len(times)} | {note} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lm-seconds", type=float, default=3.0)
    ap.add_argument("--local", action="store_true", help="also the local model (pause only)")
    args = ap.parse_args()
    random.seed(0)
    install_script(toy.endless, latency=args.lm_seconds)
    api = measure("scripted/toy", args.repeats, args.lm_seconds, ("pin", "edit", "veto", "pause"))
    rows = [_row(f"scripted, {args.lm_seconds:g} s per call", k, api[k],
                 "applied at the next step boundary" if k != "pause" else "cuts the step in flight")
            for k in ("pin", "veto", "edit", "pause")]
    if args.local:
        local = measure(LOCAL_MODEL, args.repeats, 5.0, ("pause",))
        wait = ("not measured: applied when the local step in flight ends (a local reflection takes tens of seconds "
                "to minutes, see benchmarks-local-lm.md)")
        rows += [_row("local model (CPU)", k, [], wait) for k in ("pin", "veto", "edit")]
        rows.append(_row("local model (CPU)", "pause", local["pause"],
                         "cuts the step in flight (the abandoned generation runs on until it ends)"))
    load = os.getloadavg()[0]
    OUT.write_text(
        "# Steering latency\n\n"
        "Seconds from sending a command to it being applied, on a run whose reflection LM call is in flight "
        "(the command is sent at a random moment of it). Written by `bench/steering_latency.py`; method in its "
        f"docstring. Machine load average while measuring: {load:.1f} on {os.cpu_count()} cores.\n\n"
        "| LM | command | median s | max s | n | when it applies |\n| --- | --- | --- | --- | --- | --- |\n"
        + "\n".join(rows) + "\n\n"
        "A pause or a stop cuts the work in flight: LM requests are abandoned (recorded as `interrupted`, their cost "
        "estimated from the prompt), evaluations not yet started are cancelled, the step is closed with what was "
        "done, and resuming starts the next step. The target is 5 s whatever the model. Pin, veto and edit are "
        "applied at the step boundary, so they wait for the step in flight (with an edit, also for its own "
        "validation pass).\n")
    print(OUT.read_text())


if __name__ == "__main__":
    main()
