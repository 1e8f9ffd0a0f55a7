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
from math import fsum
from typing import Iterable, Mapping, Optional

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


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return fsum(values) / len(values) if values else 0.0


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
    """
    best: dict[str, float] = {}
    low: dict[str, float] = {}
    for per in scores.values():
        for key, s in per.items():
            if key not in best or s > best[key]:
                best[key] = s
            if key not in low or s < low[key]:
                low[key] = s
    contested = {k for k in best if best[k] > low[k] + tol}
    wins = {cid: tuple(sorted(k for k, s in per.items() if k in contested and s >= best[k] - tol))
            for cid, per in scores.items()}
    members = [cid for cid in sorted(scores) if wins[cid] and cid != reference]
    out: dict[str, Degenerate] = {}
    for cid in members:
        per = scores[cid]
        values = list(per.values())
        if len(values) >= MIN_EXAMPLES and max(values) - min(values) <= tol and \
                any(best[k] > values[0] + tol for k in per):
            out[cid] = Degenerate(cid, CONSTANT, wins[cid], _mean(values), None)
    trivial_sets = [set(wins[c]) for c in out]
    if trivial:
        trivial_sets.append({k for k, s in trivial.items() if k in best and s >= best[k] - tol})
    ref = scores.get(reference) if reference is not None else None
    ref_mean = _mean(ref.values()) if ref else None
    for cid in members:
        if cid in out or cid == reference:
            continue
        per, won = scores[cid], set(wins[cid])
        if any(won <= t for t in trivial_sets):
            out[cid] = Degenerate(cid, TRIVIAL_WINS, wins[cid], _mean(per.values()), None)
            continue
        if ref is None:
            continue
        if per.keys() == ref.keys():  # the common case, both fully validated: the reference's mean once
            mine, theirs = _mean(per.values()), ref_mean
        else:
            shared = [k for k in per if k in ref]
            if not shared:
                continue
            mine, theirs = _mean(per[k] for k in shared), _mean(ref[k] for k in shared)
        if mine < theirs - tol:
            out[cid] = Degenerate(cid, BELOW_REFERENCE, wins[cid], mine, theirs)
    return out
