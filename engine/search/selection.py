"""Parent selection strategies (docs/design.md §2 step 1), behind one small Protocol.

A selector picks ``n`` parents from the pool view and says why each was chosen; the reason is
recorded on the step so a reviewer sees the effect of pins and vetoes. Randomness comes from
the injected ``random.Random`` so a run is reproducible for a fixed seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Protocol

from engine.search.frontier import Scores, mean, mean_scores, nondominated_frequencies
from engine.search.frontier_types import NOUNS, typed_frontier


@dataclass
class PoolView:
    """What selection may see: validation scores of accepted candidates, minus vetoed ones."""

    scores: Scores  # eligible candidate id -> example key -> score
    # candidate id -> tie-break key, lower preferred (``PoolState._tie_key``: longer lineage, then
    # content hash): ties never depend on ids, which hash the run id, so two runs with the same
    # seed make the same choices
    order: dict[str, tuple] = field(default_factory=dict)
    pinned: set[str] = field(default_factory=set)
    last_chosen: dict[str, int] = field(default_factory=dict)  # candidate id -> last step it was a parent
    step: int = 0
    # candidate id -> example key -> side_info["scores"]; and which frontier to keep over them
    objectives: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    frontier_type: str = "instance"
    seed_scores: dict[str, float] = field(default_factory=dict)  # the seed's validation scores (below_seed)
    misses: dict[str, int] = field(default_factory=dict)  # candidate id -> its latest proposals that did not improve (in a row)
    no_new_text: dict[str, int] = field(default_factory=dict)  # candidate id -> how many of those brought no new text
    heirs: dict[str, str] = field(default_factory=dict)  # candidate id -> its nearest eligible ancestor

    def key(self, cid: str) -> tuple:
        return (self.order.get(cid, (0, "")), cid)


class Selector(Protocol):
    def select(self, view: PoolView, n: int, rng: random.Random) -> list[tuple[str, str]]:
        """Return n (candidate id, reason) pairs; ids may repeat when the pool is small."""


def _weighted_distinct(weights: dict[str, float], n: int, rng: random.Random, view: PoolView) -> list[str]:
    """Sample up to n distinct ids proportionally to weight; repeat when fewer than n exist."""
    pool = {k: w for k, w in weights.items() if w > 0}
    out: list[str] = []
    while len(out) < n and pool:
        keys = sorted(pool, key=view.key)
        pick = rng.choices(keys, weights=[pool[k] for k in keys])[0]
        out.append(pick)
        del pool[pick]
    while len(out) < n and out:
        out.append(rng.choice(out[: len(weights)]))
    return out


def _frequencies(view: PoolView) -> dict[str, int]:
    """How many frontier entries (of the view's frontier type) each surviving candidate holds."""
    front = typed_frontier(view.scores, view.objectives, view.frontier_type)
    return nondominated_frequencies(front, view.scores, view.key)


# A parent's weight halves for every MISSES proposals from it in a row that did not improve: with
# a small model, a frontier member it cannot improve otherwise took most parent slots while another
# member waited (a rut), and GEPA's weights never change with what the proposals did. The half it
# loses goes to its nearest eligible ancestor, even one off the frontier: a run whose frontier is
# one member the model cannot improve (every answer its prompt unchanged) otherwise proposed from
# it until "no progress" stopped the run with a fifth of its time unused; its ancestor's feedback
# differs, and so do the texts written from it. An answer that brought no new text (a repeat, or
# the text unchanged) halves the weight by itself: the model has nothing new to say from that
# parent, and each such answer cost up to two LM calls (it and its retry) and no test.
MISSES = 3


def rut_weight(misses: int, no_new_text: int = 0) -> float:
    return 0.5 ** ((misses - no_new_text) // MISSES + no_new_text)


class ParetoSelector:
    """GEPA's default: frequency-weighted sampling over the dominance-pruned frontier, a member's
    weight halved for every ``MISSES`` proposals in a row from it that did not improve, and for
    every one of them that brought no new text."""

    def select(self, view, n, rng):
        freq = _frequencies(view)
        if not freq:
            freq = {cid: 1 for cid in view.scores}
        weights, given = dict.fromkeys(freq, 0.0), {}
        for cid, f in freq.items():
            kept = _kept(view, cid)
            weights[cid] += f * kept
            heir = view.heirs.get(cid)
            if kept < 1 and heir is not None:
                weights[heir] = weights.get(heir, 0.0) + f * (1 - kept) * _kept(view, heir)
                given.setdefault(heir, cid)
        return [(cid, self._reason(cid, freq, given, view)) for cid in _weighted_distinct(weights, n, rng, view)]

    @staticmethod
    def _reason(cid: str, freq: dict, given: dict, view) -> str:
        own = (f"frontier sample (best on {freq[cid]} {NOUNS[view.frontier_type]}"
               + (f"; weight ×{_kept(view, cid):g} after {_misses_said(view, cid)}" if _kept(view, cid) < 1 else "")
               + ")") if cid in freq else ""
        if cid not in given:
            return own
        tired = given[cid]
        lent = f"ancestor of {tired}, which had {_misses_said(view, tired)}: part of its weight"
        return f"{own}; {lent}" if own else lent


def _kept(view: PoolView, cid: str) -> float:
    return rut_weight(view.misses.get(cid, 0), view.no_new_text.get(cid, 0))


def _misses_said(view: PoolView, cid: str) -> str:
    misses, same = view.misses.get(cid, 0), view.no_new_text.get(cid, 0)
    said = f"{misses} proposals in a row without improvement"
    return said + (f" ({same} of them no new text: a repeat or the text unchanged)" if same else "")


class BestSelector:
    """Always the candidates with the highest mean validation score."""

    def select(self, view, n, rng):
        means = mean_scores(view.scores)
        ranked = sorted(means, key=lambda c: (-means[c], view.key(c)))
        picks = [ranked[i % len(ranked)] for i in range(n)] if ranked else []
        return [(cid, f"current best (mean {means[cid]:.3f})") for cid in picks]


class EpsilonGreedySelector:
    """The best candidate, or with probability epsilon a uniformly random one."""

    def __init__(self, epsilon: float = 0.1) -> None:
        self.epsilon = epsilon

    def select(self, view, n, rng):
        means = mean_scores(view.scores)
        ranked = sorted(means, key=lambda c: (-means[c], view.key(c)))
        out = []
        for _ in range(n):
            if rng.random() < self.epsilon:
                out.append((rng.choice(ranked), f"random exploration (epsilon {self.epsilon})"))
            else:
                out.append((ranked[0], f"current best (mean {means[ranked[0]]:.3f})"))
        return out


class TopKParetoSelector:
    """Uniform among the k frontier members that are best on the most examples."""

    def __init__(self, k: int = 3) -> None:
        self.k = k

    def select(self, view, n, rng):
        freq = _frequencies(view) or {c: 1 for c in view.scores}
        top = sorted(freq, key=lambda c: (-freq[c], view.key(c)))[: self.k]
        return [(cid, f"top-{self.k} frontier member") for cid in _weighted_distinct({c: 1 for c in top}, n, rng, view)]


def make_selector(name: str, epsilon: float = 0.1, k: int = 5) -> Selector:
    return {
        "pareto": ParetoSelector(),
        "best": BestSelector(),
        "epsilon_greedy": EpsilonGreedySelector(epsilon),
        "top_k_pareto": TopKParetoSelector(k),
    }[name]


def below_seed(scores: Scores, seed_scores: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Candidates whose validation mean is below the seed's on the examples both were evaluated
    on: id -> (its mean, the seed's mean there). Such a candidate is no parent (a pin still makes
    it one): with the local model, a regex that could match nothing scored 1 on every invalid
    date, held the frontier there, and every later proposal was a variant of it."""
    out = {}
    for cid, sc in scores.items():
        common = [k for k in sc if k in seed_scores]
        if common:
            own, seed = mean(sc[k] for k in common), mean(seed_scores[k] for k in common)
            if own < seed - 1e-9:
                out[cid] = (own, seed)
    return out


def select_parents(selector: Selector, view: PoolView, n: int, rng: random.Random, pin_every: int) -> list[tuple[str, str]]:
    """Apply the strategy to the candidates not ``below_seed``, then honour pins: a pinned
    candidate not chosen for ``pin_every`` steps replaces the last strategy pick. Pinned
    candidates are always eligible."""
    low = below_seed(view.scores, view.seed_scores)
    if low and len(low) < len(view.scores):
        view = replace(view, scores={c: s for c, s in view.scores.items() if c not in low})
    picks = selector.select(view, n, rng) if view.scores else []
    due = [c for c in sorted(view.pinned, key=view.key)
           if view.step - view.last_chosen.get(c, -10**9) >= pin_every and c not in {p for p, _ in picks}]
    for i, cid in enumerate(due[:n]):
        slot = len(picks) - 1 - i
        reason = f"pinned (not a parent for {pin_every}+ steps)"
        if slot >= 0:
            picks[slot] = (cid, reason)
        else:
            picks.append((cid, reason))
    return picks
