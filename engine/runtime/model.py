"""The runtime model: predicted wall-clock of a run, for any batch shape and schedule.

docs/design.md §5 gives the speed-up of a k-proposal step over k sequential steps,
``T(1)/T(k) ≈ k·(L_step + a·L_val) / (L_step + q_k·L_val)``. This module refines it into a
prediction of *seconds* from what can be measured in a run — the reflection LM latency ``L``,
the latency ``T`` of one metric call on a worker, the fraction ``a`` of proposals that pass
their minibatch test, the minibatch size ``m``, the validation size ``V`` and the ``W`` workers
— so that the prediction can be checked against the measured wall-clock.

Synchronous step (P parents × K proposals, k = P·K), as ``engine.schedules.synchronous`` runs it:
  parents' minibatches  ceil(P·m/W)·T        (all parents at once)
  reflections           L + (1 − (1 − r)^k)·L  (all k at once: the slowest of k when latencies vary; one
                                                more call when some slot's answer is unusable and asked
                                                again, r the share of proposals retried)
  children's minibatch  ceil(k·m/W)·T
  sibling merge         f·L + ceil(s·m·g/W)·T  (if enabled and s ≥ 2 children improved; f = the share of
                                                merges with a real conflict: the others are three-way, no LM
                                                call; g = the share of the siblings' examples it is tested on)
  validation passes     n_v · ceil(V/W)·T    (one child after the other, most promising first)
with n_v the children that pay a validation pass (all / best / top-k of the improving ones;
one merged child instead when the merge passes), averaged over n ~ Binomial(k, a).

Asynchronous schedule (C proposals in flight, no barrier): each proposal takes
``L·(1 + r) + E`` where ``E`` is its evaluation latency, stretched by queueing as the pool fills:
``E = E_0 / (1 − ρ)`` with utilisation ``ρ = X·c·T / W``, for throughput ``X = C / (L + E)``
proposals per second and ``c`` metric calls per proposal; solved for X. The pool caps X at
``W / (c·T)``.

A whole run adds what these averages miss — the budget's tail (trimmed steps, fewer
proposals in flight), proposals queueing behind each other's evaluations, merges — so its
wall-clock is predicted by replaying the schedule (``engine.runtime.sim``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional

from storage.states import CandidateStatus, MergePath, Origin

MERGE_PASS_RATE = 0.8  # fraction of sibling merges accepted after their validation pass, when not measured


@dataclass(frozen=True)
class Latencies:
    """What the prediction is made from (all measured in a run, or assumed)."""

    lm: float  # seconds per reflection (or merge) LM call: the mean
    eval: float  # seconds per metric call on a worker, dispatch included
    accept: float  # fraction of proposals that pass their minibatch test
    minibatch: int
    n_val: int
    workers: int
    parent_eval_share: float = 1.0  # fraction of a parent's minibatch that is not already known
    merge_pass: float = MERGE_PASS_RATE  # fraction of merges that kept every gain on their test and were
    # validated (the engine's accepted merges); the others are never validated
    merge_lm: float = 1.0  # fraction of sibling merges with a real conflict (an LM call); the rest are three-way, free
    # fraction of the merged siblings' minibatch examples a merge is tested on: a three-way merge
    # keeps their changed lines as they were and is tested only where they fixed something
    merge_test: float = 1.0
    # fraction of proposals whose first answer was unusable and asked again: one more LM call before
    # the child is tested, which a synchronous step waits for (the whole step, when any slot retries)
    retry: float = 0.0
    overhead: float = 0.0  # engine seconds per step (per proposal, asynchronously) the latencies above miss
    # improvements a step gains by keeping the best of n improving children (n = 1, 2, …; beyond the
    # last, the last): more than one when proposals' gains vary, as each step keeps its largest.
    # Empty: one, whatever n. Measured on 1×1 (bench/time_to_quality.py, ``best_of``).
    best_of: tuple[float, ...] = ()
    # how LM calls' latencies vary: the standard deviation of their logarithm (log-normal around
    # ``lm``; 0: every call takes ``lm``). A synchronous step waits for its slowest reflection, an
    # asynchronous proposal only for its own, so this is what the barrier costs.
    lm_spread: float = 0.0


@dataclass(frozen=True)
class Shape:
    parents: int = 1
    per_parent: int = 1
    accept: str = "all"  # all | best | top_k
    top_k: int = 2
    merge_siblings: bool = False
    schedule: str = "sync"  # sync | async

    @property
    def k(self) -> int:
        return self.parents * self.per_parent


def _waves(n: float, workers: int) -> int:
    return math.ceil(n / workers - 1e-9) if n > 0 else 0


def _binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n + 1)]


def lm_spread_of(seconds: list[float]) -> float:
    """``Latencies.lm_spread`` measured: the standard deviation of the calls' log latencies (0 for
    fewer than three calls: too few to tell)."""
    logs = [math.log(s) for s in seconds if s > 0]
    return statistics.stdev(logs) if len(logs) >= 3 else 0.0


def slowest_lm(lat: Latencies, k: int) -> float:
    """Expected latency of the slowest of ``k`` LM calls made at once (``lat.lm`` when they do not
    vary): the k-th order statistic of the log-normal, summed over its quantiles."""
    if lat.lm_spread <= 0 or k <= 1:
        return lat.lm
    n, sigma = 400, lat.lm_spread
    normal = statistics.NormalDist(-sigma * sigma / 2, sigma)
    draws = [lat.lm * math.exp(normal.inv_cdf((i + 0.5) / n)) for i in range(n)]
    return sum(x * (((i + 1) / n) ** k - (i / n) ** k) for i, x in enumerate(draws))


def sync_step(shape: Shape, lat: Latencies) -> tuple[float, float]:
    """(expected seconds, expected metric calls) of one synchronous step."""
    k, m, w, t, v = shape.k, lat.minibatch, lat.workers, lat.eval, lat.n_val
    parent_calls = shape.parents * m * lat.parent_eval_share
    retried = 1 - (1 - lat.retry) ** k  # the chance that some slot of the step asks again
    base_s = _waves(parent_calls, w) * t + slowest_lm(lat, k) + retried * lat.lm + _waves(k * m, w) * t
    base_c = parent_calls + k * m
    seconds = calls = 0.0
    limit = {"all": k, "best": 1, "top_k": shape.top_k}.get(shape.accept, k)
    for n, p in enumerate(_binomial(k, lat.accept)):
        chosen = min(n, limit)
        s, c = base_s + chosen * _waves(v, w) * t, base_c + chosen * v
        if shape.merge_siblings and n >= 2:
            sib = min(n, 4)
            tested = sib * m * lat.merge_test
            merge_s = lat.merge_lm * lat.lm + _waves(tested, w) * t
            ok_s, ok_c = base_s + merge_s + _waves(v, w) * t, base_c + tested + v
            bad_s, bad_c = s + merge_s, c + tested
            s = lat.merge_pass * ok_s + (1 - lat.merge_pass) * bad_s
            c = lat.merge_pass * ok_c + (1 - lat.merge_pass) * bad_c
        seconds += p * s
        calls += p * c
    return seconds, calls


def async_rate(c_in_flight: int, lat: Latencies) -> tuple[float, float]:
    """(proposals per second, metric calls per proposal) with ``c_in_flight`` proposals in flight."""
    m, w, t, v, a = lat.minibatch, lat.workers, lat.eval, lat.n_val, lat.accept
    calls = m * lat.parent_eval_share + m + a * v
    e0 = _waves(m * lat.parent_eval_share, w) * t + _waves(m, w) * t + a * _waves(v, w) * t
    cap = w / (calls * t) if calls * t > 0 else float("inf")
    lm = lat.lm * (1 + lat.retry)
    lo, hi = 0.0, min(cap, c_in_flight / max(lm + e0, 1e-9))
    for _ in range(60):  # bisection on X = C / (L + E0 / (1 - rho(X)))
        x = (lo + hi) / 2
        rho = min(x * calls * t / w, 0.999)
        if x * (lm + e0 / (1 - rho)) < c_in_flight:
            lo = x
        else:
            hi = x
    return lo, calls


def predict_run_seconds(shape: Shape, lat: Latencies, budget: int) -> tuple[float, int]:
    """(wall-clock, metric calls) of a run that spends ``budget`` metric calls, the seed's
    validation pass included: the schedule replayed by ``engine.runtime.sim``."""
    from engine.runtime.sim import simulate_async, simulate_sync

    if shape.schedule == "async" and shape.k > 1:
        return simulate_async(shape.k, shape.merge_siblings, lat, budget)
    return simulate_sync(shape.parents, shape.per_parent, shape.accept, shape.top_k, shape.merge_siblings, lat, budget)


def predict_time_to_quality(shape: Shape, lat: Latencies, budget: int, improvements: int) -> Optional[float]:
    """Seconds from the seed's validation until the best candidate has taken ``improvements``
    improvements (``improvements_to_quality``), the schedule replayed by ``engine.runtime.sim``
    within ``budget`` metric calls; None if the budget runs out first. Merges cost an LM call
    only in the proportion ``lat.merge_lm`` (real conflicts): three-way merges take no time."""
    from engine.runtime.sim import Gains, simulate_async, simulate_sync

    gains = Gains(improvements)
    if shape.schedule == "async" and shape.k > 1:
        simulate_async(shape.k, shape.merge_siblings, lat, budget, gains)
    else:
        simulate_sync(shape.parents, shape.per_parent, shape.accept, shape.top_k, shape.merge_siblings, lat, budget,
                      gains)
    return gains.reached_at


def improvements_to_quality(calls: int, lat: Latencies) -> int:
    """The improvements a 1×1 run took to reach a quality it reached after ``calls`` metric
    calls: the unit of ``predict_time_to_quality``, measured once per task on 1×1. A 1×1
    proposal spends a minibatch on its parent and one on its child, and the fraction ``accept``
    that improve a validation pass too: calls = V + G · (m·(1 + share)/a + V)."""
    per = lat.minibatch * (1 + lat.parent_eval_share) / max(lat.accept, 1e-9) + lat.n_val
    return max(1, round((calls - lat.n_val) / per))


def predict_speedup(shape: Shape, lat: Latencies, budget: Optional[int] = None) -> float:
    """How much faster this shape spends metric calls than 1×1 at the same latencies: the
    ratio of their simulated seconds per metric call over a run of ``budget`` calls."""
    budget = budget or 20 * (2 * lat.minibatch + lat.n_val)
    t1, c1 = predict_run_seconds(Shape(), lat, budget)
    tk, ck = predict_run_seconds(shape, lat, budget)
    return (t1 / c1) / (tk / ck) if tk > 0 and c1 > 0 else float(shape.k)


def predict_step_speedup(shape: Shape, lat: Latencies) -> float:
    """docs/design.md §5's T(1)·k / T(k): one k-proposal step against k sequential 1×1 steps."""
    t1, _ = sync_step(Shape(), lat)
    tk, _ = sync_step(shape, lat)
    return shape.k * t1 / tk if tk > 0 else float(shape.k)


def shape_of(search) -> Shape:
    """The Shape of a ``SearchConfig``."""
    return Shape(parents=search.parents_per_step, per_parent=search.proposals_per_parent, accept=search.accept,
                 top_k=search.top_k, merge_siblings=search.merge_siblings, schedule=search.schedule)


def merge_test_share(merges: list, m: int) -> float:
    """``Latencies.merge_test`` measured: the examples each merge was tested on, over its siblings'
    minibatches (1.0 when no merge was tested)."""
    tested = [len(c.minibatch_keys) / (len(c.parent_ids) * m) for c in merges if c.parent_ids and c.minibatch_keys]
    return statistics.mean(tested) if tested else 1.0


def latencies_from(lm: list[float], evals: list[float], accept: Optional[float], minibatch: int, n_val: int,
                   workers: int, **extra) -> Optional[Latencies]:
    """Latencies from measured samples, the LM calls' spread included (None when there is nothing
    to measure yet)."""
    if not lm or not evals:
        return None
    a = 0.5 if accept is None else accept
    return Latencies(lm=sum(lm) / len(lm), lm_spread=lm_spread_of(lm), eval=sum(evals) / len(evals), accept=a,
                     minibatch=minibatch, n_val=n_val, workers=workers, **extra)


def latencies_of_events(events: list[dict], accept: Optional[float], minibatch: int, n_val: int,
                        workers: int) -> Optional[Latencies]:
    """Latencies from a step's timeline events (``Step.events``): its LM calls and its evaluations."""
    lm = [e["end"] - e["start"] for e in events if e["kind"] == "lm"]
    evals = [e["end"] - e["start"] for e in events if e["kind"] != "lm"]
    return latencies_from(lm, evals, accept, minibatch, n_val, workers)


def run_prediction(db, run_id: str) -> Optional[dict]:
    """Predicted against measured wall-clock of a stored run, the prediction made from the
    run's own measurements: {"measured", "predicted", "speedup", "latencies"}, or None
    while nothing has been measured yet. (The measurement includes the workers' start-up.)"""
    from engine.config import RunConfig
    from storage import repo

    run = repo.get_run(db, run_id)
    cfg = RunConfig.model_validate(run.config)
    split = {ex.pk: ex.split for ex in repo.get_examples(db, run_id)}
    n_val = sum(1 for s in split.values() if s == "val") or sum(1 for s in split.values() if s == "train")
    lm = [c.seconds for c in repo.lm_calls_for(db, run_id)  # answered calls (an unusable answer took as long)
          if c.purpose in ("reflection", "merge") and not c.cached and (not c.error or c.error_kind == "no_fence")]
    evals = [e.seconds for e in repo.evaluations_for(db, run_id) if not e.cached and split.get(e.example_pk) != "test"]
    merges = [c for c in repo.list_candidates(db, run_id)  # decided ones: accepted after validation, or not
              if c.origin == Origin.SIBLING_MERGE and c.status != CandidateStatus.PROPOSED]
    m = min(cfg.search.minibatch_size, len(cfg.dataset or [None]))
    extra = {"merge_pass": sum(c.status == CandidateStatus.ACCEPTED for c in merges) / len(merges),
             "merge_lm": sum(c.merge_path == MergePath.LM for c in merges) / len(merges),
             "merge_test": merge_test_share(merges, m)} if merges else {}
    if run.proposals_total:
        extra["retry"] = run.proposals_retried / run.proposals_total
    lat = latencies_from(lm, evals, run.proposals_improved / run.proposals_total if run.proposals_total else None,
                         m, n_val, cfg.executor.workers, **extra)
    if lat is None:
        return None
    shape = shape_of(cfg.search)
    predicted, _ = predict_run_seconds(shape, lat, run.metric_calls)
    return {"measured": run.seconds, "predicted": predicted, "speedup": predict_speedup(shape, lat), "latencies": lat}
