"""Minibatches that carry signal (docs/design.md §2 step 2).

A child is judged on its parent's minibatch: on examples the parent already gets right there is
nothing to fix and nothing to show, so a child that fixes something elsewhere is thrown away
(with the local model, a better date regex was rejected "3 vs parent 3" that way). So a
parent's minibatch is drawn to hold examples it fails:

1. up to half of it from the training examples the parent is *known* to fail (its own recorded
   evaluations: no metric call), those used least often for its children first, so that an
   example the LM cannot fix does not hold every minibatch;
2. the rest from the epoch-shuffled order (``EpochSampler``), which keeps every example in turn
   and guards against a child that breaks what works;
3. if the parent then gets every example of it right, another epoch slice is evaluated in its
   place (at most ``REDRAWS`` times): metric calls, but no reflection wasted on a minibatch
   that cannot show an improvement. A parent that aces every slice tried gets no proposal.

"Right" means the top score: ``[search] max_score`` when set, else the highest score any
evaluation of the run has had, once some had less (1 for most evaluators, seen on the seed
already). Only a known ``max_score`` makes a parent that aces every slice go without a
proposal: a top score that is only the highest seen so far may not be the highest possible (a
help text covering half of every question's keywords), so such a parent is reflected on
anyway, on the slices tried.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.evaluation import Scored
from engine.search.sampling import EpochSampler

REDRAWS = 2
TOL = 1e-9


@dataclass
class Minibatch:
    keys: list[str]
    results: dict[str, Scored]  # the parent's scores on ``keys``
    reason: str = ""  # how it was drawn, kept on each child (the lineage, Step explained)
    aced: bool = False  # the parent scored the top score on every example tried: nothing to learn
    tried: list[str] = field(default_factory=list)  # every example evaluated to find it


def top_score(max_score, seen) -> float | None:
    """The score that counts as right: ``max_score``, else the highest of ``seen`` when some
    score seen is lower (a run whose every score is 0 so far has no known "right")."""
    if max_score is not None:
        return max_score
    seen = list(seen)
    return max(seen) if seen and min(seen) < max(seen) - TOL else None


def failing_first(known: dict[str, Scored], top: float | None, uses: dict[str, int], n: int) -> list[str]:
    """Up to ``n`` keys the parent is known to score below ``top`` on: least used first, then
    lowest score, then by key."""
    if top is None:
        return []
    failing = [k for k, r in known.items() if r.score < top - TOL]
    failing.sort(key=lambda k: (uses.get(k, 0), known[k].score, k))
    return failing[:n]


def draw(evaluate, known: dict[str, Scored], sampler: EpochSampler, n: int, top_seen, max_score,
         uses: dict[str, int]) -> Minibatch:
    """The minibatch of the parent whose epoch slice is ``sampler.batch(n)``.

    ``evaluate(keys) -> {key: Scored}`` scores the parent (known results cost nothing);
    ``known`` its recorded training results; ``top_seen`` the run's highest and lowest validation
    scores so far (for the top score when ``max_score`` is None); ``uses`` how often each example was in a minibatch of
    this parent's children (or is in one of another slot of this step)."""
    size = sampler.size
    top = top_score(max_score, list(top_seen) + [r.score for r in known.values()])
    chosen = failing_first(known, top, uses, size // 2)
    keys = chosen + [k for k in sampler.batch(n) if k not in chosen][: size - len(chosen)]
    results = evaluate(keys)
    tried = list(keys)
    redraws = 0
    others = EpochSampler(sampler.keys, size, f"{sampler.seed}:redraw")  # another order: not the next slices
    while _aced(results, top, keys) and redraws < REDRAWS and len(tried) < len(sampler.keys):
        redraws += 1
        fresh = [k for k in others.batch(n * REDRAWS + redraws - 1) if k not in tried]
        if not fresh:
            break
        more = evaluate(fresh)
        tried += fresh
        results.update(more)
        top = top_score(max_score, list(top_seen) + [r.score for r in results.values()])
        failing = [k for k in fresh if k in more and more[k].score < top - TOL]
        # the failures found take the place of examples the parent got right; the rest stays
        keys = (failing + [k for k in keys if k in results])[:size]
    results = {k: results[k] for k in keys if k in results}
    aced = _aced(results, top, keys)
    return Minibatch(keys, results, _reason(chosen, redraws, aced, tried, max_score is not None),
                     aced and max_score is not None, tried)


class Drawer:
    """Draws the minibatches of one step's (or one asynchronous proposal's) parents in a run
    (``ctx``: a ``RunContext``). Slots of one parent in a step avoid each other's known
    failures, decided in slot order before any is evaluated (so a run is the same whichever
    slot's thread is first): two slots of the best candidate otherwise took the same example
    it fails, and their children fixed the same thing."""

    def __init__(self, ctx, sampler: EpochSampler) -> None:
        self.ctx, self.sampler = ctx, sampler
        self._taken: dict[str, dict[str, int]] = {}  # parent id -> example -> planned uses this step

    def plan(self, parent, n: int):
        """Reserve slot ``n``'s examples for ``parent``; returns what ``draw`` needs, in order."""
        ctx = self.ctx
        known = ctx.evals.known(parent, ctx.train_keys)
        with ctx.state.lock:
            uses: dict[str, int] = dict(self._taken.get(parent.id, {}))
            for c in ctx.state.candidates.values():
                if parent.id in c.parent_ids:
                    for k in c.minibatch_keys or []:
                        uses[k] = uses.get(k, 0) + 1
            seen = [x for x in (ctx.state.top_score, ctx.state.low_score) if x is not None]
        top = top_score(ctx.cfg.search.max_score, seen + [r.score for r in known.values()])
        taken = self._taken.setdefault(parent.id, {})
        for k in failing_first(known, top, uses, self.sampler.size // 2) + self.sampler.batch(n):
            taken[k] = taken.get(k, 0) + 1
        return parent, n, known, seen, uses

    def draw(self, planned) -> Minibatch:
        parent, n, known, seen, uses = planned
        ctx = self.ctx
        return draw(lambda keys: ctx.evals.evaluate(parent, keys, kind="minibatch"), known, self.sampler, n, seen,
                    ctx.cfg.search.max_score, uses)


def for_parent(ctx, parent, sampler: EpochSampler, n: int) -> Minibatch:
    """The minibatch of one parent on its own (an asynchronous proposal)."""
    drawer = Drawer(ctx, sampler)
    return drawer.draw(drawer.plan(parent, n))


def _aced(results: dict[str, Scored], top: float | None, keys: list[str]) -> bool:
    return top is not None and bool(results) and all(results[k].score >= top - TOL for k in keys if k in results)


def _reason(chosen: list[str], redraws: int, aced: bool, tried: list[str], known_top: bool) -> str:
    parts = []
    if chosen:
        parts.append(f"{len(chosen)} example{'s' * (len(chosen) != 1)} the parent is known to fail "
                     f"({', '.join(chosen)}), the rest in epoch order")
    else:
        parts.append("in epoch order")
    if redraws:
        parts.append(f"drawn again {redraws}× because the parent got every example right "
                     f"({len(tried)} examples tried)")
    if aced and known_top:
        parts.append(f"the parent got all {len(tried)} examples tried right: nothing to learn from them")
    elif aced:
        parts.append(f"the parent got all {len(tried)} examples tried right (the best score seen so far)")
    return "; ".join(parts)
