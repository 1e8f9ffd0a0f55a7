"""Benchmark: batching without quality loss (issue 6) → docs/benchmarks-batching.md (+ plot).

Every configuration spends the same metric-call budget on the same synthetic incremental task
(``bench/incremental_task.py``) with the same simulated reflection LM (1 s per call, through
litellm's ``scripted`` provider) and the same evaluator (a 50 ms sleep, in W = 4 sandboxed
workers for Refract, in GEPA's 4 evaluation threads for GEPA). Each row is run with 3 seeds (the
seed changes the task, the LM's randomness and the search's). Reported per configuration: mean
and spread (min–max) of wall-clock per metric call, best validation score, held-out test score
of the best candidate, budget overshoot, worker utilisation, and the runtime model's predicted
wall-clock next to the measured one.

    .venv/bin/python -m bench.batching                # everything (≈ 15 min), writes the docs
    .venv/bin/python -m bench.batching --only "4×1 all" --seeds 1 --no-write   # one row, quick look
    .venv/bin/python -m bench.batching --lm-spread 0.5 --seeds 12   # LM latencies that vary (≈ 12 min)
                                     # → docs/benchmarks-batching-spread.md

The plot needs matplotlib (``requirements-bench.txt``, which ``make bench`` installs); without it the
page is written without the plot, and says so (the stale plot is removed). GEPA 0.1.4 comes with ``requirements-dev.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Optional

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.lm.client import LMClient, warm_up  # noqa: E402  (first: offline price map)

from bench import incremental_task as task  # noqa: E402
from bench.batching_configs import (BUDGET, CONFIGS, DOLLAR_CONFIGS, KEYWORD_CONFIGS, MINIBATCH,  # noqa: E402
                                    MOONSHOT_CONFIGS, OVERLAP_CONFIGS, SHAPES, W, Config)
from bench.time_to_quality import (GepaRecorder, add_predictions, add_time_to_quality, prediction_table,  # noqa: E402
                                   refract_trajectory, ttq_table)
from engine.config import ConfigWarning, parse_config  # noqa: E402
from engine.optimizer import Optimizer  # noqa: E402
from engine.runs import submit_run  # noqa: E402
from engine.runtime.model import (Latencies, latencies_from, merge_test_share, predict_run_seconds,  # noqa: E402
                                  shape_of)
from engine.sandbox import make_executor  # noqa: E402
from tests.support.scripted_lm import install_script  # noqa: E402
from storage import leases, repo  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.models import utcnow  # noqa: E402

# latencies of the simulated LM and evaluator; overridable only to explore quality quickly
LM_SECONDS = float(os.environ.get("BENCH_LM_SECONDS", 1.0))
EVAL_SECONDS = float(os.environ.get("BENCH_EVAL_SECONDS", 0.05))
LM_SPREAD = [0.0]  # --lm-spread: the sigma of the log of an LM call's latency (0: every call takes LM_SECONDS)
DOC = ROOT / "docs" / "benchmarks-batching.md"
PLOT = ROOT / "docs" / "benchmarks-batching.png"
RAW = ROOT / "docs" / "benchmarks-batching.json"
SPREAD_DOC = ROOT / "docs" / "benchmarks-batching-spread.md"
SPREAD_RAW = ROOT / "docs" / "benchmarks-batching-spread.json"
# what --lm-spread runs unless --only says otherwise: the shapes that matter for time to quality
SPREAD_CONFIGS = ("1×1", "4×1 all", "4×1 merge", "async C=4", "async C=4 merge")


# -- one Refract run ------------------------------------------------------------------------------

def run_refract(cfg: Config, seed: int, workdir: Path) -> dict:
    task.set_layout(cfg.task)
    t = task.make_task(seed)
    task.set_seed(seed)
    data = {
        "name": f"bench {cfg.name} seed {seed}",
        "objective": "Answer every customer request the way the support policy requires.",
        "artifact_kind": "a support-assistant system prompt made of rule lines",
        "seed_candidate": t["seed"], "evaluator": task.evaluator_source(EVAL_SECONDS),
        "dataset": t["train"], "valset": t["val"],
        "search": {"minibatch_size": MINIBATCH, "seed": seed, "max_score": 1.0, **cfg.search},
        "budget": {"max_metric_calls": BUDGET, **cfg.budget},
        "reflection_lm": {"model": "scripted/bench", "num_retries": 0, "max_concurrency": 16},
        "executor": {"workers": cfg.workers},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        run_cfg = parse_config(data)
    db = Database(f"sqlite:///{workdir / 'refract.db'}")
    db.create_all()
    install_lm(cfg.price)
    run_id = submit_run(db, run_cfg)
    executors = []

    def factory(*args, **kwargs):
        ex = make_executor(*args, **kwargs)
        ex.wait_ready()  # the pool's cold start is not part of the search's wall-clock
        executors.append(ex)
        return ex

    opt = Optimizer(db, run_id, lm=LMClient(workdir / "lm-cache"), executor_factory=factory)
    box: dict = {}
    original = opt._seed

    def timed_seed(ctx):  # the clock starts when the workers are ready and the seed is evaluated
        box["t0"], box["busy0"], box["utc0"] = time.monotonic(), ctx.evals.executor.busy_seconds(), utcnow()
        return original(ctx)

    opt._seed = timed_seed
    assert leases.claim_run(db, "bench", 3600, run_id=run_id) == run_id  # queued -> running, as a worker claims it
    status = opt.run()
    wall = time.monotonic() - box["t0"]
    busy = executors[0].busy_seconds() - box["busy0"]
    run = repo.get_run(db, run_id)
    best = repo.get_candidate(db, run.best_candidate_id)
    lat = measured_latencies(db, run_id, run, len(t["val"]), cfg.workers)
    predicted = predict_run_seconds(shape_of(run_cfg.search), lat, BUDGET)[0] if lat else None
    cap_usd = cfg.budget.get("max_cost_usd")
    out = {"config": cfg.name, "seed": seed, "status": status, "reason": run.status_reason, "wall": wall,
           "metric_calls": run.metric_calls, "per_call": wall / max(run.metric_calls, 1), "best_val": run.best_val_mean,
           "test": task.score(best.content["text"], t["test"]), "overshoot": run.budget_overshoot / BUDGET,
           "cost": run.cost_usd, "cost_overshoot": max(0.0, run.cost_usd - cap_usd) / cap_usd if cap_usd else None,
           "utilisation": busy / (cfg.workers * wall), "predicted": predicted, "steps": run.steps_done,
           "proposals": run.proposals_total, "improved": run.proposals_improved,
           "latencies": lat.__dict__ if lat else None, "merges": merge_counts(db, run_id), "task": cfg.task,
           "workers": cfg.workers, "trajectory": refract_trajectory(db, run_id, box["utc0"])}
    db.dispose()
    return out


def install_lm(price: float = 0.0) -> None:
    """The simulated LM, answering after LM_SECONDS, or after a draw around it with --lm-spread."""
    spread = LM_SPREAD[0]
    if not spread:
        install_script(task.simulated_lm, latency=LM_SECONDS, price_per_token=price)
        return

    def varying(messages: list[dict], params: dict) -> str:
        time.sleep(task.latency_seconds(messages, params, LM_SECONDS, spread))
        return task.simulated_lm(messages, params)

    install_script(varying, price_per_token=price)


def measured_latencies(db: Database, run_id: str, run, n_val: int, workers: int = W) -> Optional[Latencies]:
    """The runtime model's inputs, as measured in the run."""
    lm = [c.seconds for c in repo.lm_calls_for(db, run_id) if not c.cached and not c.error]
    ev = [e.seconds for e in repo.evaluations_for(db, run_id) if not e.cached]
    merges = [c for c in repo.list_candidates(db, run_id) if c.origin == "sibling_merge"]
    if not lm or not ev:
        return None
    # accepted after the validation pass: nearly every merge passes its minibatch test, fewer keep their gain
    merge_pass = (sum(1 for m in merges if m.status == "accepted") / len(merges)) if merges else 0.8
    merge_lm = (sum(1 for m in merges if m.merge_path == "lm") / len(merges)) if merges else 1.0
    cfg = json.loads(json.dumps(run.config))["search"]
    m = cfg["minibatch_size"]
    return latencies_from(lm, ev, run.proposals_improved / max(run.proposals_total, 1), m, n_val, workers,
                          merge_pass=merge_pass, merge_lm=merge_lm, merge_test=merge_test_share(merges, m),
                          retry=run.proposals_retried / max(run.proposals_total, 1),
                          parent_eval_share=parent_eval_share(db, run_id, m))


def parent_eval_share(db: Database, run_id: str, m: int) -> float:
    """``Latencies.parent_eval_share`` measured from the steps' timelines: the metric calls spent on
    the parents' minibatches over a whole minibatch per parent slot (less when some of a parent's
    results were already known)."""
    spent = slots = 0
    for step in repo.list_steps(db, run_id):
        parents = set(step.parent_ids)
        spent += sum(1 for e in step.events if e.get("kind") == "minibatch" and e.get("candidate_id") in parents)
        slots += len(step.parent_ids)
    return min(1.0, spent / (slots * m)) if slots else 1.0


def merge_counts(db: Database, run_id: str) -> dict:
    """Merges of either kind: tried, accepted, and by the path that wrote them."""
    merges = [c for c in repo.list_candidates(db, run_id) if c.origin in ("sibling_merge", "merge")]
    return {"tried": len(merges), "accepted": sum(1 for m in merges if m.status == "accepted"),
            "three_way": sum(1 for m in merges if m.merge_path == "three_way"),
            "lm": sum(1 for m in merges if m.merge_path == "lm")}


# -- one GEPA run -------------------------------------------------------------------------------

def run_gepa(cfg: Config, seed: int, workdir: Path) -> dict:
    from gepa.optimize_anything import EngineConfig, GEPAConfig, ReflectionConfig, optimize_anything
    from gepa.strategies.proposal_sampling import PxNSampling

    task.set_layout(cfg.task)
    t = task.make_task(seed)
    task.set_seed(seed)
    install_lm()
    recorder = GepaRecorder({ex["id"] for ex in t["val"]})
    namespace: dict = {}
    exec(task.evaluator_source(EVAL_SECONDS), namespace)
    evaluate = namespace["evaluate"]
    busy = [0.0]
    lock = threading.Lock()
    calls = [0]

    def timed(candidate, example):
        t0 = time.monotonic()
        try:
            out = evaluate(candidate, example)
            recorder.record(candidate, example, out[0])
            return out
        finally:
            with lock:
                busy[0] += time.monotonic() - t0
                calls[0] += 1

    p, n = cfg.gepa
    engine = EngineConfig(max_metric_calls=BUDGET, seed=seed, parallel=True, max_workers=cfg.workers,
                          run_dir=str(workdir / "gepa"),
                          sampling_strategy=None if (p, n) == (1, 1) else PxNSampling(p, n), display_progress_bar=False)
    gcfg = GEPAConfig(engine=engine, reflection=ReflectionConfig(reflection_lm="scripted/bench",
                                                                  reflection_minibatch_size=MINIBATCH))
    t0 = recorder.t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # GEPA logs every iteration to stdout
        result = optimize_anything(seed_candidate=t["seed"], evaluator=timed, dataset=t["train"], valset=t["val"],
                                   objective="Answer every customer request the way the support policy requires.",
                                   config=gcfg)
    wall = time.monotonic() - t0
    best = result.best_candidate if isinstance(result.best_candidate, str) else next(iter(result.best_candidate.values()))
    n_calls = calls[0]
    return {"config": cfg.name, "seed": seed, "status": "completed", "reason": "", "wall": wall,
            "metric_calls": n_calls, "per_call": wall / max(n_calls, 1), "best_val": task.score(best, t["val"]),
            "test": task.score(best, t["test"]), "overshoot": max(0, n_calls - BUDGET) / BUDGET, "cost": 0.0,
            "cost_overshoot": None, "utilisation": busy[0] / (cfg.workers * wall), "predicted": None,
            "steps": None, "proposals": None, "improved": None, "latencies": None, "merges": None, "task": cfg.task,
            "trajectory": recorder.points}


# -- the report ---------------------------------------------------------------------------------

def _agg(rows: list[dict], key: str, fmt: str = "{:.3f}", scale: float = 1.0) -> str:
    vals = [r[key] * scale for r in rows if r.get(key) is not None]
    if not vals:
        return "—"
    mean = statistics.mean(vals)
    if len(vals) == 1:
        return fmt.format(mean)
    return f"{fmt.format(mean)} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def summarize(results: list[dict]) -> dict[str, dict]:
    out = {}
    for name in dict.fromkeys(r["config"] for r in results):
        rows = [r for r in results if r["config"] == name]
        pred = [r["predicted"] / r["wall"] - 1 for r in rows if r.get("predicted")]
        out[name] = {
            "rows": rows,
            "per_call_ms": statistics.mean(r["per_call"] for r in rows) * 1000,
            "best_val": statistics.mean(r["best_val"] or 0 for r in rows),
            "min_val": min(r["best_val"] or 0 for r in rows),
            "wall": statistics.mean(r["wall"] for r in rows),
            "utilisation": statistics.mean(r["utilisation"] for r in rows),
            "max_overshoot": max(r["overshoot"] for r in rows),
            "pred_err": max((abs(e) for e in pred), default=None),
        }
    return out


def table(results: list[dict]) -> list[str]:
    s = summarize(results)
    base = s["1×1"]["per_call_ms"] if "1×1" in s else None
    lines = ["| configuration | wall-clock per metric call (ms) | speed-up per call vs 1×1 | best val | test | "
             "metric calls | overshoot | workers busy | wall-clock (s) | predicted (s) | predicted − measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, agg in s.items():
        rows = agg["rows"]
        speed = f"{base / agg['per_call_ms']:.2f}×" if base else "—"
        errs = [r["predicted"] / r["wall"] - 1 for r in rows if r.get("predicted")]
        err = (f"{statistics.mean(errs) * 100:+.0f} % ({min(errs) * 100:+.0f}…{max(errs) * 100:+.0f})" if errs else "—")
        lines.append(
            f"| {name} | {_agg(rows, 'per_call', '{:.0f}', 1000)} | {speed} | {_agg(rows, 'best_val')} | {_agg(rows, 'test')} | "
            f"{_agg(rows, 'metric_calls', '{:.0f}')} | {_agg(rows, 'overshoot', '{:.1f}', 100)} % | "
            f"{_agg(rows, 'utilisation', '{:.0f}', 100)} % | {_agg(rows, 'wall', '{:.1f}')} | {_agg(rows, 'predicted', '{:.1f}')} | {err} |")
    return lines


def dollar_table(results: list[dict]) -> list[str]:
    lines = ["| configuration | seed | cost cap ($) | spent ($) | overshoot | metric calls | status |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['config']} | {r['seed']} | 0.25 | {r['cost']:.4f} | {r['cost_overshoot'] * 100:.1f} % | "
                     f"{r['metric_calls']} | {r['reason']} |")
    return lines


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    s = summarize(results)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    colors = plt.get_cmap("tab20").colors
    for i, (name, agg) in enumerate(s.items()):
        xs = [r["per_call"] * 1000 for r in agg["rows"]]
        ys = [r["best_val"] or 0 for r in agg["rows"]]
        marker = "s" if name.startswith("GEPA") else ("D" if name.startswith("async") else "o")
        color = colors[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20]
        ax.scatter(xs, ys, marker=marker, alpha=0.35, color=color)
        ax.scatter([statistics.mean(xs)], [statistics.mean(ys)], marker=marker, s=90, color=color, edgecolor="black",
                   label=name)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks([20, 30, 40, 50, 60, 80])
    ax.set_xlabel("wall-clock per metric call (ms, log scale) — left is faster")
    ax.set_ylabel(f"best validation score at {BUDGET} metric calls — up is better")
    ax.set_title(f"Batching vs quality (W={W}, {LM_SECONDS:g} s LM, {EVAL_SECONDS * 1000:.0f} ms evaluator; "
                 "small = one seed, large = mean of 3)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", action="append", help="run only these configurations (repeatable)")
    ap.add_argument("--no-write", action="store_true", help="print the table, do not write docs/")
    ap.add_argument("--no-dollars", action="store_true")
    ap.add_argument("--no-overlap", action="store_true", help="skip the overlapping task")
    ap.add_argument("--report-only", action="store_true", help="rebuild the docs from the saved raw results")
    ap.add_argument("--raw", help="with --report-only: the raw results file (default: docs/benchmarks-batching.json)")
    ap.add_argument("--lm-spread", type=float, default=0.0, metavar="SIGMA",
                    help="LM latencies drawn log-normally around the mean, SIGMA the sigma of their log (0.5: "
                         "a coefficient of variation of about 0.53)")
    args = ap.parse_args(argv)
    LM_SPREAD[0] = args.lm_spread
    import logging

    logging.basicConfig(level=logging.ERROR)
    if args.report_only:
        raw = json.loads((Path(args.raw) if args.raw else SPREAD_RAW if LM_SPREAD[0] else RAW).read_text())
        results, dollars = raw["results"], raw.get("dollars", [])
    else:
        only = args.only or (SPREAD_CONFIGS if LM_SPREAD[0] else None)
        extra = [] if args.no_overlap or LM_SPREAD[0] else OVERLAP_CONFIGS + KEYWORD_CONFIGS + MOONSHOT_CONFIGS
        configs = [c for c in CONFIGS + extra if not only or c.name in only]
        warm_up()  # litellm's first-completion loading is not charged to the first run (1×1, seed 0)
        results, dollars = [], []
        for seed in range(args.seeds):
            for cfg in configs:
                results.append(_run(cfg, seed))
        if not args.no_dollars and not only:
            for seed in range(args.seeds):
                for cfg in DOLLAR_CONFIGS:
                    dollars.append(_run(cfg, seed))
    add_time_to_quality(results)
    add_predictions(results, SHAPES, BUDGET)
    main_rows = [r for r in results if r.get("task", "lines") == "lines"]
    print("\n".join(table(main_rows)))
    for t in dict.fromkeys(r.get("task", "lines") for r in results):
        print(f"\ntime to quality, task {t}:\n" + "\n".join(ttq_table(results, t)))
        print(f"\npredicted vs measured time to quality, task {t}:\n" + "\n".join(prediction_table(results, t)))
    if dollars:
        print("\n".join(dollar_table(dollars)))
    if not args.no_write and LM_SPREAD[0]:  # its own page: the main one stays the fixed-latency task's
        from bench.batching_spread import write_spread_doc

        SPREAD_RAW.write_text(json.dumps({"results": results, "lm_spread": LM_SPREAD[0]}, indent=1))
        write_spread_doc(SPREAD_DOC, results, LM_SPREAD[0], LM_SECONDS, table(main_rows))
    elif not args.no_write:
        RAW.write_text(json.dumps({"results": results, "dollars": dollars}, indent=1))
        from bench.batching_analysis import analysis
        from bench.batching_report import SETUP, write_doc

        try:
            plot(main_rows)
        except ImportError:
            PLOT.unlink(missing_ok=True)  # a plot of other numbers would mislead
        keyword_rows = [r for r in results if r.get("task") == "keywords"]
        write_doc(DOC, table(main_rows), dollar_table(dollars), summarize(main_rows), results, dollars, SETUP,
                  analysis(results), SHAPES, table(keyword_rows) if keyword_rows else [])
    return 0


def _run(cfg: Config, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="refract-bench-") as d:
        t0, load = time.monotonic(), os.getloadavg()[0]
        r = run_gepa(cfg, seed, Path(d)) if cfg.gepa else run_refract(cfg, seed, Path(d))
        r["load"] = load
        print(f"{cfg.name:18} seed {seed}: {r['wall']:6.1f} s  {r['metric_calls']:4d} calls  best val "
              f"{(r['best_val'] or 0):.3f}  test {r['test']:.3f}  busy {r['utilisation']:.0%}  "
              f"pred {r['predicted'] or 0:6.1f} s  [{time.monotonic() - t0:.0f} s]  {cfg.task}  {r['reason'][:60]}",
              flush=True)
        return r


if __name__ == "__main__":
    raise SystemExit(main())
