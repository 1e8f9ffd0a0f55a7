"""Two or more runs side by side (did the branch help?): their scores and held-out results in one
table, their config differences as a table, and each run's best text. Plain data functions;
``pages/compare_runs.py`` draws them."""

from __future__ import annotations

import json
from typing import Any, Optional

import pandas as pd

from engine.branch import flatten
from engine.gain import Gain

SKIPPED = ("name",)  # differs between any two runs, says nothing


def shown(value: Any, limit: int = 60) -> str:
    """A setting's value in a table cell: rows as a count, long text cut (with its length)."""
    if value is None:
        return "—"
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return f"{len(value)} rows"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def config_differences(configs: dict[str, dict]) -> pd.DataFrame:
    """One row per setting whose value is not the same in every run (``setting`` and one column
    per run id), in setting order. Settings a run does not have show as —."""
    flat = {rid: flatten(cfg or {}) for rid, cfg in configs.items()}
    names = sorted(set().union(*flat.values())) if flat else []
    rows = []
    for name in names:
        if name in SKIPPED:
            continue
        values = [flat[rid].get(name) for rid in configs]
        if any(v != values[0] for v in values[1:]):
            rows.append({"setting": name, **{rid: shown(v) for rid, v in zip(configs, values)}})
    return pd.DataFrame(rows, columns=["setting", *configs])


def summary(runs: dict[str, dict], gains: dict[str, Optional[Gain]], reused: dict[str, int]) -> pd.DataFrame:
    """Per run: what it reached and spent, and whether its best's gain over its seed held out."""
    rows = []
    for rid, run in runs.items():
        g = gains.get(rid)
        held = g if g is not None and g.held_out else None
        rows.append({
            "run": rid, "name": run.get("name"), "status": run.get("status"),
            "branch of": run.get("branch_of") or "",
            "best val": run.get("best_val_mean"), "best test": run.get("test_mean"),
            "seed test": run.get("seed_test_mean"),
            "held-out gain": None if held is None else held.gain,
            "95 % interval": "" if held is None else f"{held.low:+.3f} … {held.high:+.3f}",
            "wins / losses": "" if held is None else f"{len(held.wins)} / {len(held.losses)}",
            "val–test gap": None if held is None else held.gap,
            "metric calls": run.get("metric_calls"), "reused": reused.get(rid, 0),
            "$": run.get("cost_usd"), "seconds": run.get("seconds"),
        })
    return pd.DataFrame(rows)


def held_out_scores(per_run: dict[str, list[dict]]) -> pd.DataFrame:
    """Each run's best on each held-out example (``storage.compare_queries.pair_evaluations``
    rows of the best with itself), one column per run, the examples every run's best was
    evaluated on first."""
    table: dict[str, dict[str, float]] = {}
    for rid, rows in per_run.items():
        for r in rows:
            if r["split"] == "test" and r["score_a"] is not None:
                table.setdefault(r["example"], {})[rid] = r["score_a"]
    out = pd.DataFrame([{"example": k, **v} for k, v in table.items()], columns=["example", *per_run])
    if out.empty:
        return out
    return out.assign(_n=out[list(per_run)].notna().sum(axis=1)).sort_values("_n", ascending=False,
                                                                             kind="stable").drop(columns="_n")
