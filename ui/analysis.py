"""Pure computations on the plain data the queries return (no Streamlit, no database).

The frontier here is the same per-example Pareto frontier as ``engine.frontier`` (best score
per validation example, ties kept), computed with pandas so that 2,000 candidates × 200
examples take milliseconds. Vetoed candidates are excluded from it, as in selection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

import pandas as pd

TOL = 1e-9


def natural_key(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


@dataclass
class FrontierView:
    matrix: pd.DataFrame  # candidates (rows) × examples (columns), NaN where not evaluated
    best: pd.Series  # example -> best score among eligible candidates
    best_on: pd.Series  # candidate -> number of examples where it holds the best score
    unique_best_on: pd.Series  # candidate -> examples where it alone holds the best score
    members: list[str] = field(default_factory=list)  # frontier members, most examples first


def frontier(scores: pd.DataFrame, candidates: pd.DataFrame) -> FrontierView:
    """Per-example best among non-vetoed candidates evaluated there, and who holds it."""
    if scores.empty:
        empty = pd.Series(dtype="float64")
        return FrontierView(pd.DataFrame(), empty, empty, empty, [])
    matrix = scores.groupby(["candidate_id", "example"])["score"].max().unstack()
    matrix = matrix[sorted(matrix.columns, key=natural_key)]
    vetoed = set(candidates.loc[candidates["vetoed"].astype(bool), "id"]) if not candidates.empty else set()
    eligible = matrix.loc[[c for c in matrix.index if c not in vetoed]]
    best = eligible.max(axis=0)
    holds = eligible.ge(best - TOL, axis=1) & eligible.notna()
    best_on = holds.sum(axis=1)
    n_holders = holds.sum(axis=0)
    unique = (holds & n_holders.eq(1)).sum(axis=1)
    members = best_on[best_on > 0].sort_values(ascending=False)
    return FrontierView(matrix, best, best_on, unique, list(members.index))


@dataclass
class BudgetState:
    name: str
    used: float
    limit: float

    @property
    def fraction(self) -> float:
        return min(1.0, self.used / self.limit) if self.limit else 0.0

    def label(self) -> str:
        fmt = {"metric calls": "{:,.0f}", "dollars": "${:,.4f}", "seconds": "{:,.0f} s", "steps": "{:,.0f}",
               "score": "{:.3f}"}[self.name]
        return f"{self.name}: {fmt.format(self.used)} / {fmt.format(self.limit)}"


def budgets(run: dict, elapsed: float) -> list[BudgetState]:
    """Every configured budget with how much of it is used, the binding one (largest share) first."""
    b = (run.get("config") or {}).get("budget") or {}
    out = []
    if b.get("max_metric_calls"):
        out.append(BudgetState("metric calls", run.get("metric_calls") or 0, b["max_metric_calls"]))
    if b.get("max_cost_usd"):
        out.append(BudgetState("dollars", run.get("cost_usd") or 0.0, b["max_cost_usd"]))
    if b.get("max_seconds"):
        out.append(BudgetState("seconds", elapsed, b["max_seconds"]))
    if b.get("max_steps"):
        out.append(BudgetState("steps", run.get("steps_done") or 0, b["max_steps"]))
    if b.get("stop_at_score") not in (None, 0) and run.get("best_val_mean") is not None:
        out.append(BudgetState("score", max(0.0, run["best_val_mean"]), b["stop_at_score"]))
    return sorted(out, key=lambda s: -s.fraction)


def score_progress(run: dict, candidates: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Best and mean validation score of the pool after each step, against cumulative metric
    calls, dollars and seconds since the start. One row per step; the first row (step -1) is
    the seed alone (the engine numbers its first step 0, so the seed gets a row of its own)."""
    cols = ["step", "metric_calls", "cost_usd", "seconds", "best", "mean"]
    scored = candidates[candidates["val_mean"].notna() & ~candidates["vetoed"].astype(bool)] if not candidates.empty \
        else candidates
    if scored.empty:
        return pd.DataFrame(columns=cols)
    scored = scored.assign(step=scored["step"].where(scored["origin"] != "seed", -1))
    start = run.get("started_at")
    per = scored.groupby("step")["val_mean"].agg(["max", "sum", "count"])
    calls_in_steps = float(steps["metric_calls"].sum()) if not steps.empty else 0.0
    seed_calls = max(0.0, (run.get("metric_calls") or 0) - calls_in_steps)  # the seed's validation pass
    seed_done = scored.loc[scored["step"] == -1, "finished_at"].max() if -1 in per.index else None
    timeline = pd.DataFrame({"step": [-1], "metric_calls": [0.0], "cost_usd": [0.0], "at": [seed_done]})
    if not steps.empty:
        at = steps["ended_at"].where(steps["ended_at"].notna(), steps["started_at"])
        timeline = pd.concat([timeline, pd.DataFrame({"step": steps["index"], "metric_calls": steps["metric_calls"],
                                                      "cost_usd": steps["cost_usd"], "at": at})], ignore_index=True)
    timeline = timeline.groupby("step", as_index=False).agg(metric_calls=("metric_calls", "sum"),
                                                            cost_usd=("cost_usd", "sum"), at=("at", "last"))
    per = per.reindex(timeline["step"]).fillna({"sum": 0.0, "count": 0})
    out = pd.DataFrame({
        "step": timeline["step"].to_numpy(),
        "metric_calls": seed_calls + timeline["metric_calls"].cumsum().to_numpy(),
        "cost_usd": timeline["cost_usd"].cumsum().to_numpy(),
        "seconds": [_secs(t, start) for t in timeline["at"]],
        "best": per["max"].cummax().to_numpy(),
        "mean": (per["sum"].cumsum() / per["count"].cumsum()).to_numpy(),
    })
    return out[out["best"].notna() & out["mean"].notna()][cols].reset_index(drop=True)


def _secs(ts, start) -> Optional[float]:
    if ts is None or start is None or pd.isna(ts):
        return None
    ts = ts.to_pydatetime() if hasattr(ts, "to_pydatetime") else ts
    return (ts - start).total_seconds()


def measured_speedup(steps: pd.DataFrame) -> Optional[float]:
    """Sum of each proposal's own latency (reflect + evaluate + validate spans) over the steps'
    wall-clock: how much faster the batch ran than the same proposals one after another."""
    if steps.empty:
        return None
    serial = wall = 0.0
    for st_ in steps.itertuples(index=False):
        if not st_.events or not st_.seconds:
            continue
        spans: dict[str, float] = {}
        for ev in st_.events:
            try:
                spans[ev.get("candidate_id") or ""] = spans.get(ev.get("candidate_id") or "", 0.0) + \
                    max(0.0, float(ev["end"]) - float(ev["start"]))
            except (KeyError, TypeError, ValueError):
                continue
        serial += sum(spans.values())
        wall += float(st_.seconds)
    return serial / wall if wall > 0 else None


def speedups(steps: pd.DataFrame) -> tuple[Optional[float], Optional[float]]:
    """(measured, predicted) speed-up of the batch shape: the means of what the engine recorded
    on its steps (``Step.measured_speedup`` / ``predicted_speedup``). Steps recorded before the
    engine measured it fall back to the timeline estimate of ``measured_speedup``."""
    if steps.empty:
        return None, None
    measured = steps["measured_speedup"].dropna() if "measured_speedup" in steps else pd.Series(dtype="float64")
    predicted = steps["predicted_speedup"].dropna()
    return (float(measured.mean()) if len(measured) else measured_speedup(steps),
            float(predicted.mean()) if len(predicted) else None)


def timeline_events(steps: pd.DataFrame, run_start: Optional[datetime], last_steps: int = 8) -> pd.DataFrame:
    """Flatten the events of the last steps into (step, kind, candidate_id, start, end) seconds
    since the run started. Events may carry epoch seconds, ISO times or offsets; all are mapped."""
    cols = ["step", "kind", "candidate_id", "start", "end"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    t0 = run_start.timestamp() if run_start else None
    rows = []
    for st_ in steps.tail(last_steps).itertuples(index=False):
        for ev in st_.events or []:
            s, e = _ev_time(ev.get("start"), t0), _ev_time(ev.get("end"), t0)
            if s is None or e is None:
                continue
            rows.append(dict(step=st_.index, kind=str(ev.get("kind", "?")), candidate_id=str(ev.get("candidate_id") or ""),
                             start=s, end=max(e, s)))
    return pd.DataFrame(rows, columns=cols)


def _ev_time(v, t0: Optional[float]) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            v = datetime.fromisoformat(v)
        except ValueError:
            return None
    if isinstance(v, datetime):
        v = (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).timestamp()
    v = float(v)
    if v > 1e9 and t0 is not None:  # epoch seconds
        return v - t0
    return v


def children_counts(candidates: pd.DataFrame) -> dict[str, dict[str, int]]:
    """parent id -> {status: number of children}."""
    out: dict[str, dict[str, int]] = {}
    for pids, status in zip(candidates["parent_ids"], candidates["status"]):
        for p in pids or []:
            d = out.setdefault(p, {})
            d[status] = d.get(status, 0) + 1
    return out


def ancestors(candidates: pd.DataFrame, candidate_id: str) -> list[str]:
    """All ancestors (parents first, breadth-first) of a candidate."""
    parents = dict(zip(candidates["id"], candidates["parent_ids"]))
    seen, order, queue = set(), [], list(parents.get(candidate_id) or [])
    while queue:
        p = queue.pop(0)
        if p in seen:
            continue
        seen.add(p)
        order.append(p)
        queue.extend(parents.get(p) or [])
    return order


def typed_members(view: FrontierView, objectives: pd.DataFrame, frontier_type: str) -> FrontierView:
    """The view with ``members`` and ``best_on`` following the run's ``[search] frontier`` type
    (entries: examples and/or side_info["scores"] objectives, as the engine selects parents);
    the matrix and the per-example columns stay as they are."""
    from engine.frontier_types import typed_frontier

    if frontier_type == "instance" or view.matrix.empty or (frontier_type == "hybrid" and objectives.empty):
        return view  # hybrid without objectives is the per-example frontier
    eligible = list(view.best_on.index)
    scores = {c: view.matrix.loc[c].dropna().to_dict() for c in eligible}
    per: dict = {}
    for row in objectives.itertuples(index=False):
        if row.candidate_id in scores:
            per.setdefault(row.candidate_id, {}).setdefault(row.example, {})[row.objective] = float(row.value)
    front = typed_frontier(scores, per, frontier_type)
    best_on = pd.Series({c: sum(1 for h in front.holders.values() if c in h) for c in eligible}, dtype="int64")
    members = best_on[best_on > 0].sort_values(ascending=False)
    return FrontierView(view.matrix, view.best, best_on, view.unique_best_on, list(members.index))
