"""Time to quality for ``bench/batching.py``: when did a run's best validation score first reach
a target, and how many metric calls had it spent by then.

A run's *trajectory* is its best-so-far validation mean over time: one point each time a
candidate finished a full validation pass (a pass cut short never makes a best, as in the
engine). The target of a configuration's run is 0.95 × the final best of the 1×1 run on the same
task and seed, so "time to quality" asks how soon each shape gets where one proposal at a time
gets with the whole budget.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import datetime
from typing import Optional

from storage import repo
from storage.db import Database

TARGET = 0.95


def refract_trajectory(db: Database, run_id: str, t0: datetime) -> list[list[float]]:
    """[[seconds since t0, metric calls so far, best validation mean so far], …] of a stored
    run, from its evaluation rows (their write times); a point per new best."""
    split = {ex.pk: ex.split for ex in repo.get_examples(db, run_id)}
    n_val = sum(1 for s in split.values() if s == "val")
    evs = sorted(repo.evaluations_for(db, run_id), key=lambda e: (e.created_at, e.id))
    tracker = _Tracker(n_val)
    calls = 0
    for ev in evs:
        kind = split.get(ev.example_pk)
        if kind == "test":
            continue
        calls += 0 if ev.cached else 1
        if kind == "val":
            tracker.add(ev.candidate_id, ev.example_pk, ev.score, (ev.created_at - t0).total_seconds(), calls)
    return tracker.points


class _Tracker:
    """Best-so-far validation mean over completed validation passes."""

    def __init__(self, n_val: int) -> None:
        self.n_val, self.scores, self.points, self.best = n_val, {}, [], float("-inf")

    def add(self, cand, example, score: float, seconds: float, calls: int) -> None:
        mine = self.scores.setdefault(cand, {})
        mine[example] = score
        if len(mine) == self.n_val:
            mean = sum(mine.values()) / self.n_val
            if mean > self.best + 1e-12:
                self.best = mean
                self.points.append([round(seconds, 3), calls, round(mean, 6)])


class GepaRecorder:
    """Wraps GEPA's evaluator to record the same trajectory: a candidate's validation mean is
    known once it was evaluated on every validation example."""

    def __init__(self, val_ids: set[str]) -> None:
        self.val_ids, self.t0 = val_ids, time.monotonic()
        self.tracker, self.calls, self.lock = _Tracker(len(val_ids)), 0, threading.Lock()

    def record(self, candidate: str, example: dict, score: float) -> None:
        with self.lock:
            self.calls += 1
            if example["id"] in self.val_ids:
                self.tracker.add(candidate, example["id"], score, time.monotonic() - self.t0, self.calls)

    @property
    def points(self) -> list[list[float]]:
        return self.tracker.points


def reached(points: list[list[float]], target: float) -> Optional[tuple[float, int]]:
    """(seconds, metric calls) when the best first reached ``target``; None if it never did."""
    return next(((s, c) for s, c, best in points if best >= target - 1e-9), None)


def add_time_to_quality(results: list[dict]) -> None:
    """Set ``ttq`` (seconds or None), ``ttq_calls`` and ``target`` on every row that has a
    trajectory, against the 1×1 row of its task and seed."""
    ref = {(r.get("task", "lines"), r["seed"]): r for r in results if r["config"] == "1×1"}
    for r in results:
        base = ref.get((r.get("task", "lines"), r["seed"]))
        if base is None or r.get("trajectory") is None:
            continue
        r["target"] = TARGET * (base["best_val"] or 0.0)
        hit = reached(r["trajectory"], r["target"])
        r["ttq"], r["ttq_calls"] = (hit if hit else (None, None))


def ttq_summary(results: list[dict], task: str) -> dict[str, dict]:
    """Per configuration of ``task``: mean time to quality over the seeds that reached it."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r["config"] for r in results if r.get("task", "lines") == task):
        rows = [r for r in results if r["config"] == name and r.get("task", "lines") == task and "target" in r]
        hit = [r for r in rows if r.get("ttq") is not None]
        out[name] = {"rows": rows, "reached": len(hit), "seeds": len(rows),
                     "ttq": statistics.mean(r["ttq"] for r in hit) if hit else None,
                     "calls": statistics.mean(r["ttq_calls"] for r in hit) if hit else None}
    return out


def ttq_table(results: list[dict], task: str) -> list[str]:
    """The markdown table of time to quality for ``task``."""
    s = ttq_summary(results, task)
    base = s.get("1×1", {}).get("ttq")
    lines = ["| configuration | reached (seeds) | time to quality (s) per seed | mean (s) | sooner than 1×1 | "
             "metric calls by then per seed | best val | merges: three-way / LM |", "|---|---|---|---|---|---|---|---|"]
    for name, agg in s.items():
        rows = agg["rows"]
        per = " / ".join("—" if r.get("ttq") is None else f"{r['ttq']:.1f}" for r in rows)
        calls = " / ".join("—" if r.get("ttq_calls") is None else str(r["ttq_calls"]) for r in rows)
        mean = "—" if agg["ttq"] is None else f"{agg['ttq']:.1f}"
        ratio = f"{base / agg['ttq']:.2f}×" if base and agg["ttq"] and agg["reached"] == agg["seeds"] else "—"
        val = statistics.mean(r["best_val"] or 0 for r in rows) if rows else 0.0
        m = [r.get("merges") or {} for r in rows]
        paths = (f"{sum(x.get('three_way', 0) for x in m)} / {sum(x.get('lm', 0) for x in m)}"
                 if any(x for x in m) else "—")
        lines.append(f"| {name} | {agg['reached']}/{agg['seeds']} | {per} | {mean} | {ratio} | {calls} | {val:.3f} | {paths} |")
    return lines
