"""The frontier as the engine keeps it, turned into the studio's ``FrontierView`` (pure: plain
data in, plain data out), and the degenerate members read from it.

A run whose frontier the engine keeps (``run.frontier_kept == run.frontier_version``,
``storage.frontier``) is shown from a few hundred entry rows and one narrow row per accepted
candidate, never from its validation scores; the heatmap then reads only the rows it draws. A
run recorded by an older release is computed from its scores as before
(``ui.analysis.frontier``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from engine.analyze.degenerate_kept import Aggregate, from_aggregates
from ui.analysis import TOL, FrontierView, natural_key


def is_kept(run: dict) -> bool:
    """Whether the run's frontier rows describe its current frontier version."""
    return run.get("frontier_kept") is not None and run.get("frontier_kept") == run.get("frontier_version")


def kept_view(entries: pd.DataFrame, aggregates: pd.DataFrame, frontier_type: str) -> FrontierView:
    """The view of ``storage.frontier.kept_frontier``'s two frames: per example its best score and
    whether it is contested; per accepted candidate the entries of the run's frontier type it
    holds (``best_on``, vetoed ones 0), members most entries first (then by id). Its ``matrix``
    has the examples as columns and no rows: the heatmap reads the rows it shows."""
    empty = pd.Series(dtype="float64")
    per_example = entries[entries["objective"] == ""]
    if per_example.empty:
        return FrontierView(pd.DataFrame(), empty, empty, empty, [], kept=True, aggregates=aggregates)
    examples = sorted(per_example["example"], key=natural_key)
    by_key = per_example.set_index("example").reindex(examples)
    best = by_key["best"].astype("float64")
    contested = by_key["lowest"].astype("float64") < best - TOL
    live = aggregates[~aggregates["vetoed"]]
    counts = pd.Series(np.where(aggregates["vetoed"], 0, aggregates["frontier_entries"]), index=aggregates["id"],
                       dtype="int64")
    order = counts[counts > 0].reset_index().sort_values([0, "id"], ascending=[False, True], kind="stable")
    members = list(order["id"])
    held = {}
    has_objectives = bool((entries["objective"] != "").any())
    if frontier_type != "instance" and (frontier_type != "hybrid" or has_objectives):
        for r in live.itertuples(index=False):
            examples_held = r.frontier_examples if frontier_type == "hybrid" else 0
            rest = r.frontier_entries - examples_held
            held[r.id] = {"examples": examples_held, "objectives": rest if frontier_type in ("objective", "hybrid") else 0,
                          "pairs": rest if frontier_type == "cartesian" else 0}
    matrix = pd.DataFrame(columns=pd.Index(examples, name="example"), dtype="float64")
    return FrontierView(matrix, best, counts, pd.Series(dtype="int64"), members, contested=contested, held=held,
                        holders=by_key["holders"].astype("int64"), kept=True, aggregates=aggregates)


def degenerate(view: FrontierView, rows: Callable, holding_above: Callable) -> pd.DataFrame:
    """The degenerate members of a kept frontier (``engine.analyze.degenerate_kept``), as
    ``ui.interventions.degenerate_members`` returns them: id, val_mean, seed_mean, why; ``rows``
    and ``holding_above`` are ``storage.frontier``'s reads bound to the run."""
    from ui.interventions import DEGENERATE_WHY

    cols = ["id", "val_mean", "seed_mean", "why"]
    agg = view.aggregates
    if agg is None or agg.empty or view.best.empty or not view.members:
        return pd.DataFrame(columns=cols)
    live = agg[~agg["vetoed"] & (agg["val_count"] > 0)]
    known = lambda col: [None if v != v else v for v in live[col].astype("float64").tolist()]  # noqa: E731  NaN: None
    cands = {c: Aggregate(n, m, lo, hi, h) for c, n, m, lo, hi, h in zip(
        live["id"].tolist(), live["val_count"].astype(int).tolist(), live["val_mean"].astype("float64").tolist(),
        known("val_min"), known("val_max"), live["frontier_examples"].astype(int).tolist())}
    seeds = [c for c in live.loc[live["origin"] == "seed", "id"]]
    reference = seeds[0] if seeds else None
    contested = set(view.contested.index[view.contested.to_numpy(dtype=bool)])
    found = from_aggregates(cands, view.best.to_dict(), contested, reference, rows, holding_above)
    seed_mean = cands[reference].mean if reference else float("nan")
    members = set(view.members)
    out = [(c, cands[c].mean, seed_mean, DEGENERATE_WHY[d.rule]) for c, d in found.items() if c in members]
    return pd.DataFrame(out, columns=cols).sort_values("val_mean").reset_index(drop=True)
