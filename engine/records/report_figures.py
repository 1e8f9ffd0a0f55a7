"""The report's figures, built from an export document (``engine.records.export``).

Only ids, numbers, statuses and origins go into a figure: candidate and LM text never does, so
nothing a model wrote can reach plotly's (partly HTML-aware) labels.
"""

from __future__ import annotations

import plotly.graph_objects as go

STATUS_COLOURS = {"accepted": "#2563eb", "rejected": "#9ca3af", "failed": "#dc2626", "proposed": "#f59e0b"}
LAYOUT = dict(height=360, margin=dict(l=50, r=20, t=40, b=40), template="plotly_white")


def score_over_budget(doc: dict) -> go.Figure:
    """Best validation mean so far, and each validated candidate, against metric calls spent."""
    spent, at_step = 0, {}
    for step in sorted(doc["steps"], key=lambda s: s["index"]):
        spent += step["metric_calls"] or 0
        at_step[step["index"]] = spent
    scored = sorted((c for c in doc["candidates"] if c["val_mean"] is not None), key=lambda c: c["step"])
    xs = [at_step.get(c["step"], 0) for c in scored]
    best, curve = float("-inf"), []
    for c in scored:
        best = max(best, c["val_mean"])
        curve.append(best)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=[c["val_mean"] for c in scored], mode="markers", name="validated candidate",
                             text=[c["id"] for c in scored], marker=dict(color="#93c5fd", size=7)))
    fig.add_trace(go.Scatter(x=xs, y=curve, mode="lines", line_shape="hv", name="best so far",
                             line=dict(color="#1d4ed8", width=2)))
    fig.update_layout(title="Validation score over the budget", xaxis_title="metric calls spent",
                      yaxis_title="validation mean", **LAYOUT)
    return fig


def lineage_tree(doc: dict, highlight: str | None) -> go.Figure:
    """Every candidate at (step, position within its step), an edge from each parent."""
    by_step: dict[int, list[dict]] = {}
    for c in doc["candidates"]:
        by_step.setdefault(c["step"], []).append(c)
    pos = {}
    for step, cands in by_step.items():
        for i, c in enumerate(sorted(cands, key=lambda c: c["id"])):
            pos[c["id"]] = (step, i - (len(cands) - 1) / 2)
    ex, ey = [], []
    for c in doc["candidates"]:
        for p in c["parent_ids"]:
            if p in pos:
                ex += [pos[p][0], pos[c["id"]][0], None]
                ey += [pos[p][1], pos[c["id"]][1], None]
    fig = go.Figure(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#d1d5db", width=1), hoverinfo="skip",
                               showlegend=False))
    for status, colour in STATUS_COLOURS.items():
        cands = [c for c in doc["candidates"] if c["status"] == status]
        if cands:
            fig.add_trace(go.Scatter(
                x=[pos[c["id"]][0] for c in cands], y=[pos[c["id"]][1] for c in cands], mode="markers", name=status,
                text=[f"{c['id']} · {c['origin']} · " + ("n/a" if c["val_mean"] is None else f"{c['val_mean']:.3f}")
                      for c in cands], hoverinfo="text",
                marker=dict(color=colour, size=[14 if c["id"] == highlight else 8 for c in cands],
                            line=dict(width=[2 if c["id"] == highlight else 0 for c in cands], color="#111827"))))
    fig.update_layout(title="Lineage (x: step; the large marker is the reported candidate)", xaxis_title="step",
                      yaxis=dict(visible=False), **LAYOUT)
    return fig
