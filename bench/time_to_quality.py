"""Time to quality for ``bench/batching.py``: when did a run's best validation score first reach
a target, and how many metric calls had it spent by then.

A run's *trajectory* is its best-so-far validation mean over time: one point each time a
candidate finished a full validation pass (a pass cut short never makes a best, as in the
engine). The target of a configuration's run is 0.95 × the final best of the 1×1 run on the same
task and seed, so "time to quality" asks how soon each shape gets where one proposal at a time
gets with the whole budget.

The runtime model predicts each run's time to quality (``add_predictions``), in improvements
that reached the best: how many the 1×1 run needed is measured once per task and seed, and
the model replays each shape's schedule with the run's own latencies until its best has taken
that many (``engine.runtime.model.predict_time_to_quality``).
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from datetime import datetime
from typing import Optional

from engine.runtime.model import Latencies, Shape, improvements_to_quality, predict_run_seconds, predict_time_to_quality
from storage import repo
from storage.db import Database

TASK_NAMES = {"lines": "incremental", "grouped": "overlapping", "keywords": "keywords"}  # the pages' names

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


def base_model(base: dict) -> tuple[int, float, tuple[float, ...]]:
    """(improvements to the target, engine overhead per step, ``best_of``) measured on a 1×1 row:
    the improvements from its metric calls by the time it reached the target; the overhead from
    its wall-clock the model's latencies do not account for (database writes, prompt building);
    ``best_of`` from the sizes of its improvements (``best_of``)."""
    lat = Latencies(**base["latencies"])
    modelled, _ = predict_run_seconds(Shape(), lat, base["metric_calls"])
    improvements = improvements_to_quality(base["ttq_calls"], lat)
    overhead = max(0.0, (base["wall"] - modelled) / max(base["steps"], 1))
    return improvements, overhead, best_of(base["trajectory"], base["ttq"], improvements)


def best_of(points: list[list[float]], until: float, improvements: int, widest: int = 8) -> tuple[float, ...]:
    """What keeping the best of n improving children brings the best, in improvements (n = 1 …
    ``widest``), from a 1×1 trajectory: until ``until`` its ``improvements`` improving proposals
    raised the best by the jumps of ``points`` (one per new best) and by nothing for the rest
    (children that improved on their minibatch but not on validation). A step that keeps the
    largest of n such gains expects E[max of n draws] / E[one draw]."""
    scores = [best for s, _, best in points if s <= until + 1e-9]
    draws = sorted([b - a for a, b in zip(scores, scores[1:])] + [0.0] * max(0, improvements - len(scores) + 1))
    mean = sum(draws) / len(draws)
    if mean <= 0:
        return ()
    k = len(draws)
    return tuple(sum(x * (((i + 1) / k) ** n - (i / k) ** n) for i, x in enumerate(draws)) / mean
                 for n in range(1, widest + 1))


def best_of_range(results: list[dict], n: int) -> str:
    """"a–b×": the least and greatest ``best_of`` for ``n`` children over the 1×1 rows that reached
    their target (both tasks)."""
    tables = [base_model(r)[2] for r in results if r["config"] == "1×1" and r.get("ttq_calls")]
    values = [t[min(n, len(t)) - 1] for t in tables if t]
    return f"{min(values):.1f}–{max(values):.1f}×" if values else "(not measured)"


def async_merges(results: list[dict]) -> str:
    """Merges tried and accepted by the asynchronous runs with merges, per task."""
    parts = []
    for task, name in TASK_NAMES.items():
        rows = [r for r in results if r.get("task", "lines") == task and r["config"].startswith("async")
                and r.get("merges")]
        tried, kept = sum(r["merges"]["tried"] for r in rows), sum(r["merges"]["accepted"] for r in rows)
        if tried:
            parts.append(f"{kept} of {tried} accepted on the {name} task")
    return "; ".join(parts) or "none tried"



def disagreements(results: list[dict]) -> str:
    """The predicted runs where the model and the engine disagree on whether the quality was
    reached, in words."""
    rows = [r for r in results if "ttq_predicted" in r]
    said = [r for r in rows if r.get("ttq") is None and r["ttq_predicted"] is not None]
    missed = [r for r in rows if r.get("ttq") is not None and r["ttq_predicted"] is None]
    name = lambda r: f"{r['config']} seed {r['seed']}" + (f" on the {TASK_NAMES[r['task']]} task"  # noqa: E731
                                                          if r.get("task", "lines") != "lines" else "")
    return (f"{len(said) + len(missed)} of {len(rows)} runs (the model says "
            + (", ".join(map(name, said)) or "none") + " reach it and they did not; it says "
            + (", ".join(map(name, missed)) or "none") + " do not, and they did)")


def _override(r: dict, overhead: float, best: tuple[float, ...]) -> Latencies:
    """The row's latencies, with the engine overhead and ``best_of`` of its 1×1 row, and merge
    success counted as merges accepted after validation (older raw results counted the merges
    that passed their minibatch test)."""
    lat = {**r["latencies"], "overhead": overhead, "best_of": best}
    merges = r.get("merges") or {}
    if merges.get("tried"):
        lat["merge_pass"] = merges["accepted"] / merges["tried"]
    return Latencies(**lat)


def add_predictions(results: list[dict], shapes: dict[str, Shape], budget: int) -> None:
    """Set ``ttq_predicted`` (seconds, or None if the model says the budget runs out first) on
    every row of a configuration in ``shapes``, from its own measured latencies and merge success
    and the improvements, overhead and ``best_of`` of the 1×1 row of its task and seed
    (``base_model``)."""
    ref = {(r.get("task", "lines"), r["seed"]): r for r in results if r["config"] == "1×1"}
    for r in results:
        base = ref.get((r.get("task", "lines"), r["seed"]))
        shape = shapes.get(r["config"])
        if shape is None or not r.get("latencies") or not base or not base.get("ttq_calls"):
            continue
        improvements, overhead, best = base_model(base)
        r["ttq_predicted"] = predict_time_to_quality(shape, _override(r, overhead, best), budget, improvements)


def prediction_table(results: list[dict], task: str) -> list[str]:
    """Predicted against measured time to quality per configuration of ``task``; the error of
    the mean over the seeds where both reached the quality."""
    lines = ["| configuration | measured per seed (s) | predicted per seed (s) | measured mean (s) | predicted mean (s) "
             "| error |", "|---|---|---|---|---|---|"]
    fmt = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
    for name, agg in ttq_summary(results, task).items():
        rows = [r for r in agg["rows"] if "ttq_predicted" in r]
        if not rows:
            continue
        both = [r for r in rows if r.get("ttq") is not None and r["ttq_predicted"] is not None]
        m = statistics.mean(r["ttq"] for r in both) if both else None
        p = statistics.mean(r["ttq_predicted"] for r in both) if both else None
        error = f"{(p / m - 1) * 100:+.0f} % ({len(both)} seeds)" if both else "—"
        lines.append(f"| {name} | {' / '.join(fmt(r.get('ttq')) for r in rows)} | "
                     f"{' / '.join(fmt(r['ttq_predicted']) for r in rows)} | {fmt(m)} | {fmt(p)} | {error} |")
    return lines


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


# What the runtime model says limits the 4× target: the measured 1×1 latencies (merges
# three-way and keeping every gain), then one limit lifted after another.
SCENARIOS = [
    ("as measured on 1×1 (merges three-way, every merge kept)", {}),
    ("the same, LM latencies varying (spread 0.5)", {"lm_spread": 0.5}),
    ("every proposal improves", {"accept": 1.0}),
    ("… and no engine overhead", {"accept": 1.0, "overhead": 0.0}),
    ("… and W = 16 workers", {"accept": 1.0, "overhead": 0.0, "workers": 16}),
    ("… and evaluations take no time", {"accept": 1.0, "overhead": 0.0, "workers": 16, "eval": 1e-4}),
]
MOONSHOT_SHAPES = ["4×1 merge", "async C=4 merge", "async C=8 merge"]


def moonshot_latencies(results: list[dict], task: str = "lines") -> Optional[tuple[Latencies, int]]:
    """The mean of the 1×1 rows' latencies (merges three-way and kept, their overhead and *best of
    n*) and the improvements they needed to reach the target; None without 1×1 rows."""
    ones = [r for r in results if r["config"] == "1×1" and r.get("task", "lines") == task and r.get("ttq_calls")]
    if not ones:
        return None
    models = [base_model(r) for r in ones]
    need = round(statistics.mean(g for g, _, _ in models))
    keys = ones[0]["latencies"]
    lat = Latencies(**{k: statistics.mean(r["latencies"][k] for r in ones) if isinstance(v, float) else v
                       for k, v in keys.items()})
    tables = [b for _, _, b in models if b]
    best = tuple(statistics.mean(b[i] for b in tables) for i in range(min(map(len, tables)))) if tables else ()
    return dataclasses.replace(lat, merge_lm=0.0, merge_pass=1.0, overhead=statistics.mean(o for _, o, _ in models),
                               best_of=best), need


def modelled_ratio(results: list[dict], shapes: dict[str, Shape], name: str, over: str, **change) -> Optional[float]:
    """The runtime model's time to quality of ``name`` over that of ``over`` at the 1×1 rows'
    latencies (``moonshot_latencies``), with ``change`` applied."""
    base = moonshot_latencies(results)
    if base is None or name not in shapes or over not in shapes:
        return None
    lat, need = dataclasses.replace(base[0], **change), base[1]
    return (predict_time_to_quality(shapes[name], lat, 10**6, need)
            / predict_time_to_quality(shapes[over], lat, 10**6, need))


def moonshot_table(results: list[dict], shapes: dict[str, Shape], task: str = "lines") -> list[str]:
    """Predicted 1×1 time to quality over each wide shape's, under ``SCENARIOS``, at the mean of
    the 1×1 rows' latencies, improvements to the target and overhead; also with twice the
    improvements (a target further away)."""
    base = moonshot_latencies(results, task)
    if base is None:
        return []
    lat, need = base
    names = [n for n in MOONSHOT_SHAPES if n in shapes]
    lines = ["| latencies | improvements to the target | " + " | ".join(f"{n}: sooner than 1×1" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for label, change in SCENARIOS:
        scenario = dataclasses.replace(lat, **change)
        for target in (need, 2 * need):
            t1 = predict_time_to_quality(Shape(), scenario, 10**6, target)
            ratios = [t1 / predict_time_to_quality(shapes[n], scenario, 10**6, target) for n in names]
            lines.append(f"| {label} | {target} | " + " | ".join(f"{x:.2f}×" for x in ratios) + " |")
    return lines
