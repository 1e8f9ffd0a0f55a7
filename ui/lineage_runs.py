"""Two runs' lineage trees in one figure: a base run above, a branch of it below, and a dashed
edge from each candidate the branch started from to the seed it became (the branch point).

Pure: two figures of ``ui.lineage.lineage_figure`` in, one figure out. Each point's
``customdata`` becomes ``"RUN:CANDIDATE"``, so a click opens the candidate in its own run
(``candidate_of``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import plotly.graph_objects as go

SEP = ":"
GAP_ROWS = 3  # empty rows between the two trees
LINK = "#7c3aed"


def candidate_of(customdata: str, default_run: str) -> tuple[str, str]:
    """(run id, candidate id) of a clicked point of either figure."""
    run, sep, cid = str(customdata).partition(SEP)
    return (run, cid) if sep else (default_run, run)


def _tag(fig: go.Figure, run_id: str, dy: float, first: bool, seen: set[str]) -> list:
    traces = []
    for tr in fig.data:
        tr = go.Scatter(tr)
        if tr.y is not None:
            tr.y = np.asarray(tr.y, dtype=float) + dy
        if tr.customdata is not None:
            tr.customdata = np.array([f"{run_id}{SEP}{c}" for c in tr.customdata], dtype=object)
        if not first:
            if tr.name in seen:
                tr.showlegend = False
            if tr.marker is not None and tr.marker.colorbar is not None:
                tr.marker.colorbar = None
        if tr.name:
            seen.add(tr.name)
        traces.append(tr)
    return traces


def _position(traces: list, key: str) -> Optional[tuple[float, float]]:
    for tr in traces:
        if tr.mode == "markers" and tr.customdata is not None:
            for x, y, c in zip(tr.x, tr.y, tr.customdata):
                if c == key:
                    return float(x), float(y)
    return None


def joined_figure(base_fig: go.Figure, base_run: str, branch_fig: go.Figure, branch_run: str,
                  points: dict[str, str], labels: tuple[str, str]) -> go.Figure:
    """``base_fig`` above ``branch_fig`` (rows counted downwards); ``points`` maps each seed of the branch to the base
    candidate it was copied from; ``labels`` name the two trees."""
    rows = max((float(np.nanmax(tr.y)) for tr in base_fig.data if tr.y is not None and len(tr.y)), default=0.0)
    dy = rows + GAP_ROWS
    seen: set[str] = set()
    top = _tag(base_fig, base_run, 0.0, True, seen)
    bottom = _tag(branch_fig, branch_run, dy, False, seen)
    fig = go.Figure(top + bottom)
    lx, ly = [], []
    for seed, source in points.items():
        a, b = _position(top, f"{base_run}{SEP}{source}"), _position(bottom, f"{branch_run}{SEP}{seed}")
        if a and b:
            lx += [a[0], b[0], np.nan]
            ly += [a[1], b[1], np.nan]
            fig.add_annotation(x=a[0], y=a[1], text="branch point", showarrow=True, arrowhead=2, ax=40, ay=-24,
                               font=dict(color=LINK))
    if lx:
        fig.add_trace(go.Scatter(x=np.array(lx), y=np.array(ly), mode="lines", name="branch point → seed",
                                 line=dict(color=LINK, width=2, dash="dash"), hoverinfo="skip"))
    for y, text in ((-1.5, labels[0]), (dy - 1.5, labels[1])):
        fig.add_annotation(xref="paper", x=0, y=y, text=text, showarrow=False, xanchor="left",
                           font=dict(size=13, color="#374151"))
    fig.update_layout(base_fig.layout)
    _one_scale(fig)
    _step_ticks(fig)
    fig.update_layout(height=int(min(1400, max(520, 12 * (dy + rows) + 160))))
    fig.update_yaxes(visible=False, autorange="reversed")  # the base run's tree on top
    return fig


def _one_scale(fig: go.Figure) -> None:
    """Both trees coloured on one score scale (each figure had its own range)."""
    scaled = [tr for tr in fig.data if tr.marker is not None and tr.marker.colorscale is not None
              and tr.marker.cmin is not None]
    if scaled:
        low, high = min(tr.marker.cmin for tr in scaled), max(tr.marker.cmax for tr in scaled)
        for tr in scaled:
            tr.marker.cmin, tr.marker.cmax = low, high


def _step_ticks(fig: go.Figure) -> None:
    """The step axis over both trees (the base run's figure knew only its own steps)."""
    last = max((float(np.nanmax(tr.x)) for tr in fig.data if tr.x is not None and len(tr.x)), default=0.0)
    stride = max(1, int(np.ceil((last + 2) / 20)))
    ticks = [-1] + list(range(0, int(last) + 1, stride))
    fig.update_xaxes(tickvals=ticks, ticktext=["seed"] + [str(t) for t in ticks[1:]])
