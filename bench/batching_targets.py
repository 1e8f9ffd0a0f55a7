"""The targets of issue 35 on docs/benchmarks-batching.md, computed from the results of
``bench/batching.py`` (never asserted): on the incremental and the keywords task, the best 4-wide
shape reaches the 1×1 quality ≥ 2× sooner on every seed (moonshot: 3× with 8 workers), and the
default shape for P = 4 keeps ≥ 0.95× of the 1×1 best at equal budget. Ratios are taken seed by
seed, within one run of the benchmark. The runtime model's time to quality within 15 % of the
measured is computed here too; the targets measured by other benchmarks are named with their pages."""

from __future__ import annotations

import statistics
from typing import Optional

from bench.time_to_quality import TASK_NAMES

FOUR_WIDE = ["2×2 all", "4×1 all", "4×1 best", "4×1 top_k=2", "4×1 merge", "4×1 default", "async C=4",
             "async C=4 merge", "async C=4 rebase"]
TASKS = {t: TASK_NAMES[t] for t in ("lines", "keywords")}  # the tasks issue 35's ratios are taken on
DEFAULT = "4×1 default"  # only P set: engine.config_checks.default_shape


def _rows(results: list[dict], task: str, name: str) -> dict[int, dict]:
    return {r["seed"]: r for r in results if r["config"] == name and r.get("task", "lines") == task}


def seed_ratios(results: list[dict], task: str, name: str, base: str = "1×1") -> Optional[list[Optional[float]]]:
    """Per seed of ``base``: its time to quality over ``name``'s (None where either did not
    reach the quality); None when ``name`` has no rows for the task."""
    rows, ref = _rows(results, task, name), _rows(results, task, base)
    if not rows:
        return None
    return [ref[s]["ttq"] / rows[s]["ttq"] if s in rows and rows[s].get("ttq") and ref[s].get("ttq") else None
            for s in sorted(ref)]


def _fmt(ratios: list[Optional[float]]) -> str:
    return " / ".join("—" if x is None else f"{x:.2f}×" for x in ratios)


def _best(results: list[dict], task: str, names: list[str], base: str = "1×1"):
    """(name, its per-seed ratios) of the shape whose worst seed is best; every shape's ratios."""
    every = {n: r for n in names if (r := seed_ratios(results, task, n, base)) is not None}
    if not every:
        return None, None, {}
    worst = {n: min((x or 0.0) for x in r) for n, r in every.items()}
    name = max(worst, key=worst.get)
    return name, every[name], every


def sooner(results: list[dict], task: str, names: list[str], goal: float, label: str,
           other_base: Optional[str] = None) -> str:
    name, ratios, every = _best(results, task, names)
    if name is None:
        return f"- ({label}, {TASKS[task]} task: no rows)"
    met = all(x is not None and x >= goal for x in ratios)
    worst = min((x or 0.0) for x in ratios)
    line = (f"- **{label}, {TASKS[task]} task, ≥ {goal:g}× sooner than 1×1 on every seed: {'met' if met else 'missed'}.** "
            f"The best shape, {name}, reached 0.95 × the 1×1 run's final best {_fmt(ratios)} sooner than 1×1 "
            f"(seeds 0 / 1 / 2; — where it did not reach it)")
    if not met:
        line += f": its worst seed is {worst:.2f}×, {goal - worst:.2f}× short" if worst else ": not on every seed"
    line += ". Every shape: " + "; ".join(f"{n} {_fmt(r)}" for n, r in every.items())
    if other_base:
        at_equal = {n: seed_ratios(results, task, n, other_base) for n in every}
        line += f". Against {other_base} (the same workers): " + "; ".join(
            f"{n} {_fmt(r)}" for n, r in at_equal.items() if r is not None)
    return line + "."


def keeps_quality(results: list[dict], task: str) -> str:
    mine, ref = _rows(results, task, DEFAULT), _rows(results, task, "1×1")
    if not mine or not ref:
        return f"- ({DEFAULT}, {TASKS[task]} task: no rows)"
    a = statistics.mean(r["best_val"] or 0 for r in mine.values())
    b = statistics.mean(r["best_val"] or 0 for r in ref.values())
    per = " / ".join(f"{(mine[s]['best_val'] or 0):.3f} vs {(ref[s]['best_val'] or 0):.3f}" for s in sorted(mine) if s in ref)
    return (f"- **The default shape for P = 4 ({DEFAULT}: `merge_siblings = true`, `accept = \"best\"`), "
            f"{TASKS[task]} task, ≥ 0.95× the 1×1 best at equal budget: {'met' if a >= 0.95 * b else 'missed'}.** "
            f"Mean best validation score {a:.3f} against {b:.3f}: {a / b:.2f}× (per seed {per}).")


def gepa_beside(results: list[dict], task: str) -> str:
    names = [n for n in ("GEPA 1×1", "GEPA 4×1", "GEPA 8×1") if _rows(results, task, n)]
    if not names:
        return ""
    parts = []
    for n in names:
        rows = _rows(results, task, n)
        ratios = seed_ratios(results, task, n)
        parts.append(f"{n}: best val {statistics.mean(r['best_val'] or 0 for r in rows.values()):.3f}, "
                     f"the 1×1 quality {_fmt(ratios)} sooner than Refract's 1×1")
    return f"- GEPA 0.1.4 in the same run, {TASKS[task]} task: " + "; ".join(parts) + "."


def targets(results: list[dict]) -> list[str]:
    out = []
    for task in TASKS:
        out.append(sooner(results, task, FOUR_WIDE, 2.0, "Best 4-wide shape"))
        wide8 = [f"{n} W=8" for n in FOUR_WIDE]
        out.append(sooner(results, task, wide8, 3.0, "Moonshot, 8 workers", other_base="1×1 W=8"))
        out.append(keeps_quality(results, task))
        gepa = gepa_beside(results, task)
        if gepa:
            out.append(gepa)
    out += ["- **A 4-wide step's engine overhead ≤ 0.1 s and ≤ 3 % of the step**: measured apart, by "
            "`bench/engine_overhead.py`; figures and verdict on [engine overhead](benchmarks-engine.md).",
            "- **A cold `python -m engine run` starts its first reflection within 1 s of the seed's last evaluation**: "
            "measured apart, by `bench/cold_run.py`; figures and verdict on [cold run](benchmarks-cold-run.md).",
            "- **Retries sent as soon as an answer is known unusable, concurrently, and none for a parent whose "
            "minibatch a sibling already aced**: a behaviour, not a figure; each has a test that fails on the code "
            "before it (`tests/test_step_logic.py`: `test_a_retry_waits_for_no_other_slot_and_no_slot_waits_for_a_"
            "retry`, `test_no_retry_for_a_minibatch_a_sibling_has_already_aced`); see [design](design.md), step 3."]
    return out


def prediction_verdicts(results: list[dict]) -> list[str]:
    """The runtime model's time to quality within 15 % of the measured, per configuration (the
    mean over the seeds where both reached the quality): met or missed, by how much, which way."""
    errors = {}
    for r in results:
        if r.get("ttq") is not None and r.get("ttq_predicted") is not None:
            errors.setdefault((r.get("task", "lines"), r["config"]), []).append((r["ttq"], r["ttq_predicted"]))
    if not errors:
        return []
    means = {k: statistics.mean(p for _, p in v) / statistics.mean(m for m, _ in v) - 1 for k, v in errors.items()}
    within = [k for k, e in means.items() if abs(e) <= 0.15]
    worst = max(means, key=lambda k: abs(means[k]))
    label = lambda k: f"{TASK_NAMES[k[0]]} {k[1]} {means[k] * 100:+.0f} %" + (  # noqa: E731
        f" ({len(errors[k])} seed{'s' if len(errors[k]) > 1 else ''})" if len(errors[k]) < 3 else "")
    slow = [label(k) for k in means if means[k] > 0.15]
    fast = [label(k) for k in means if means[k] < -0.15]
    return [f"- **The runtime model predicts each configuration's time to quality within 15 %: "
            f"{'met' if len(within) == len(means) else 'missed'}.** {len(within)} of {len(means)} configurations "
            f"(every task, the mean over the seeds where both reached the quality; the tables above) are within 15 %; "
            f"the median error is {statistics.median(abs(e) for e in means.values()) * 100:.0f} %, the worst "
            f"{label(worst)}. Too slow by more than 15 %: {', '.join(slow) or 'none'}. Too fast by more than 15 %: "
            f"{', '.join(fast) or 'none'}. Why, as far as known (the analysis below, *Predicted vs measured*): a "
            "seed's time is a handful of uneven jumps, so a mean over one to three seeds moves by a step when one "
            "child is lucky" + _async_merge_bias(means) + "."]


def _async_merge_bias(means: dict) -> str:
    """Which way the model errs on the asynchronous merge shapes, when it errs one way on all of them."""
    errs = [e for (_, c), e in means.items() if c.startswith("async") and "merge" in c]
    if not errs or (min(errs) < 0 < max(errs)):
        return ""
    way = "slower" if min(errs) > 0 else "faster"
    # why it was slower, as found in the raw rows of 2026-12-07 (*Predicted vs measured*); the other way is unexplained
    why = (": its time per metric call matches the runs', the calls they needed do not (their first validations "
           "carried more improvements than it credits)") if way == "slower" else ", which none of the above explains"
    return (f"; and it puts every asynchronous merge configuration {way} than measured ({min(errs) * 100:+.0f} to "
            f"{max(errs) * 100:+.0f} %){why}")
