"""The page of bench/real_lm.py: per task and system, the held-out test gain over the seed with a
95 % bootstrap interval over the seeds, and what the runs did; then the targets."""

from __future__ import annotations

import random
import statistics
from datetime import date
from pathlib import Path

BOOTSTRAP = 10_000


def bootstrap_interval(values: list[float], rng: random.Random) -> tuple[float, float]:
    """The 95 % percentile interval of the mean, by resampling the seeds."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    return means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]


def summarize(rows: list[dict]) -> dict:
    """(task, system) -> figures over its seeds."""
    base = {r["task"]: r for r in rows if r.get("system") == "seed"}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("system") != "seed":
            groups.setdefault((r["task"], r["system"]), []).append(r)
    out = {}
    rng = random.Random(0)
    for (task, system), runs in sorted(groups.items()):
        gains = [r["test_best"] - base[task]["test"] for r in runs]
        proposals = sum(r["proposals"] for r in runs)
        out[(task, system)] = {
            "kind": runs[0]["kind"], "seeds": len(runs), "gain": statistics.fmean(gains),
            "interval": bootstrap_interval(gains, rng), "gains": gains,
            "val": statistics.fmean(r["val_best"] for r in runs), "seed_val": base[task]["val"],
            "seed_test": base[task]["test"],
            "lm_calls": statistics.fmean(r["lm_calls"] for r in runs),
            "improved_share": (sum(r["improved"] for r in runs) / proposals) if proposals else 0.0,
            "wall": statistics.fmean(r["wall"] for r in runs), "budget": runs[0]["seconds"],
            "load": statistics.fmean(r.get("load", 0) for r in runs),
        }
    return out


def _table(summary: dict) -> list[str]:
    lines = ["| task (kind) | system | seeds | held-out gain over the seed [95 % interval] | best val (seed) | "
             "LM calls | proposals improved | wall-clock (budget) |",
             "|---|---|---|---|---|---|---|---|"]
    for (task, system), s in summary.items():
        lo, hi = s["interval"]
        lines.append(f"| {task} ({s['kind']}) | {system} | {s['seeds']} | {s['gain']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
                     f"{s['val']:.3f} ({s['seed_val']:.3f}) | {s['lm_calls']:.1f} | {100 * s['improved_share']:.0f} % | "
                     f"{s['wall']:.0f} s ({s['budget']:g} s) |")
    return lines


def paired_differences(rows: list[dict]) -> list[float]:
    """Refract's held-out test score minus GEPA's on the same task and seed, over every pair run."""
    by = {(r["task"], r["seed"], r["system"]): r for r in rows if r.get("system") in ("refract", "gepa")}
    return [by[(t, sd, "refract")]["test_best"] - by[(t, sd, "gepa")]["test_best"]
            for (t, sd, system) in sorted(by) if system == "gepa" and (t, sd, "refract") in by]


def paired_interval(diffs: list[float]) -> tuple[float, float]:
    """The 95 % interval of the paired mean (its own fixed random stream, so a page rebuilt says the same)."""
    return bootstrap_interval(diffs, random.Random(1))


def summed_gains(summary: dict) -> tuple[list[str], float, float]:
    """(the tasks both systems ran, Refract's summed mean held-out gain over them, GEPA's)."""
    both = [t for t in sorted({t for t, _ in summary}) if (t, "refract") in summary and (t, "gepa") in summary]
    return (both, sum(summary[(t, "refract")]["gain"] for t in both),
            sum(summary[(t, "gepa")]["gain"] for t in both))


def _paired(rows: list[dict]) -> list[str]:
    """The paired comparison: the honest "better" is an interval above 0, not a larger mean."""
    diffs = paired_differences(rows)
    if not diffs:
        return []
    lo, hi = paired_interval(diffs)
    wins, losses = sum(d > 1e-9 for d in diffs), sum(d < -1e-9 for d in diffs)
    verdict = "better" if lo > 0 else "worse" if hi < 0 else "no difference that these runs can show"
    return [f"- Paired, the same task and seed ({len(diffs)} pairs): Refract's held-out score minus GEPA's "
            f"{statistics.fmean(diffs):+.3f} [{lo:+.3f}, {hi:+.3f}]; Refract higher on {wins}, lower on {losses}, "
            f"equal on {len(diffs) - wins - losses}: {verdict}."]


def _targets(summary: dict, rows: list[dict]) -> list[str]:
    tasks = sorted({t for t, _ in summary})
    lines = []
    both, r_all, g_all = summed_gains(summary)
    for t in both:
        r, g = summary[(t, "refract")]["gain"], summary[(t, "gepa")]["gain"]
        verdict = "met" if r >= g else "missed"
        lines.append(f"- {t}: Refract's mean held-out gain {r:+.3f} against GEPA's {g:+.3f}: ≥ GEPA's {verdict}.")
    if both:
        ratio = (r_all / g_all) if g_all > 0 else float("inf")
        lines.append(f"- Over all tasks: Refract {r_all:+.3f} against GEPA {g_all:+.3f} (summed means): "
                     f"{ratio:.2f}× (target ≥ 1.5×: {'met' if ratio >= 1.5 else 'missed'}).")
    lines += _paired(rows)
    negative = [t for t in tasks if (t, "refract") in summary and summary[(t, "refract")]["gain"] < 0]
    lines.append(f"- Tasks where Refract's mean held-out gain is negative: {', '.join(negative) or 'none'}.")
    share = [summary[(t, "refract")]["improved_share"] for t in tasks if (t, "refract") in summary]
    if share:
        lines.append(f"- Refract's proposals that improved on their minibatch: "
                     f"{', '.join(f'{100 * s:.0f} %' for s in share)} by task (target ≥ 25 % with the local model).")
    return lines


def write_page(rows: list[dict], out: Path, raw: Path) -> None:
    summary = summarize(rows)
    head = (out.read_text().split("<!-- results -->")[0] if out.exists() else "# Search quality with a real LM\n\n")
    body = ["<!-- results -->", "", f"Results (rebuilt {date.today().isoformat()} from `{raw.name}`):", ""]
    body += _table(summary) + ["", "Targets:", ""] + _targets(summary, rows) + [""]
    per_seed = ["Held-out gain per seed:", ""]
    for (task, system), s in summary.items():
        per_seed.append(f"- {task} / {system}: " + ", ".join(f"{g:+.3f}" for g in s["gains"]))
    out.write_text(head + "\n".join(body + per_seed) + "\n")
    print("\n".join(_table(summary) + [""] + _targets(summary, rows)))
