"""Findings about time: what a step waits for (the reflection LM or the evaluator), the speed-up
another batch shape, more workers or the other schedule would give (the runtime model,
``engine.runtime.model``, fed with the run's measured latencies), and when the budget runs out."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from storage.states import LMCallStatus

from engine.analyze.finding import INFO, WARNING, Action, Finding
from engine.analyze.records import RunRecords
from engine.lm.providers import is_local
from engine.runtime.model import Latencies, Shape, async_rate, latencies_from, slowest_lm, sync_step

WORTH = 1.5  # a change that speeds the run up less than this is mentioned, not urged
RECENT_STEPS = 5


def latencies(recs: RunRecords) -> Optional[Latencies]:
    lm = [c["seconds"] for c in recs.lm_calls if c["purpose"] in ("reflection", "merge") and not c["cached"]
          and c["status"] == LMCallStatus.DONE and c["seconds"]]
    total = int(recs.run.get("proposals_total") or 0)
    mean_eval, n_evals = recs.eval_seconds
    if len(lm) < 3 or n_evals < 5:
        return None
    minibatch = min(int(recs.search["minibatch_size"]), recs.n_train) if recs.n_train else 1
    return latencies_from(lm, [mean_eval], int(recs.run.get("proposals_improved") or 0) / total if total else None,
                          minibatch, max(1, len(recs.val_keys)), int(recs.executor.get("workers") or 1))


def shape(recs: RunRecords) -> Shape:
    s = recs.search
    return Shape(parents=int(s["parents_per_step"]), per_parent=int(s["proposals_per_parent"]), accept=s["accept"],
                 top_k=int(s["top_k"]), merge_siblings=bool(s["merge_siblings"]), schedule=s["schedule"])


def seconds_per_call(sh: Shape, lat: Latencies, serial_lm: bool) -> float:
    """Wall-clock seconds per metric call of a shape (a serial LM answers a step's calls in turn)."""
    if serial_lm:
        lat = replace(lat, lm=lat.lm * sh.k, lm_spread=0.0)
    if sh.schedule == "async" and sh.k > 1:
        rate, calls = async_rate(sh.k, lat)
        return 1 / (rate * calls) if rate > 0 and calls > 0 else float("inf")
    seconds, calls = sync_step(sh, lat)
    return seconds / calls if calls > 0 else float("inf")


def alternatives(sh: Shape, workers: int, serial_lm: bool) -> list[tuple[str, dict, Shape, int]]:
    """(what changes, its settings, the shape, the workers) for each change worth pricing."""
    out = []
    if sh.per_parent < 64 and not serial_lm:
        out.append((f"K {sh.per_parent} → {sh.per_parent * 2}", {"search.proposals_per_parent": sh.per_parent * 2},
                    replace(sh, per_parent=sh.per_parent * 2), workers))
    if sh.parents < 64 and not serial_lm:
        out.append((f"P {sh.parents} → {sh.parents * 2}", {"search.parents_per_step": sh.parents * 2},
                    replace(sh, parents=sh.parents * 2), workers))
    out.append((f"W {workers} → {workers * 2}", {"executor.workers": workers * 2}, sh, workers * 2))
    if sh.schedule == "sync" and sh.k > 1 and not serial_lm:
        out.append(("the asynchronous schedule", {"search.schedule": "async", "search.accept": "all"},
                    replace(sh, schedule="async"), workers))
    return out


def bound(recs: RunRecords) -> list[Finding]:
    """LM-bound or evaluator-bound, and the best change of P, K, W or schedule by the runtime model."""
    lat = latencies(recs)
    if lat is None:
        return []
    sh, workers, serial = shape(recs), int(recs.executor.get("workers") or 1), is_local(recs.reflection_model)
    step_s, _ = sync_step(sh, lat)
    lm_s = lat.lm * sh.k if serial else slowest_lm(lat, sh.k)
    lm_share = min(1.0, lm_s / step_s) if step_s > 0 else 0.0
    now = seconds_per_call(sh, lat, serial)
    priced = []
    for what, settings, alt, w in alternatives(sh, workers, serial):
        speed = now / seconds_per_call(alt, replace(lat, workers=w), serial)
        priced.append((speed, what, settings))
    priced.sort(key=lambda p: -p[0])
    kind = "lm_bound" if lm_share >= 0.5 else "evaluator_bound"
    waits = f"{lm_share:.0%} of a step waits for the reflection LM" if kind == "lm_bound" else \
        f"{1 - lm_share:.0%} of a step is spent evaluating"
    ranked = "; ".join(f"{what}: {speed:.2f}×" for speed, what, _ in priced)
    top_speed, top_what, top_settings = priced[0] if priced else (1.0, "", {})
    urge = top_speed >= WORTH  # a finished run too: a branch with that setting would run faster
    note = " The built-in local model answers one request at a time, so more proposals per step only queue." if serial else ""
    return [Finding(
        kind, WARNING if urge else INFO,
        f"{'LM-bound' if kind == 'lm_bound' else 'Evaluator-bound'}: {waits} (LM call {lat.lm:.2f} s, metric call "
        f"{lat.eval:.3f} s, {sh.parents}×{sh.per_parent} with {workers} workers)"
        + (f"; {top_what} would spend metric calls {top_speed:.1f}× faster" if top_speed >= 1.05 else ""),
        f"Predicted by the runtime model at this run's measured latencies, per metric call: {ranked or 'no change priced'}."
        + note,
        {"counts": {"lm_calls_measured": sum(1 for c in recs.lm_calls if c["purpose"] in ("reflection", "merge")),
                    "evaluations_sampled": recs.eval_seconds[1]},
         "speedups": {what: round(speed, 3) for speed, what, _ in priced}, "lm_share": round(lm_share, 3)},
        weight=top_speed,
        actions=[Action("branch", f"Branch with {top_what}", {"settings": top_settings},
                        f"Analyze: {top_what} would spend metric calls {top_speed:.1f}× faster")] if urge else [])]


def forecast(recs: RunRecords) -> list[Finding]:
    """When each budget runs out at the rates of the last steps (ETA), while the run goes."""
    if recs.finished:
        return []
    done = [s for s in recs.steps if s["ended_at"] is not None and s["seconds"]][-RECENT_STEPS:]
    secs = sum(float(s["seconds"]) for s in done)
    if not done or secs <= 0:
        return []
    run, b = recs.run, recs.budget
    rates = {"metric calls": sum(s["metric_calls"] for s in done) / secs, "dollars": sum(s["cost_usd"] for s in done) / secs}
    left = []
    if b.get("max_metric_calls") and rates["metric calls"] > 0:
        left.append(("metric calls", (b["max_metric_calls"] - run["metric_calls"]) / rates["metric calls"]))
    if b.get("max_cost_usd") and rates["dollars"] > 0:
        left.append(("dollars", (b["max_cost_usd"] - run["cost_usd"]) / rates["dollars"]))
    if b.get("max_seconds"):
        left.append(("seconds", b["max_seconds"] - float(run.get("seconds") or 0.0)))
    if b.get("max_steps"):
        left.append(("steps", (b["max_steps"] - run["steps_done"]) * secs / len(done)))
    if not left:
        return [Finding("budget_forecast", INFO, "No budget limit is set: the run goes on until it is stopped",
                        f"At the last steps' rate it spends {rates['metric calls']:.2f} metric calls a second.",
                        {"counts": {"steps_measured": len(done)}})]
    left.sort(key=lambda kv: kv[1])
    name, eta = left[0]
    actions = []
    if b.get("max_metric_calls"):
        more = int(b["max_metric_calls"] * 1.5)
        actions.append(Action("budget", f"Raise the metric-call budget to {more:,}", {"max_metric_calls": more},
                              "Analyze: budget forecast"))
    return [Finding(
        "budget_forecast", INFO,
        f"The {name} budget runs out first, in {_duration(max(0.0, eta))} of running at the rate of the last "
        f"{len(done)} steps ({rates['metric calls']:.2f} metric calls/s)",
        "Then: " + ", ".join(f"{n} in {_duration(max(0.0, t))}" for n, t in left[1:]) if len(left) > 1 else "",
        {"counts": {"steps_measured": len(done)}, "eta_seconds": {n: round(max(0.0, t), 1) for n, t in left}},
        weight=-eta, actions=actions)]


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
