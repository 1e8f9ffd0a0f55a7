"""Degenerate frontier members, from per-example scores alone (a pure function, no database).

A per-example Pareto frontier keeps any candidate that holds the best score on one example.
That is its strength (specialists survive) and its weakness: a candidate that answers every
example alike — a regex that matches nothing, an empty prompt, a classifier that always says
"no" — holds the best score wherever that trivial answer happens to be right, and is then
sampled as a parent as often as a real improvement. Analyze reports such members (with a veto
one click away); parent selection may use the same definition to pass them over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

Scores = Mapping[str, Mapping[str, float]]  # candidate id -> {example key -> score}

CONSTANT, TRIVIAL_WINS, BELOW_REFERENCE = "constant", "trivial_wins", "below_reference"
MIN_EXAMPLES = 3  # fewer examples than this say nothing about "the same outcome on every example"


@dataclass(frozen=True)
class Degenerate:
    candidate_id: str
    rule: str  # CONSTANT | TRIVIAL_WINS | BELOW_REFERENCE (the first that holds, in that order)
    wins: tuple[str, ...]  # the contested examples where it holds the best score
    mean: float
    reference_mean: Optional[float]  # the reference's mean over the same examples (BELOW_REFERENCE)


def degenerate_members(scores: Scores, reference: Optional[str] = None,
                       trivial: Optional[Mapping[str, float]] = None, tol: float = 1e-9) -> dict[str, Degenerate]:
    """The frontier members of ``scores`` that are degenerate, by candidate id.

    ``scores`` holds the validation scores of the candidates that compete (accepted, not
    vetoed); the frontier is computed over them. Only *contested* examples count — those where
    not every candidate got the same score (holding the best where all tie, at 0 say, wins
    nothing) — and a member holds the best score (ties included) on at least one of them.
    ``reference`` is the candidate to beat on average (the seed), never itself degenerate, and
    ``trivial`` the per-example scores of a known trivial answer, when one was measured. A
    member is degenerate by the first of these rules that holds:

    1. ``constant``: it was scored on at least MIN_EXAMPLES examples, got the same score on
       every one, and that score is below the best on at least one of them: it answers every
       example alike (a hedge, an empty answer) and holds the frontier only where that one
       answer beats the others.
    2. ``trivial_wins``: every example where it holds the best score is one that a trivial
       answer also wins (``trivial``, or any constant member found by rule 1): it owes its place
       on the frontier only to examples that answering alike already wins.
    3. ``below_reference``: its mean over the examples both were scored on is below the
       reference's: it holds some example only by giving up more elsewhere than the candidate
       the search started from.

    Ties are within ``tol``. Deterministic: the result depends only on the scores given.
    ``degenerate_in_matrix`` is the same rule over a candidates × examples matrix.
    """
    ids = sorted(scores)
    keys = sorted({k for per in scores.values() for k in per})
    col = {k: j for j, k in enumerate(keys)}
    matrix = np.full((len(ids), len(keys)), np.nan)
    for i, cid in enumerate(ids):
        for k, v in scores[cid].items():
            matrix[i, col[k]] = v
    return degenerate_in_matrix(ids, keys, matrix, reference, trivial, tol)


def degenerate_in_matrix(ids: Sequence[str], keys: Sequence[str], matrix: np.ndarray, reference: Optional[str] = None,
                         trivial: Optional[Mapping[str, float]] = None, tol: float = 1e-9) -> dict[str, Degenerate]:
    """``degenerate_members`` over ``matrix`` (rows: ``ids``, columns: ``keys``; NaN where a
    candidate was not scored), vectorised: the form a 2,000-candidate run is analysed in."""
    if not len(ids) or not len(keys):
        return {}
    scored = ~np.isnan(matrix)
    with np.errstate(all="ignore"):
        best = np.where(scored, matrix, -np.inf).max(axis=0)
        low = np.where(scored, matrix, np.inf).min(axis=0)
        holds = scored & (matrix >= best - tol) & (best > low + tol)  # the best on a contested example
        ref = list(ids).index(reference) if reference in ids else None
        members = holds.any(axis=1)
        if ref is not None:
            members[ref] = False
        count = scored.sum(axis=1)
        row_max = np.where(scored, matrix, -np.inf).max(axis=1)
        row_min = np.where(scored, matrix, np.inf).min(axis=1)
        below_best = (scored & (best > row_max[:, None] + tol)).any(axis=1)
        constant = members & (count >= MIN_EXAMPLES) & (row_max - row_min <= tol) & below_best
        trivial_rows = [holds[i] for i in np.flatnonzero(constant)]
        if trivial:
            t = np.array([trivial.get(k, -np.inf) for k in keys])
            trivial_rows.append(t >= best - tol)
        only_trivial = np.zeros(len(ids), dtype=bool)
        for t in trivial_rows:
            only_trivial |= ~(holds & ~t).any(axis=1)
        mean = np.where(scored, matrix, 0.0).sum(axis=1) / np.maximum(count, 1)
        if ref is not None:
            shared = scored & scored[ref]
            n = shared.sum(axis=1)
            mine = np.where(shared, matrix, 0.0).sum(axis=1) / np.maximum(n, 1)
            theirs = (shared * np.nan_to_num(matrix[ref])).sum(axis=1) / np.maximum(n, 1)
            below = (n > 0) & (mine < theirs - tol)
    out: dict[str, Degenerate] = {}
    for i in np.flatnonzero(members):
        wins = tuple(sorted(keys[j] for j in np.flatnonzero(holds[i])))
        if constant[i]:
            out[ids[i]] = Degenerate(ids[i], CONSTANT, wins, float(mean[i]), None)
        elif only_trivial[i]:
            out[ids[i]] = Degenerate(ids[i], TRIVIAL_WINS, wins, float(mean[i]), None)
        elif ref is not None and below[i]:
            out[ids[i]] = Degenerate(ids[i], BELOW_REFERENCE, wins, float(mine[i]), float(theirs[i]))
    return dict(sorted(out.items()))
