"""Plotly figures for the dashboard, built from plain data (no Streamlit import).

Text that came from users or LMs never reaches a figure: only ids, numbers and our own
labels, so nothing needs escaping here.
"""

from __future__ import annotations

import html
from typing import Iterable, Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ui.analysis import TOL, FrontierView

X_LABELS = {"metric_calls": "metric calls", "cost_usd": "dollars spent", "seconds": "seconds since start"}
KIND_COLOURS = {"lm": "#7c3aed", "minibatch": "#0ea5e9", "validation": "#16a34a", "test": "#6b7280"}  # Step.events kinds
MAX_HEATMAP_ROWS = 60
# examples a heatmap draws at most: at 500 a cell was 2 pixels wide and its mark unreadable (and 18,000
# marks, as text then, took the browser seconds to draw); beyond this the examples held by the fewest
# candidates are drawn, where the frontier is made of specialists, and the caption says so
MAX_HEATMAP_COLUMNS = 100
MAX_COLUMN_LABELS = 34  # a heatmap's example labels at most: 9-pixel text at -60° needs about 18 pixels


def _layout(fig: go.Figure, height: int = 320, **kw) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10), legend=dict(orientation="h", y=1.12), **kw)
    return fig


def score_progress_figure(progress: pd.DataFrame, x: str = "metric_calls") -> go.Figure:
    fig = go.Figure()
    if not progress.empty:
        when = progress["when"].to_numpy(dtype=object)
        # a marker per point until they would touch (2,500 steps): the line alone then, every point on it
        mode = "lines+markers" if len(progress) <= 300 else "lines"
        fig.add_trace(go.Scatter(x=progress[x], y=progress["best"], mode=mode, name="best",
                                 line=dict(shape="hv", width=3), customdata=when,
                                 hovertemplate="%{customdata}<br>best %{y:.3f}<extra></extra>"))
        fig.add_trace(go.Scatter(x=progress[x], y=progress["mean"], mode="lines", name="pool mean",
                                 line=dict(dash="dot"), customdata=when,
                                 hovertemplate="%{customdata}<br>mean %{y:.3f}<extra></extra>"))
    fig.update_xaxes(title=X_LABELS[x])
    fig.update_yaxes(title="mean validation score")
    values = pd.concat([progress["best"], progress["mean"]]).dropna() if not progress.empty else pd.Series(dtype=float)
    if not values.empty and values.max() - values.min() < 0.02:
        # a flat line (the seed alone, or no gain yet): plotly would span 0 to twice the score
        fig.update_yaxes(range=[values.min() - 0.05, values.max() + 0.05])
    return _layout(fig)


def heatmap_rows(view: FrontierView, val_means: pd.Series, include_all: bool = False,
                 pinned: Iterable[str] = ()) -> list[str]:
    """The candidates a frontier heatmap shows, in order: frontier members (most examples first),
    then pinned candidates (they never disappear from views), then with ``include_all`` the best
    other candidates by ``val_means``, up to MAX_HEATMAP_ROWS (pinned rows are kept within it)."""
    pins = set(pinned)
    rows, room = [], MAX_HEATMAP_ROWS - len(pins)
    for cid in list(view.members) + sorted(pins - set(view.members)):
        if cid in pins or room > 0:
            rows.append(cid)
            room -= cid not in pins
    if include_all:
        others = val_means.drop(rows, errors="ignore").sort_values(ascending=False, na_position="last")
        rows += list(others.index[:MAX_HEATMAP_ROWS])
    return rows[:MAX_HEATMAP_ROWS]


def heatmap_columns(view: FrontierView) -> list[str]:
    """The examples a heatmap draws, in their order: all of them, or beyond MAX_HEATMAP_COLUMNS
    those held by the fewest candidates (contested ones first)."""
    examples = list(view.best.index)
    if len(examples) <= MAX_HEATMAP_COLUMNS:
        return examples
    rank = pd.DataFrame({"open": ~view.contested.reindex(examples).fillna(False).astype(bool),
                         "holders": view.holders.reindex(examples).fillna(0)}, index=examples)
    chosen = set(rank.sort_values(["open", "holders"], kind="stable").index[:MAX_HEATMAP_COLUMNS])
    return [e for e in examples if e in chosen]


def heatmap_holds(view: FrontierView, m: pd.DataFrame) -> pd.DataFrame:
    """True where the row's candidate holds the best score on the column's example, among
    examples where candidates differ: on one where every candidate ties (all 0, say) a mark
    would say nothing."""
    best = view.best.reindex(m.columns)
    contested = view.contested.reindex(m.columns).fillna(False).astype(bool)
    return m.ge(best - TOL, axis=1) & m.notna() & contested.to_numpy()[None, :]


def _diamonds(rows: np.ndarray, cols: np.ndarray) -> str:
    """One SVG path of a small closed diamond per (row, column) cell, in the axes' units."""
    return "".join(f"M{c},{r - 0.3:g}L{c + 0.3:g},{r}L{c},{r + 0.3:g}L{c - 0.3:g},{r}Z" for r, c in zip(rows, cols))


def frontier_heatmap(view: FrontierView, m: pd.DataFrame, pinned: Iterable[str] = ()) -> go.Figure:
    """Candidates × validation examples (``m``: the rows ``heatmap_rows`` chose, their scores;
    the columns ``heatmap_columns`` chose); a cell is the score, marked with a black diamond where
    the candidate holds the best score on that example (``heatmap_holds``)."""
    fig = go.Figure()
    if m.empty:
        return _layout(fig)
    pins = set(pinned)
    rows = list(m.index)
    m = m.reindex(columns=heatmap_columns(view))
    holds = heatmap_holds(view, m)
    labels = [f"{cid} · {view.best_on_text(cid)}{' · pinned' if cid in pins else ''}" for cid in rows]
    # the axes count cells (0, 1, ...) and the ticks name them, so that all the marks are one path
    # drawn over the heatmap's single image: as text in each cell (a Plotly heatmap's texttemplate)
    # they were 6,000 SVG elements at 60 × 100, and the heatmap took twice as long to draw (0.56 s
    # against 0.27 s, alone in a page)
    fig.add_trace(go.Heatmap(z=m.values, x=np.arange(len(m.columns)), y=np.arange(len(rows)), colorscale="Viridis",
                             zmin=np.nanmin(m.values), zmax=np.nanmax(m.values),
                             text=np.array(m.columns)[None, :].repeat(len(rows), axis=0),
                             customdata=np.array(rows)[:, None].repeat(len(m.columns), axis=1), colorbar=dict(title="score"),
                             hovertemplate="%{customdata}<br>%{text}: %{z:.3f}<extra></extra>", xgap=1, ygap=1))
    marked_rows, marked_cols = np.nonzero(holds.to_numpy())
    if len(marked_rows):
        fig.add_shape(type="path", path=_diamonds(marked_rows, marked_cols), xref="x", yref="y", layer="above",
                      line=dict(color="white", width=1), fillcolor="black")
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), tickvals=list(range(len(rows))), ticktext=labels,
                     showgrid=False, zeroline=False)
    # a label every few columns, as many as fit (Plotly thinned a category axis by itself)
    every = -(-len(m.columns) // MAX_COLUMN_LABELS)
    fig.update_xaxes(tickfont=dict(size=9), tickangle=-60, tickvals=list(range(0, len(m.columns), every)),
                     ticktext=list(m.columns)[::every], showgrid=False, zeroline=False)
    fig = _layout(fig, height=max(260, 80 + 18 * len(rows)))
    if len(m.columns) < len(view.best):
        fig.update_layout(margin=dict(t=50), title=dict(
            text=f"{len(m.columns)} of {len(view.best)} examples drawn: those held by the fewest candidates",
            font=dict(size=12), x=0.01, y=0.99))
    return fig


def objectives_scatter(points: pd.DataFrame, x: str, y: str, frontier_ids: set[str]) -> go.Figure:
    """2-D scatter of two mean sub-scores per candidate; the 2-D Pareto-optimal points joined."""
    fig = go.Figure()
    if points.empty:
        return _layout(fig)
    on = points["candidate_id"].isin(frontier_ids)
    for mask, name, size in ((~on, "other candidates", 7), (on, "per-example frontier", 11)):
        sub = points[mask]
        fig.add_trace(go.Scatter(x=sub[x], y=sub[y], mode="markers", name=name, marker=dict(size=size),
                                 customdata=sub["candidate_id"],
                                 hovertemplate="%{customdata}<br>" + x + " %{x:.3f}<br>" + y + " %{y:.3f}<extra></extra>"))
    pareto = pareto_2d(points, x, y)
    fig.add_trace(go.Scatter(x=pareto[x], y=pareto[y], mode="lines", name="2-D Pareto front", line=dict(shape="hv", dash="dash"),
                             hoverinfo="skip"))
    fig.update_xaxes(title=f"mean {x}")
    fig.update_yaxes(title=f"mean {y}")
    return _layout(fig, height=380)


def pareto_2d(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    ordered = points.sort_values([x, y], ascending=[False, False])
    keep, best_y = [], -np.inf
    for idx, yv in zip(ordered.index, ordered[y]):
        if yv > best_y:
            keep.append(idx)
            best_y = yv
    return points.loc[keep].sort_values(x)


def timeline_figure(events: pd.DataFrame) -> go.Figure:
    """Horizontal bars per proposal (reflect / evaluate / validate spans) of the last steps."""
    fig = go.Figure()
    if events.empty:
        return _layout(fig, height=200)
    lanes = list(dict.fromkeys(events["candidate_id"]))
    for kind, sub in events.groupby("kind", sort=False):
        fig.add_trace(go.Bar(y=sub["candidate_id"], x=sub["end"] - sub["start"], base=sub["start"], orientation="h",
                             name=kind, marker_color=KIND_COLOURS.get(kind), customdata=sub["step"],
                             hovertemplate="step %{customdata} · " + kind + "<br>%{y}<br>%{base:.1f}s → %{x:.1f}s long<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed", tickfont=dict(size=9),
                     title="proposal")
    fig.update_xaxes(title="seconds since the run started")
    return _layout(fig, height=max(240, 40 + 14 * len(lanes)), barmode="overlay")


MAX_BARS = 200  # bars a per-step chart draws: 2,500 bars of a pixel's width merged into one block


def utilisation_figure(steps: pd.DataFrame) -> go.Figure:
    """The workers' utilisation per step; beyond MAX_BARS steps, the mean of each run of
    consecutive steps (one bar each; the title says so)."""
    fig = go.Figure()
    title = None
    if not steps.empty:
        x, y, text = steps["index"], steps["worker_utilisation"], "step %{x}: %{y:.0%} busy"
        if len(steps) > MAX_BARS:
            width = -(-len(steps) // MAX_BARS)
            group = np.arange(len(steps)) // width
            binned = steps.groupby(group).agg(first=("index", "min"), last=("index", "max"),
                                              busy=("worker_utilisation", "mean"))
            x, y = (binned["first"] + binned["last"]) / 2, binned["busy"]
            text = "steps %{customdata[0]}–%{customdata[1]}: %{y:.0%} busy on average"
            fig.add_trace(go.Bar(x=x, y=y, width=width, customdata=binned[["first", "last"]].to_numpy(), name="workers busy",
                                 hovertemplate=text + "<extra></extra>"))
            title = f"mean of every {width} steps ({len(binned)} bars for {len(steps):,} steps)"
        else:
            fig.add_trace(go.Bar(x=x, y=y, name="workers busy", hovertemplate=text + "<extra></extra>"))
    fig.update_yaxes(title="workers busy", tickformat=".0%", range=[0, 1])
    fig.update_xaxes(title="step")
    fig = _layout(fig, height=220)
    if title:
        fig.update_layout(margin=dict(t=40), title=dict(text=title, font=dict(size=12), x=0.01, y=0.97))
    return fig


def compare_figure(data: pd.DataFrame, names: dict[str, str], x: str) -> go.Figure:
    fig = go.Figure()
    for rid, sub in data.groupby("run_id", sort=False):
        fig.add_trace(go.Scatter(x=sub[x], y=sub["best"], mode="lines+markers", name=html.escape(f"{names.get(rid, rid)[:40]} ({rid})"),
                                 line=dict(shape="hv")))
    fig.update_xaxes(title=X_LABELS[x])
    fig.update_yaxes(title="best validation score")
    return _layout(fig, height=360)


def per_example_bar(evals: pd.DataFrame, best: Optional[pd.Series] = None) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Bar(x=evals["example"], y=evals["score"], name="this candidate"))
    if best is not None and len(best):
        fig.add_trace(go.Scatter(x=best.index, y=best.values, mode="markers", name="frontier best",
                                 marker=dict(symbol="line-ew-open", size=14, line=dict(width=2))))
    fig.update_yaxes(title="score")
    return _layout(fig, height=260)
