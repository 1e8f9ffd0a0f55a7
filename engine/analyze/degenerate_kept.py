"""Degenerate frontier members (``engine.analyze.degenerate``'s three rules) from the frontier the
engine keeps and each candidate's validation aggregates, reading only the scores that decide.

``degenerate_members`` needs every validation score of the run: 2.5 M of them at 10,000
candidates × 500 examples, seconds to read. But for a candidate validated on every example the
rules reduce to numbers the database already holds: it holds every uncontested example, so it
holds a contested one when ``frontier_examples`` exceeds their number; it answers alike when its
lowest and highest score are equal; its mean over the examples it shares with a fully validated
reference is its ``val_mean``. What is left needs scores: the rows of candidates validated on a
part of the set (a pass cut short: few), and, only when some member answers alike, whether a
member wins a contested example that such an answer does not (one query in the database,
``storage.frontier.holding_above``).

Contract: the same candidates and rules as ``degenerate_members`` over the scores of the
candidates given (ties within ``tol``), with ``wins`` left empty (which examples a member wins
would need its row) and ``mean`` its validation mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from engine.analyze.degenerate import BELOW_REFERENCE, CONSTANT, MIN_EXAMPLES, TRIVIAL_WINS, Degenerate


@dataclass(frozen=True)
class Aggregate:
    """What the database holds of one competing candidate (accepted, not vetoed)."""

    count: int  # validation examples scored (val_count)
    mean: float
    low: Optional[float]  # val_min, val_max: None when a release before them validated it
    high: Optional[float]
    examples_held: int  # validation examples it holds the best score on, ties included (frontier_examples)


Rows = Callable[[list[str]], Mapping[str, Mapping[str, float]]]  # ids -> their scores by example
HoldingAbove = Callable[[list[str], float], set]  # (ids, above) -> those winning a contested example whose best is above


def from_aggregates(cands: Mapping[str, Aggregate], best: Mapping[str, float], contested: set[str],
                    reference: Optional[str], rows: Rows, holding_above: HoldingAbove,
                    tol: float = 1e-9) -> dict[str, Degenerate]:
    """The degenerate members among ``cands``: ``best`` per validation example over them and the
    ``contested`` examples (where their lowest score is below it; the kept frontier), ``reference``
    the candidate to beat (the seed), ``rows`` and ``holding_above`` the two reads
    (``storage.frontier.scores_of`` / ``holding_above``)."""
    n_val = len(best)
    if not n_val:
        return {}
    uncontested = n_val - len(contested)
    whole = {c for c, a in cands.items() if a.count >= n_val and a.low is not None and a.high is not None}
    need = {c for c in cands if c not in whole}
    if need and reference in cands:  # a partial mean is compared over the examples both were scored on
        need.add(reference)
    if reference in need:  # (a reference validated on part of the set: never the seed, whose pass is never cut)
        need = set(cands)
    scores = dict(rows(sorted(need))) if need else {}

    def holds(c: str) -> set[str]:  # contested examples a row-read candidate holds
        return {k for k, v in scores[c].items() if k in contested and v >= best[k] - tol}

    members, constant_at = set(), {}
    for c, a in cands.items():
        if c == reference:
            continue
        if c in whole:
            is_member = a.examples_held > uncontested
            alike = a.count >= MIN_EXAMPLES and a.high - a.low <= tol
            below_best = alike and max(best.values()) > a.high + tol
        else:
            row = scores[c]
            is_member = bool(holds(c))
            alike = len(row) >= MIN_EXAMPLES and max(row.values()) - min(row.values()) <= tol
            below_best = alike and any(best[k] > v + tol for k, v in row.items())
        if is_member:
            members.add(c)
            if below_best:
                constant_at[c] = a.high if c in whole else max(scores[c].values())
    trivial = _trivial_wins(members - set(constant_at), constant_at, cands, whole, scores, best, contested, holds,
                            rows, holding_above, tol)
    below = _below_reference(members, cands, whole, scores, reference, tol)
    out = {}
    for c in sorted(members):
        if c in constant_at:
            out[c] = Degenerate(c, CONSTANT, (), cands[c].mean, None)
        elif c in trivial:
            out[c] = Degenerate(c, TRIVIAL_WINS, (), cands[c].mean, None)
        elif c in below:
            out[c] = Degenerate(c, BELOW_REFERENCE, (), below[c][0], below[c][1])
    return out


def _trivial_wins(others: set[str], constant_at: dict[str, float], cands, whole, scores, best, contested, holds,
                  rows: Rows, holding_above: HoldingAbove, tol: float) -> set[str]:
    """Members whose contested wins are all won by one constant member too. A constant member
    validated on every example wins every contested example whose best is at most its score, so
    the highest of them wins a superset of what the others win: a member is trivial by it when it
    wins no contested example whose best is above that score. A constant member validated on part
    of the set is compared win by win, on rows read."""
    if not constant_at:
        return set()
    top = max((v for c, v in constant_at.items() if c in whole), default=None)
    out: set[str] = set()
    if top is not None:
        above = [k for k in contested if best[k] > top + tol]
        floor = min((best[k] for k in above), default=float("inf"))
        # a member whose highest score is below every such best cannot win one: no read for it
        ask = [c for c in others if c in whole and cands[c].high >= floor - tol]
        winners = holding_above(sorted(ask), top) if ask else set()
        winners |= {c for c in others if c not in whole and holds(c) & set(above)}
        out = set(others) - winners
    partial = [holds(c) for c in constant_at if c not in whole]
    if partial:
        rest = sorted(others - out)
        scores.update({c: r for c, r in rows([c for c in rest if c not in scores]).items()})
        out |= {c for c in rest if any(holds(c) <= t for t in partial)}
    return out


def _below_reference(members: Iterable[str], cands, whole, scores, reference: Optional[str],
                     tol: float) -> dict[str, tuple[float, float]]:
    """Members whose mean over the examples they share with the reference is below the
    reference's there: (their mean, the reference's)."""
    if reference not in cands:
        return {}
    out = {}
    for c in members:
        if c in whole and reference in whole:
            mine, theirs = cands[c].mean, cands[reference].mean
        else:
            mine_row, ref_row = scores[c], scores[reference]
            shared = [k for k in mine_row if k in ref_row]
            if not shared:
                continue
            mine = sum(mine_row[k] for k in shared) / len(shared)
            theirs = sum(ref_row[k] for k in shared) / len(shared)
        if mine < theirs - tol:
            out[c] = (mine, theirs)
    return out
