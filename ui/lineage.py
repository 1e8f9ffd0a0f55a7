"""The lineage tree as a plotly figure (pure: plain data in, figure out).

Layout: x is the step a candidate was proposed in; y comes from a tidy-tree pass over the
first-parent tree (a leaf takes the next free row, a parent sits at the mean of its
children), so subtrees stay together and 1,000 nodes stay readable. Merge candidates get a
dashed edge to their second parent. Rejected and failed proposals are collapsed by default:
their parent's hover says how many were hidden. One scatter trace per mark, so the legend
doubles as a key and a filter; each point's ``customdata`` is the candidate id (click → page).
A node has one main mark (its symbol); origin marks (merge, human edit) and pinned are also
drawn as rings around it, so a frontier candidate made by a merge or a human edit shows both.
Pinned candidates are never collapsed. Beyond MAX_NODES candidates the tree is drawn in part
(``drawn_part``): the best, the candidate in view, the pinned ones and the frontier members in
the order given (most examples first), each with its ancestors, while they fit; every other
candidate is counted in the hover of its nearest drawn ancestor, and the plot says so.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ui.analysis import children_counts

# mark name -> (symbol, size, fixed colour or None to colour by score)
MARKS = {
    "best": ("star", 22, None),
    "frontier": ("diamond", 13, None),
    "accepted": ("circle", 9, None),
    "merge": ("square", 11, None),
    "human": ("triangle-up", 13, None),
    "rejected": ("x-thin-open", 7, "#9ca3af"),
    "failed": ("x", 8, "#dc2626"),
    "vetoed": ("circle-x-open", 12, "#6b7280"),
}


# origin -> (ring symbol, colour, legend name): drawn around nodes whose main mark is another one
ORIGIN_RINGS = {
    "merge": ("square-open", "#d97706", "merge (ring)"),
    "human": ("triangle-up-open", "#7c3aed", "human edit (ring)"),
}


MERGE_PATHS = {"three_way": "three-way merge over the common ancestor, no LM call",
               "lm": "merged by the reflection LM (the versions changed the same lines)"}


def merge_path_text(path) -> str:
    """How a merge's text was written, in words; empty for a candidate that is not a merge."""
    return MERGE_PATHS.get(path or "", "")


def mark_of(row, best_id: Optional[str], frontier_ids: set[str]) -> str:
    if row.vetoed:
        return "vetoed"
    if row.status == "failed":
        return "failed"
    if row.status == "rejected":
        return "rejected"
    if row.id == best_id:
        return "best"
    if row.id in frontier_ids:
        return "frontier"
    if row.origin in ("merge", "sibling_merge"):
        return "merge"
    if row.origin == "human":
        return "human"
    return "accepted"


# candidates drawn at most: at 5,000 the markers covered one another in a solid block (rows a third of a
# pixel apart) and the best's star could not be found
MAX_NODES = 1000


def drawn_part(candidates: pd.DataFrame, first: Iterable[str], limit: int = MAX_NODES) -> tuple[pd.DataFrame, dict[str, int]]:
    """The candidates to draw when there are more than ``limit``: those of ``first`` in order (the
    most telling first), each with its first-parent ancestors, while they fit, then the best
    validated others; and per drawn candidate how many of its descendants are not drawn."""
    if len(candidates) <= limit:
        return candidates, {}
    ids = list(candidates["id"])
    parent = {c: next(iter(p), None) if p else None for c, p in zip(ids, candidates["parent_ids"])}
    by_score = candidates.sort_values("val_mean", ascending=False, na_position="last", kind="stable")["id"]
    keep: set[str] = set()
    for cid in [*first, *by_score]:
        chain, c = [], cid
        while c is not None and c in parent and c not in keep:
            chain.append(c)
            c = parent[c]
        if len(keep) + len(chain) > limit:
            continue
        keep.update(chain)
        if len(keep) >= limit:
            break
    hidden: dict[str, int] = {}
    for cid in ids:
        if cid in keep:
            continue
        c = parent.get(cid)
        while c is not None and c not in keep:
            c = parent.get(c)
        if c is not None:
            hidden[c] = hidden.get(c, 0) + 1
    return candidates[candidates["id"].isin(keep)], hidden


def layout(candidates: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """(x, y) for every candidate: x = the step it was proposed in (seeds at -1, left of the
    first step, whose proposals share step 0), y = tidy-tree row over first parents."""
    ids = list(candidates["id"])
    known = set(ids)
    kids: dict[str, list[str]] = defaultdict(list)
    roots = []
    for cid, pids in zip(ids, candidates["parent_ids"]):
        first = next((p for p in (pids or []) if p in known), None)
        (kids[first].append(cid) if first else roots.append(cid))
    origins = candidates["origin"] if "origin" in candidates.columns else [""] * len(ids)
    step = {cid: (-1 if origin == "seed" else st_) for cid, origin, st_ in zip(ids, origins, candidates["step"])}
    pos: dict[str, tuple[float, float]] = {}
    next_row = 0.0

    # iterative post-order (deep chains would overflow recursion)
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                ch = kids.get(node, [])
                if ch:
                    y = sum(pos[c][1] for c in ch) / len(ch)
                else:
                    y, next_row = next_row, next_row + 1
                pos[node] = (float(step[node]), y)
            else:
                stack.append((node, True))
                for c in reversed(kids.get(node, [])):
                    stack.append((c, False))
    return pos


def lineage_figure(candidates: pd.DataFrame, best_id: Optional[str], frontier_ids: Iterable[str],
                   show_rejected: bool = False, highlight: Optional[str] = None) -> go.Figure:
    ordered = list(frontier_ids)  # most examples first: drawn first when not all can be
    frontier_ids = set(ordered)
    counts = children_counts(candidates)
    if show_rejected:
        shown = candidates
    else:
        shown = candidates[~candidates["status"].isin(["rejected", "failed"]) | (candidates["id"] == highlight)
                           | candidates["pinned"].astype(bool)]
    everything = len(shown)
    pinned = list(shown.loc[shown["pinned"].astype(bool), "id"])
    shown, undrawn = drawn_part(shown, [c for c in (highlight, best_id) if c] + pinned + ordered)
    pos = layout(shown)
    fig = go.Figure()
    _add_edges(fig, shown, pos)
    marks = [mark_of(r, best_id, frontier_ids) for r in shown.itertuples(index=False)]
    shown = shown.assign(mark_=marks)
    scores = shown["val_mean"].dropna()
    cmin, cmax = (float(scores.min()), float(scores.max())) if len(scores) else (0.0, 1.0)
    colourbar_done = False
    for mark, (symbol, size, colour) in MARKS.items():
        sub = shown[shown["mark_"] == mark]
        if sub.empty:
            continue
        hover = [_hover(r, counts.get(r.id, {}), show_rejected, undrawn.get(r.id, 0)) for r in sub.itertuples(index=False)]
        marker = dict(symbol=symbol, size=size, line=dict(width=1, color="#1f2937"))
        if colour is None:
            marker.update(color=sub["val_mean"].fillna(cmin).to_numpy(), colorscale="Viridis", cmin=cmin, cmax=cmax)
            if not colourbar_done:
                marker["colorbar"] = dict(title="val score", thickness=12)
                colourbar_done = True
        else:
            marker["color"] = colour
        fig.add_trace(go.Scatter(x=np.array([pos[c][0] for c in sub["id"]]), y=np.array([pos[c][1] for c in sub["id"]]),
                                 mode="markers", name=mark, marker=marker, customdata=sub["id"].to_numpy(dtype=object),
                                 hovertext=np.array(hover, dtype=object),
                                 hovertemplate="%{hovertext}<extra></extra>"))
    _add_overlays(fig, shown, pos, highlight)
    _lay_out(fig, pos)
    if len(shown) < everything:
        fig.update_layout(margin=dict(t=90), legend=dict(y=1.04), title=dict(
            text=f"{len(shown):,} of {everything:,} candidates drawn: the best, the pinned ones and the frontier members "
                 "holding the most examples,<br>with their ancestors (a node's hover counts its descendants not drawn)",
            font=dict(size=12), x=0.01, xanchor="left", yref="container", y=1, yanchor="top",
            pad=dict(t=12)))  # at y = 0.995 with no pad the first of the two lines was cut off at the top
    return fig


def _add_edges(fig: go.Figure, shown: pd.DataFrame, pos: dict) -> None:
    """Parent-to-child lines: the first parent solid, merge sources dashed."""
    ex, ey, mx, my = [], [], [], []
    for cid, pids in zip(shown["id"], shown["parent_ids"]):
        for i, p in enumerate(pids or []):
            if p not in pos:
                continue
            xs, ys = (mx, my) if i > 0 else (ex, ey)
            xs += [pos[p][0], pos[cid][0], np.nan]
            ys += [pos[p][1], pos[cid][1], np.nan]
    # SVG (not WebGL) lines: WebGL traces are drawn above SVG markers and would strike through them
    # numpy arrays (NaN breaks the line between edges): plotly validates them in bulk, lists item by item
    fig.add_trace(go.Scatter(x=np.array(ex), y=np.array(ey), mode="lines", line=dict(color="#cbd5e1", width=1), hoverinfo="skip",
                               showlegend=False))
    if mx:
        fig.add_trace(go.Scatter(x=np.array(mx), y=np.array(my), mode="lines", line=dict(color="#f59e0b", width=1, dash="dash"),
                                   hoverinfo="skip", name="merge source"))


def _add_overlays(fig: go.Figure, shown: pd.DataFrame, pos: dict, highlight: Optional[str]) -> None:
    """Rings over the markers: merge and human origins, pinned candidates, the candidate in view."""
    for origin, (symbol, colour, name) in ORIGIN_RINGS.items():
        ring = shown[(shown["origin"] == origin) & (shown["mark_"] != origin)]
        if not ring.empty:
            fig.add_trace(go.Scatter(x=[pos[c][0] for c in ring["id"]], y=[pos[c][1] for c in ring["id"]],
                                     mode="markers", name=name, customdata=list(ring["id"]), hoverinfo="skip",
                                     marker=dict(symbol=symbol, size=24, color=colour, line=dict(width=2))))
    pinned = shown[shown["pinned"].astype(bool)]
    if not pinned.empty:
        fig.add_trace(go.Scatter(x=[pos[c][0] for c in pinned["id"]], y=[pos[c][1] for c in pinned["id"]],
                                 mode="markers", name="pinned", customdata=list(pinned["id"]),
                                 marker=dict(symbol="circle-open", size=22, color="#e11d48", line=dict(width=3)),
                                 hovertemplate="%{customdata} (pinned)<extra></extra>"))
    if highlight and highlight in pos:
        fig.add_trace(go.Scatter(x=[pos[highlight][0]], y=[pos[highlight][1]], mode="markers", name="this candidate",
                                 marker=dict(symbol="circle-open", size=28, color="#111827", line=dict(width=3)),
                                 hoverinfo="skip"))


def _lay_out(fig: go.Figure, pos: dict) -> None:
    """Height from the number of rows; the x axis in steps, the seed left of step 0."""
    rows = max((p[1] for p in pos.values()), default=0)
    fig.update_layout(height=int(min(900, max(420, 12 * rows + 120))), margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", y=1.06), clickmode="event+select", dragmode="pan")
    last = max((p[0] for p in pos.values()), default=0)
    stride = max(1, int(np.ceil((last + 2) / 20)))
    ticks = [-1] + list(range(stride if stride > 1 else 0, int(last) + 1, stride))  # a 0 beside "seed" overlapped it
    fig.update_xaxes(title="step", zeroline=False, tickmode="array", tickvals=ticks,
                     ticktext=["seed"] + [str(t) for t in ticks[1:]])
    fig.update_yaxes(visible=False)


def _hover(r, kids: dict[str, int], show_rejected: bool, undrawn: int = 0) -> str:
    score = "—" if pd.isna(r.val_mean) else f"{r.val_mean:.3f}"
    parts = [f"<b>{r.id}</b> · {r.status} · {r.origin}", f"step {r.step} · val {score}"]
    if getattr(r, "mark_", None) in ("best", "frontier"):
        parts.append(f"on the frontier{' (best)' if r.mark_ == 'best' else ''}")
    if r.component:
        parts.append(f"rewrote: {_plain(r.component)}")
    if merge_path_text(getattr(r, "merge_path", "")):
        parts.append(merge_path_text(r.merge_path))
    if r.author:
        parts.append(f"by {_plain(r.author)}")
    hidden = kids.get("rejected", 0) + kids.get("failed", 0)
    if hidden and not show_rejected:
        parts.append(f"+{hidden} rejected/failed proposals hidden")
    if undrawn:
        parts.append(f"+{undrawn} descendants not drawn")
    if r.pinned:
        parts.append("pinned")
    if r.vetoed:
        parts.append("vetoed")
    return "<br>".join(parts)


def _plain(text: str) -> str:
    """Plotly hover text is HTML-ish: escape names that came from users."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")[:80]
