"""The runtime-model playground's numbers and figures: ``engine.runtime.model`` swept over the
proposals per parent K at the chosen settings (no Streamlit here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.runtime.model import Latencies, Shape, predict_run_seconds, predict_speedup, sync_step

MAX_K = 8
COLOURS = {"sync": "#2563eb", "async": "#ea580c"}


def sweep(parents: int, lat: Latencies, budget: int) -> pd.DataFrame:
    """One row per (K, schedule): predicted wall-clock of a run spending ``budget`` metric calls,
    and its speed-up per metric call over the 1×1 schedule at the same latencies."""
    rows = []
    for k in range(1, MAX_K + 1):
        for schedule in ("sync", "async"):
            shape = Shape(parents=parents, per_parent=k, schedule=schedule)
            seconds, calls = predict_run_seconds(shape, lat, budget)
            rows.append({"K": k, "schedule": schedule, "seconds": seconds, "metric_calls": calls,
                         "speedup": predict_speedup(shape, lat, budget)})
    return pd.DataFrame(rows)


def one_step(parents: int, k: int, lat: Latencies) -> dict:
    """The synchronous step at (P, K): predicted seconds and metric calls, and the 1×1 step's."""
    tk, ck = sync_step(Shape(parents=parents, per_parent=k), lat)
    t1, c1 = sync_step(Shape(), lat)
    return {"seconds": tk, "calls": ck, "seconds_1x1": t1, "calls_1x1": c1}


def figure(table: pd.DataFrame, chosen_k: int) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Predicted wall-clock of the run (minutes)",
                                                        "Speed-up per metric call over 1×1"))
    for schedule, part in table.groupby("schedule", sort=False):
        for col, y in ((1, part["seconds"] / 60), (2, part["speedup"])):
            fig.add_trace(go.Scatter(x=part["K"], y=y, name=schedule, mode="lines+markers", showlegend=col == 1,
                                     line={"color": COLOURS[schedule]}, legendgroup=schedule), row=1, col=col)
    for col in (1, 2):
        fig.add_vline(x=chosen_k, line_dash="dot", line_color="#64748b", row=1, col=col)
        fig.update_xaxes(title_text="K, proposals per parent", dtick=1, row=1, col=col)
    fig.update_layout(height=360, margin={"l": 40, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.25, "title": {"text": "schedule "}})
    return fig
