"""The per-example Pareto frontier (GEPA's), computed from validation scores.

For each validation example we keep the candidates with the best score on it. A candidate
that is best somewhere but is *dominated* — every example where it is best also has another
surviving best candidate — is dropped, so a parent is sampled with probability proportional to
the number of examples on which it is (non-redundantly) best.

Partial validation passes are allowed: a candidate competes only on the examples it was
evaluated on, so the frontier is exact for the examples evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

Scores = Mapping[str, Mapping[str, float]]  # candidate id -> example key -> score


@dataclass
class Frontier:
    best: dict[str, float] = field(default_factory=dict)  # example key -> best score
    holders: dict[str, set[str]] = field(default_factory=dict)  # example key -> candidate ids at best

    def members(self) -> set[str]:
        return set().union(*self.holders.values()) if self.holders else set()


def compute_frontier(scores: Scores, eligible: Iterable[str] | None = None, tol: float = 1e-9) -> Frontier:
    """The best score on each example and who holds it, over the eligible candidates."""
    allowed = set(scores) if eligible is None else set(eligible) & set(scores)
    front = Frontier()
    for cid in sorted(allowed):
        for key, score in scores[cid].items():
            best = front.best.get(key)
            if best is None or score > best + tol:
                front.best[key] = score
                front.holders[key] = {cid}
            elif abs(score - best) <= tol:
                front.holders[key].add(cid)
    return front


def nondominated_frequencies(front: Frontier, scores: Scores, tiebreak=None) -> dict[str, int]:
    """GEPA's dominance pruning, then how many examples each survivor is best on.

    Candidates are considered from the weakest (lowest mean over the examples it holds) up; one
    is removed when every example it holds is also held by another survivor. ``tiebreak(id)``
    orders candidates of equal mean, lower preferred (default: the id): of two equals the
    preferred one is considered last, so it is the one that survives.
    """
    members = front.members()

    def by_mean(cid: str) -> float:
        return mean(scores[cid].values())

    alive = set(members)
    by_preference = sorted(members, key=tiebreak or (lambda c: c), reverse=True)
    for cid in sorted(by_preference, key=by_mean):  # stable: equal means keep the order above
        held = [k for k, h in front.holders.items() if cid in h]
        if held and all(len((front.holders[k] & alive) - {cid}) > 0 for k in held):
            alive.discard(cid)
    freq: dict[str, int] = {}
    for key, holders in front.holders.items():
        for cid in holders & alive:
            freq[cid] = freq.get(cid, 0) + 1
    return freq


def mean(values: Iterable[float]) -> float:
    """The mean, exactly rounded (``math.fsum``), 0 for none. Scores arrive in the order their
    evaluations finish, and a plain sum's last bit depends on that order: two candidates with the
    same scores then had means 0.3333333333333333 and 0.33333333333333337, the tie rules
    (``PoolState._tie_key``) never applied, and which one a run built on depended on timing."""
    vals = list(values)
    return math.fsum(vals) / len(vals) if vals else 0.0


def mean_scores(scores: Scores) -> dict[str, float]:
    return {cid: mean(v.values()) for cid, v in scores.items()}


def can_still_matter(partial: Mapping[str, float], remaining: Iterable[str], front: Frontier,
                     best_mean: float | None, n_val: int, max_score: float | None) -> bool:
    """Whether a partially validated child could still enter the frontier or beat the best mean.

    ``partial`` are its scores so far; ``remaining`` the examples not yet evaluated. With a
    known ``max_score`` per example, it matters if it already ties/beats the best on an
    evaluated example, if any remaining example is not yet at max_score on the frontier, or if
    its optimistic mean could beat ``best_mean``. Without a known maximum, it always matters.
    """
    if max_score is None:
        return True
    tol = 1e-9
    if any(s >= front.best.get(k, float("-inf")) - tol for k, s in partial.items()):
        return True
    remaining = list(remaining)
    if any(front.best.get(k, float("-inf")) < max_score - tol for k in remaining):
        return True
    optimistic = (sum(partial.values()) + max_score * len(remaining)) / max(n_val, 1)
    return best_mean is None or optimistic > best_mean + tol
