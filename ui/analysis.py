"""Pure computations on the plain data the queries return (no Streamlit, no database).

The frontier here is the engine's own (``engine.search.frontier.compute_frontier``), so the numbers
the studio shows are the ones the engine selects parents from and the export records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

import numpy as np
import pandas as pd

from storage.run_figures import running_seconds

TOL = 1e-9


def natural_key(text: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


@dataclass
class FrontierView:
    # accepted candidates (rows) × examples (columns), NaN where not evaluated; no rows when the
    # engine keeps the frontier (``kept``: ``ui.frontier_view``), whose heatmap reads its own rows
    matrix: pd.DataFrame
    best: pd.Series  # example -> best score among eligible candidates
    best_on: pd.Series  # candidate -> number of examples where it holds the best score
    unique_best_on: pd.Series  # candidate -> examples where it alone holds the best score
    members: list[str] = field(default_factory=list)  # frontier members, most examples first
    contested: pd.Series = field(default_factory=lambda: pd.Series(dtype=bool))  # example -> not every eligible candidate ties
    # a frontier kept over objectives too ([search] frontier): candidate -> the entries it holds, by kind
    held: dict[str, dict[str, int]] = field(default_factory=dict)
    holders: pd.Series = field(default_factory=lambda: pd.Series(dtype="int64"))  # example -> candidates at its best
    kept: bool = False  # read from the rows the engine keeps, not computed from the scores
    aggregates: Optional[pd.DataFrame] = None  # kept: storage.frontier.FRONTIER_CANDIDATE_COLUMNS

    def best_on_text(self, cid: str) -> str:
        """"best on 7 of 8 examples" (per-example frontier), or with objectives "best on 7 of 8
        examples, 2 objectives": the number alone counted objectives as examples."""
        n_ex = len(self.matrix.columns)
        kinds = self.held.get(cid)
        if kinds is None:
            return f"best on {int(self.best_on.get(cid, 0))} of {n_ex} examples"
        parts = [f"{kinds['examples']} of {n_ex} examples" if kinds.get("examples") else "",
                 f"{kinds['objectives']} objective{'s' * (kinds['objectives'] != 1)}" if kinds.get("objectives") else "",
                 f"{kinds['pairs']} example-objective pairs" if kinds.get("pairs") else ""]
        return "best on " + (", ".join(p for p in parts if p) or "nothing")


def frontier(scores: pd.DataFrame, candidates: pd.DataFrame) -> FrontierView:
    """The engine's frontier (``engine.search.frontier.compute_frontier``: per example the best
    score among the accepted, non-vetoed candidates and who holds it, within ``TOL``) over their
    validation scores: what the engine selects parents from and the export records. Rejected
    proposals never count, even when the dataset doubles as the validation set and their
    minibatch scores sit on validation examples.

    Computed on arrays, not example by example: at 10,000 candidates × 500 examples (2.5 M
    scores) the loop over dicts took seconds. The one place it can differ from the engine's
    loop is scores closer than ``TOL`` yet unequal on one example, which the loop groups around
    the first it met and this around the highest."""
    empty = pd.Series(dtype="float64")
    if scores.empty or candidates.empty:
        return FrontierView(pd.DataFrame(), empty, empty, empty, [])
    accepted = candidates[candidates["status"] == "accepted"]
    scores = scores[scores["candidate_id"].isin(set(accepted["id"]))]
    if scores.empty:
        return FrontierView(pd.DataFrame(), empty, empty, empty, [])
    rows = pd.Categorical(scores["candidate_id"])
    examples = sorted(scores["example"].unique(), key=natural_key)
    cols = pd.Categorical(scores["example"], categories=examples)
    grid = np.full((len(rows.categories), len(examples)), -np.inf)
    np.maximum.at(grid, (rows.codes, cols.codes), scores["score"].to_numpy(dtype="float64"))
    grid[np.isneginf(grid)] = np.nan
    matrix = pd.DataFrame(grid, index=pd.Index(rows.categories, name="candidate_id"),
                          columns=pd.Index(examples, name="example"))
    vetoed = set(accepted.loc[accepted["vetoed"].astype(bool), "id"])
    eligible = np.array([c not in vetoed for c in matrix.index])
    best_on = pd.Series(0, index=matrix.index, dtype="int64")
    if not eligible.any():
        return FrontierView(matrix, pd.Series(np.nan, index=matrix.columns), best_on, best_on.copy(), [])
    sub = grid[eligible]
    with np.errstate(invalid="ignore"):
        best = np.nanmax(np.where(np.isnan(sub), -np.inf, sub), axis=0)
        best[np.isneginf(best)] = np.nan
        holds = np.zeros(grid.shape, dtype=bool)
        holds[eligible] = sub >= best - TOL  # NaN (not evaluated) holds nothing
        lowest = np.nanmin(np.where(np.isnan(sub), np.inf, sub), axis=0)
    n_holders = holds.sum(axis=0)
    best_on[:] = holds.sum(axis=1)
    unique = pd.Series((holds & (n_holders == 1)).sum(axis=1), index=matrix.index, dtype="int64")
    members = best_on[best_on > 0].sort_values(ascending=False, kind="stable")
    best_s = pd.Series(best, index=matrix.columns, dtype="float64")
    return FrontierView(matrix, best_s, best_on, unique, list(members.index),
                        contested=pd.Series(lowest < best - TOL, index=matrix.columns),
                        holders=pd.Series(n_holders, index=matrix.columns, dtype="int64"))


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


def budgets(run: dict) -> list[BudgetState]:
    """Every configured budget with how much of it is used, the binding one (largest share) first."""
    b = (run.get("config") or {}).get("budget") or {}
    out = []
    if b.get("max_metric_calls"):
        out.append(BudgetState("metric calls", run.get("metric_calls") or 0, b["max_metric_calls"]))
    if b.get("max_cost_usd"):
        out.append(BudgetState("dollars", run.get("cost_usd") or 0.0, b["max_cost_usd"]))
    if b.get("max_seconds"):
        out.append(BudgetState("seconds", running_seconds(run, search_only=True), b["max_seconds"]))
    if b.get("max_steps"):
        out.append(BudgetState("steps", run.get("steps_done") or 0, b["max_steps"]))
    if b.get("stop_at_score") not in (None, 0) and run.get("best_val_mean") is not None:
        out.append(BudgetState("score", max(0.0, run["best_val_mean"]), b["stop_at_score"]))
    return sorted(out, key=lambda s: -s.fraction)


def score_progress(run: dict, candidates: pd.DataFrame, steps: pd.DataFrame, n_val: int | None = None) -> pd.DataFrame:
    """Best and mean validation score of the candidates that can be "best" (accepted, not vetoed,
    validated on all ``n_val`` examples — the engine's rule for the run's best), after the seed,
    after each step, and now, against cumulative metric calls, dollars and seconds since the
    start. Candidates made between steps (a human edit applied at a step boundary, the step in
    flight) count from the next point on, so the last point is the run's best: the KPI's number.
    Columns: when (label), step, metric_calls, cost_usd, seconds, best, mean."""
    cols = ["when", "step", "metric_calls", "cost_usd", "seconds", "best", "mean"]
    if candidates.empty:
        return pd.DataFrame(columns=cols)
    ok = (candidates["status"] == "accepted") & ~candidates["vetoed"].astype(bool) & candidates["val_mean"].notna()
    if n_val:
        ok &= candidates["val_count"] >= n_val
    scored = candidates[ok]
    if scored.empty:
        return pd.DataFrame(columns=cols)
    at_step = scored["step"].where(scored["origin"] != "seed", -1).to_numpy()
    calls_in_steps = float(steps["metric_calls"].sum()) if not steps.empty else 0.0
    seed_calls = max(0.0, (run.get("metric_calls") or 0) - calls_in_steps)  # the seed's pass, human validations
    start = run.get("started_at")
    seed_done = scored.loc[at_step == -1, "finished_at"].max() if (at_step == -1).any() else None
    points = [("seed", -1, seed_calls, 0.0, _secs(seed_done, start))]
    calls = cost = 0.0
    for st_ in (steps.itertuples(index=False) if not steps.empty else []):
        if pd.isna(st_.ended_at):
            continue  # the step in flight: its candidates show in the "now" point
        calls, cost = calls + float(st_.metric_calls or 0), cost + float(st_.cost_usd or 0.0)
        points.append((f"after step {st_.index}", int(st_.index), seed_calls + calls, cost, _secs(st_.ended_at, start)))
    finished = run.get("status") in ("completed", "failed", "stopped")
    points.append(("at the end" if finished else "now", None, float(run.get("metric_calls") or 0),
                   float(run.get("cost_usd") or 0.0), _secs(run.get("finished_at") or datetime.now(timezone.utc), start)))
    # best and mean of the candidates made up to each point: cumulative over the candidates sorted
    # by step (a mask per point was steps × candidates: 25 M at 2,500 steps × 10,000 candidates)
    order = np.argsort(at_step, kind="stable")
    steps_sorted, vals = at_step[order], scored["val_mean"].to_numpy(dtype="float64")[order]
    top, total = np.maximum.accumulate(vals), np.cumsum(vals)
    rows = []
    for when, step, x_calls, x_cost, x_secs in points:
        n = len(vals) if step is None else int(np.searchsorted(steps_sorted, step, side="right"))
        if n:
            rows.append((when, step, x_calls, x_cost, x_secs, float(top[n - 1]), float(total[n - 1] / n)))
    out = pd.DataFrame(rows, columns=cols)
    if len(out) >= 2 and out.iloc[-1, 5:].equals(out.iloc[-2, 5:]) and out.iloc[-1, 2] == out.iloc[-2, 2]:
        out = out.iloc[:-1]  # "now" adds nothing to the last step's point
    return out.reset_index(drop=True)


def worker_state(beat: Optional[dict], stale_after_s: float) -> str:
    """What the latest heartbeat (``queries.worker_status``) says: ``none`` (no worker ever ran),
    ``stopped`` (it exited cleanly), ``silent`` (no heartbeat for ``stale_after_s``: it died or
    hangs) or ``alive``."""
    if beat is None:
        return "none"
    if beat.get("stopped_at"):
        return "stopped"
    return "silent" if beat["age_s"] > stale_after_s else "alive"


def waiting_reasons(runs: pd.DataFrame, beat: Optional[dict], stale_after_s: float) -> dict[str, str]:
    """Why each queued run has not started: its place in the queue (workers take the oldest
    first) and what the engine worker is doing. ``runs``: the runs table; ``beat``: the latest
    worker heartbeat (``queries.worker_status``)."""
    queued = runs[runs["status"] == "queued"].sort_values("created_at")
    if queued.empty:
        return {}
    state = worker_state(beat, stale_after_s)
    if state == "none":
        why = "no engine worker has run on this database: start the studio with `make run` or `python -m engine worker`"
    elif state == "stopped":
        why = "the engine worker stopped: start one with `make run` or `python -m engine worker`"
    elif state == "silent":
        why = "the engine worker is silent (no heartbeat): `make run` restarts it"
    else:
        why = _worker_load(beat)
    return {rid: f"waiting for a worker, {i + 1} in the queue: {why}" for i, rid in enumerate(queued["id"])}


def _worker_load(beat: dict) -> str:
    """What a live worker's heartbeat says about a queued run's wait."""
    runs = beat.get("run_ids") or ([beat["current_run_id"]] if beat.get("current_run_id") else [])
    limit = beat.get("max_runs") or 1
    if len(runs) >= limit:
        return (f"the engine worker is busy with run{'s' if len(runs) > 1 else ''} {', '.join(runs)} "
                f"({limit} at a time; REFRACT_WORKER_RUNS sets how many)")
    return f"the engine worker picks it up within seconds (it runs {len(runs)} of {limit} at a time)"


def ranked(candidates: pd.DataFrame, n_val: int) -> pd.DataFrame:
    """The candidates in the order the dashboard ranks them: the fully validated ones (validated
    on all ``n_val`` examples: the only ones that can be the run's best) by mean, best first;
    then the partly validated ones (a pass cut short), whose mean over a few examples is no rank;
    then the rest by step. Adds ``full_mean`` (the mean of a fully validated candidate, else NaN)
    and ``validated`` ("8 of 24 · mean 1.000" for a partial pass)."""
    full = candidates["val_mean"].notna() & (candidates["val_count"] >= max(1, n_val))
    partial = candidates["val_mean"].notna() & ~full
    out = candidates.assign(full_mean=candidates["val_mean"].where(full), _tier=(~full).astype(int) + (~(full | partial)).astype(int))
    out["validated"] = [
        ("" if pd.isna(m) else f"{int(c)} of {n_val}" + ("" if f else f" · mean {m:.3f}"))
        for m, c, f in zip(out["val_mean"], out["val_count"], full)]
    out = out.sort_values(["_tier", "full_mean", "val_count", "step"], ascending=[True, False, False, True],
                          na_position="last", kind="stable")
    return out.drop(columns="_tier")


def minibatch_means(candidates: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(candidate's, parent's) mean score per minibatch example: the engine records minibatch
    totals, the studio shows means, the scale of validation scores."""
    size = candidates["minibatch_keys"].map(lambda k: len(k) if isinstance(k, list) and k else float("nan"))
    return (candidates["minibatch_score"] / size).astype("float64"), \
        (candidates["parent_minibatch_score"] / size).astype("float64")


def minibatch_mean_delta(candidates: pd.DataFrame) -> pd.Series:
    child, parent = minibatch_means(candidates)
    return child - parent


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
    since the run started. The engine records an event's times in seconds from its step's start
    (``engine.evaluation.Timeline``): each step's own start is added, so steps follow each other
    on one axis instead of all starting at 0. Epoch seconds and ISO times are read as they are."""
    cols = ["step", "kind", "candidate_id", "start", "end"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    t0 = _epoch(run_start)
    rows = []
    for st_ in steps.tail(last_steps).itertuples(index=False):
        step_start = _epoch(getattr(st_, "started_at", None))
        base = step_start - t0 if step_start is not None and t0 is not None else 0.0
        for ev in st_.events or []:
            s, e = _ev_time(ev.get("start"), t0, base), _ev_time(ev.get("end"), t0, base)
            if s is None or e is None:
                continue
            rows.append(dict(step=st_.index, kind=str(ev.get("kind", "?")), candidate_id=str(ev.get("candidate_id") or ""),
                             start=s, end=max(e, s)))
    return pd.DataFrame(rows, columns=cols)


def _epoch(v) -> Optional[float]:
    """A time (datetime, pandas Timestamp or ISO text; naive ones are UTC) as epoch seconds."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    if isinstance(v, str):
        try:
            v = datetime.fromisoformat(v)
        except ValueError:
            return None
    return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).timestamp()


def _ev_time(v, t0: Optional[float], base: float) -> Optional[float]:
    """An event time as seconds since the run started: an offset from its step's start (``base``
    seconds after the run's), or an absolute time."""
    if v is None:
        return None
    if isinstance(v, (str, datetime)):
        v = _epoch(v)
        return v - t0 if v is not None and t0 is not None else None
    v = float(v)
    if v > 1e9:  # epoch seconds
        return v - t0 if t0 is not None else None
    return base + v


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
    from engine.search.frontier_types import typed_frontier

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
    held = {c: {"examples": 0, "objectives": 0, "pairs": 0} for c in eligible}
    for (example, objective), holders in front.holders.items():
        kind = "pairs" if example is not None and objective is not None else "examples" if objective is None else "objectives"
        for c in holders:
            held[c][kind] += 1
    return FrontierView(view.matrix, view.best, best_on, view.unique_best_on, list(members.index),
                        contested=view.contested, held=held, holders=view.holders)
