"""engine.search.selection and engine.search.sampling: parent sampling and epoch minibatches.

Proportions are measured over many draws from a seeded ``random.Random`` so the tests are
deterministic; the tolerances are several standard deviations wide.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from engine.search.sampling import EpochSampler
from engine.search.selection import (
    BestSelector,
    EpsilonGreedySelector,
    ParetoSelector,
    PoolView,
    TopKParetoSelector,
    make_selector,
    select_parents,
)

# Worked by hand: fronts e1 {A,B}, e2 {B}, e3 {C}, e4 {B}; A is dominated (only e1, shared with
# B). Frequencies after pruning: B 3, C 1; D is best nowhere.
SCORES = {
    "A": {"e1": 1.0, "e2": 0.0, "e3": 0.0, "e4": 0.0},
    "B": {"e1": 1.0, "e2": 1.0, "e3": 0.0, "e4": 1.0},
    "C": {"e1": 0.0, "e2": 0.0, "e3": 1.0, "e4": 0.0},
    "D": {"e1": 0.5, "e2": 0.5, "e3": 0.5, "e4": 0.5},
}
DRAWS = 4000


def _draws(selector, view, n=1, draws=DRAWS, seed=0):
    rng = random.Random(seed)
    return [tuple(c for c, _ in selector.select(view, n, rng)) for _ in range(draws)]


class TestPareto:
    def test_samples_proportionally_to_frequency(self):
        counts = Counter(p[0] for p in _draws(ParetoSelector(), PoolView(SCORES)))
        assert set(counts) == {"B", "C"}  # never the dominated A, never D (best nowhere)
        assert counts["B"] / DRAWS == pytest.approx(0.75, abs=0.03)

    def test_reason_says_how_many_examples(self):
        picks = ParetoSelector().select(PoolView(SCORES), 2, random.Random(1))
        reasons = dict(picks)
        assert reasons["B"] == "frontier sample (best on 3 example(s))"
        assert reasons["C"] == "frontier sample (best on 1 example(s))"

    def test_p_parents_are_distinct_while_the_frontier_allows(self):
        for pair in _draws(ParetoSelector(), PoolView(SCORES), n=2, draws=200):
            assert sorted(pair) == ["B", "C"]

    def test_more_parents_than_frontier_members_repeats_members(self):
        for picks in _draws(ParetoSelector(), PoolView(SCORES), n=4, draws=50):
            assert len(picks) == 4 and set(picks) == {"B", "C"}

    def test_single_candidate(self):
        assert ParetoSelector().select(PoolView({"S": {"e1": 0.0}}), 3, random.Random(0)) == [
            ("S", "frontier sample (best on 1 example(s))")] * 3

    def test_same_seed_same_picks(self):
        assert _draws(ParetoSelector(), PoolView(SCORES), n=2, draws=30, seed=7) == \
            _draws(ParetoSelector(), PoolView(SCORES), n=2, draws=30, seed=7)

    def test_insertion_order_of_the_pool_does_not_change_the_picks(self):
        reordered = dict(reversed(list(SCORES.items())))
        assert _draws(ParetoSelector(), PoolView(SCORES), draws=50, seed=3) == \
            _draws(ParetoSelector(), PoolView(reordered), draws=50, seed=3)

    def test_all_tied_everywhere(self):
        # every candidate holds every example: pruning keeps one (the first by id at equal means)
        scores = {c: {"e1": 0.5, "e2": 0.5} for c in "XYZ"}
        assert {p[0] for p in _draws(ParetoSelector(), PoolView(scores), draws=100)} == {"X"}

    def test_partial_validation(self):
        # P validated on e1 only, where it beats S; S holds e2 and e3
        scores = {"S": {"e1": 0.5, "e2": 0.5, "e3": 0.5}, "P": {"e1": 0.7}}
        counts = Counter(p[0] for p in _draws(ParetoSelector(), PoolView(scores)))
        assert counts["P"] / DRAWS == pytest.approx(1 / 3, abs=0.03)


class TestBest:
    def test_highest_mean_first_then_the_next(self):
        picks = BestSelector().select(PoolView(SCORES), 2, random.Random(0))
        # means: A 0.25, B 0.75, C 0.25, D 0.5
        assert [c for c, _ in picks] == ["B", "D"]
        assert picks[0][1] == "current best (mean 0.750)"

    def test_ties_by_id_and_wrap_around(self):
        scores = {"b": {"e": 1.0}, "a": {"e": 1.0}}
        assert [c for c, _ in BestSelector().select(PoolView(scores), 3, random.Random(0))] == ["a", "b", "a"]


class TestEpsilonGreedy:
    def test_epsilon_zero_is_always_the_best(self):
        assert {p for p in _draws(EpsilonGreedySelector(0.0), PoolView(SCORES), draws=200)} == {("B",)}

    def test_epsilon_one_is_uniform(self):
        counts = Counter(p[0] for p in _draws(EpsilonGreedySelector(1.0), PoolView(SCORES)))
        assert set(counts) == set(SCORES)
        for c in SCORES:
            assert counts[c] / DRAWS == pytest.approx(0.25, abs=0.03)

    def test_exploration_rate(self):
        # B is chosen greedily (1 - eps) of the time plus eps/4 by exploration
        counts = Counter(p[0] for p in _draws(EpsilonGreedySelector(0.2), PoolView(SCORES)))
        assert counts["B"] / DRAWS == pytest.approx(0.8 + 0.2 / 4, abs=0.03)

    def test_make_selector_passes_epsilon(self):
        assert make_selector("epsilon_greedy", epsilon=0.3).epsilon == 0.3


class TestTopKPareto:
    def test_uniform_among_the_top_k_frontier_members(self):
        # surviving frequencies: B 3, C 1, E 1 (E holds e5 alone); top 2 = B and then C (id order)
        scores = {k: {**v, "e5": 0.0} for k, v in SCORES.items()}
        scores["E"] = {"e1": 0, "e2": 0, "e3": 0, "e4": 0, "e5": 1.0}
        counts = Counter(p[0] for p in _draws(TopKParetoSelector(k=2), PoolView(scores)))
        assert set(counts) == {"B", "C"}
        assert counts["B"] / DRAWS == pytest.approx(0.5, abs=0.03)

    def test_make_selector_names(self):
        assert isinstance(make_selector("pareto"), ParetoSelector)
        assert isinstance(make_selector("best"), BestSelector)
        assert isinstance(make_selector("top_k_pareto"), TopKParetoSelector)
        with pytest.raises(KeyError):
            make_selector("nope")


class TestPins:
    def _view(self, step, last_chosen=None, pinned=("D",)):
        return PoolView(SCORES, pinned=set(pinned), last_chosen=dict(last_chosen or {}), step=step)

    def test_never_chosen_pin_is_forced_at_once_into_the_last_slot(self):
        picks = select_parents(ParetoSelector(), self._view(step=0), 2, random.Random(0), pin_every=3)
        assert len(picks) == 2
        assert picks[1] == ("D", "pinned (not a parent for 3+ steps)")
        assert picks[0][0] in {"B", "C"}

    def test_pin_waits_until_pin_every_steps_have_passed(self):
        for step, due in [(5, False), (6, False), (7, True)]:
            picks = select_parents(ParetoSelector(), self._view(step, {"D": 4}), 1, random.Random(0), pin_every=3)
            assert (picks[0][0] == "D") is due, step

    def test_a_pin_the_strategy_chose_anyway_is_not_duplicated(self):
        picks = select_parents(BestSelector(), self._view(step=9, pinned=("B",)), 2, random.Random(0), pin_every=1)
        assert [c for c, _ in picks] == ["B", "D"]

    def test_more_due_pins_than_parents(self):
        picks = select_parents(ParetoSelector(), self._view(step=0, pinned=("A", "D")), 1, random.Random(0),
                               pin_every=2)
        assert picks == [("A", "pinned (not a parent for 2+ steps)")]  # D waits for the next step

    def test_pinned_candidate_chosen_within_pin_every_steps_over_a_simulated_run(self):
        """Replaying selection step by step (as the engine does), D — best nowhere, so never
        chosen by the strategy — is a parent at least once in every window of pin_every steps."""
        pin_every, last = 3, {}
        chosen_at = []
        for step in range(30):
            picks = select_parents(ParetoSelector(), self._view(step, last), 2, random.Random(step), pin_every)
            for c, _ in picks:
                last[c] = step
            if "D" in [c for c, _ in picks]:
                chosen_at.append(step)
        assert chosen_at[0] == 0
        assert all(b - a <= pin_every for a, b in zip(chosen_at, chosen_at[1:]))

    def test_empty_pool_with_a_pin(self):
        view = PoolView({}, pinned={"D"}, step=0)
        assert select_parents(ParetoSelector(), view, 2, random.Random(0), pin_every=1) == [
            ("D", "pinned (not a parent for 1+ steps)")]


class TestEpochSampler:
    KEYS = [f"k{i}" for i in range(9)]

    @pytest.mark.parametrize("n,size", [(9, 3), (8, 3), (10, 4), (5, 5), (7, 1), (6, 4)])
    def test_every_example_once_per_epoch(self, n, size):
        keys = self.KEYS[:n] + [f"x{i}" for i in range(max(0, n - 9))]
        s = EpochSampler(keys, size, seed=1)
        per_epoch = -(-len(keys) // size)  # ceil: the last batch of an epoch may be padded
        for epoch in range(3):
            batches = [s.batch(epoch * per_epoch + i) for i in range(per_epoch)]
            seen = [k for b in batches for k in b]
            assert set(seen) == set(keys), (epoch, batches)
            assert all(len(b) == size for b in batches)

    def test_batches_are_deterministic_in_seed_and_index(self):
        a, b = EpochSampler(self.KEYS, 3, seed=5), EpochSampler(self.KEYS, 3, seed=5)
        assert [a.batch(i) for i in range(10)] == [b.batch(i) for i in range(10)]
        # a resumed step asks for batch n alone, out of order: same answer
        assert EpochSampler(self.KEYS, 3, seed=5).batch(7) == a.batch(7)

    def test_different_seeds_and_epochs_shuffle_differently(self):
        s = EpochSampler(self.KEYS, 9, seed=0)
        assert len({tuple(s.batch(i)) for i in range(5)}) > 1
        assert [EpochSampler(self.KEYS, 3, seed=0).batch(i) for i in range(3)] != \
            [EpochSampler(self.KEYS, 3, seed=1).batch(i) for i in range(3)]

    def test_minibatch_larger_than_the_set_is_the_whole_set(self):
        s = EpochSampler(["a", "b"], 5, seed=0)
        assert sorted(s.batch(0)) == ["a", "b"]
        assert sorted(s.batch(1)) == ["a", "b"]


def test_a_descendant_equal_to_its_ancestor_is_preferred():
    """An asynchronous merge of the best with three more children, validated as the best's
    equal, lost the tie to the best by content hash; the next proposals forked the shorter text.
    Ties now go to the candidate with more ancestors, in the best and in Pareto sampling."""
    from engine.state import PoolState
    from storage.models import Candidate

    def cand(cid: str, parents: list[str], chash: str) -> Candidate:
        return Candidate(id=cid, run_id="r", content={"text": cid}, content_hash=chash, origin="reflection",
                         parent_ids=parents, component="text", step=1)

    state = PoolState(val_keys=["e1", "e2"])
    for c, scores in ((cand("seed", [], "5"), {"e1": 0.0, "e2": 0.5}),
                      (cand("best", ["seed"], "0"), {"e1": 1.0, "e2": 0.5}),
                      (cand("kid", ["seed"], "9"), {"e1": 0.0, "e2": 1.0}),
                      (cand("merge", ["best", "kid"], "f"), {"e1": 1.0, "e2": 0.5})):
        state.add_scored(c, scores)
    assert state.best()[0] == "merge"  # before: "best", whose hash sorts first
    picks = {p[0] for p in _draws(ParetoSelector(), state.view(2), draws=100)}
    assert picks == {"merge", "kid"}


def test_equal_scores_arriving_in_another_order_tie_as_equals():
    """In a 4×1 run two candidates had the same 16 validation scores, arrived in a different
    order: their plain sums differed in the last bit (0.3333333333333333 against
    0.33333333333333337), so the tie rules never applied and timing chose the next parent.
    Means are now exactly rounded: the descendant wins, whatever the order."""
    import random

    from engine.search.frontier import mean_scores
    from engine.state import PoolState
    from storage.models import Candidate

    values = [1 / 3, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.0, 2 / 3, 0.0, 1 / 3, 0.0, 0.5, 0.5, 0.0, 0.0]
    keys = [f"e{i:02d}" for i in range(len(values))]
    rng = random.Random(7)
    orders = [rng.sample(range(len(values)), len(values)) for _ in range(200)]
    assert len({sum(values[i] for i in o) for o in orders}) > 1  # a plain sum depends on the order
    for first, second in zip(orders[::2], orders[1::2]):
        state = PoolState(val_keys=keys)
        for cid, parents, order in (("older", [], first), ("newer", ["older"], second)):
            state.add_scored(Candidate(id=cid, run_id="r", content={"text": cid}, content_hash=cid, origin="reflection",
                                       parent_ids=parents, component="text", step=1),
                             {keys[i]: values[i] for i in order})
        means = mean_scores(state.scores)
        assert means["older"] == means["newer"]
        assert state.best()[0] == "newer"


def test_a_candidate_below_the_seed_is_no_parent_unless_pinned():
    from engine.search.selection import below_seed

    seed = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}
    # "match nothing": right on every negative example, best there, but below the seed overall
    scores = {"seed": seed, "nothing": {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0},
              "better": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}, "partial": {"a": 0.0}}
    assert set(below_seed(scores, seed)) == {"nothing", "partial"}
    assert below_seed(scores, seed)["nothing"] == (0.25, 0.5)
    view = PoolView(scores=scores, seed_scores=seed)
    for i in range(20):
        picks = select_parents(ParetoSelector(), view, 2, random.Random(i), pin_every=3)
        assert not {p for p, _ in picks} & {"nothing", "partial"}
    pinned = PoolView(scores=scores, seed_scores=seed, pinned={"nothing"}, step=5)
    assert "nothing" in {p for p, _ in select_parents(ParetoSelector(), pinned, 2, random.Random(0), pin_every=3)}


def test_a_frontier_member_whose_proposals_keep_missing_is_chosen_less_often():
    from engine.search.selection import rut_weight

    assert [rut_weight(m) for m in (0, 2, 3, 5, 6, 9)] == [1, 1, 0.5, 0.5, 0.25, 0.125]
    scores = {"a": {"x": 1.0, "y": 0.0}, "b": {"x": 0.0, "y": 1.0}}  # both on the frontier, one example each
    fresh = Counter(p for i in range(400) for p, _ in select_parents(ParetoSelector(), PoolView(scores=scores), 1,
                                                                     random.Random(i), pin_every=3))
    stuck = PoolView(scores=scores, misses={"a": 6})
    picks = [select_parents(ParetoSelector(), stuck, 1, random.Random(i), pin_every=3)[0] for i in range(400)]
    tired = Counter(p for p, _ in picks)
    assert abs(fresh["a"] - 200) < 40 and tired["a"] < 120  # a quarter of the weight: about 1 in 5
    assert any("weight ×0.25 after 6 proposals in a row without improvement" in r for p, r in picks if p == "a")


def test_misses_count_a_parents_latest_children_that_did_not_improve():
    from engine.state import PoolState
    from storage.models import Candidate

    def child(cid, step, improved, status="rejected", content=True):
        return Candidate(id=cid, run_id="r", content={"t": cid} if content else {}, content_hash=cid, origin="reflection",
                         parent_ids=["p"], step=step, improved=improved, status=status)

    state = PoolState(val_keys=["x"])
    for c in (child("c1", 0, True, "accepted"), child("c2", 1, False), child("c3", 2, False),
              child("c4", 2, False, "failed", content=False), child("c5", 3, False)):
        state.candidates[c.id] = c
    assert state._rut_counts(before_step=3)[0] == {"p": 2}  # c3 and c2, back to c1 that improved; c4 had no text
    assert state._rut_counts(before_step=4)[0] == {"p": 3}


def test_a_rut_lends_the_weight_it_loses_to_the_nearest_ancestor_even_off_the_frontier():
    """One frontier member whose every answer came back unchanged: the seed it descends from is
    dominated (off the frontier), yet takes the weight the member lost, so the run proposes from
    elsewhere instead of stopping for want of progress; the reason says why."""
    scores = {"seed": {"x": 0.0, "y": 0.0}, "child": {"x": 1.0, "y": 0.0}}
    alone = PoolView(scores=scores, heirs={"child": "seed"})
    assert {select_parents(ParetoSelector(), alone, 1, random.Random(i), pin_every=3)[0][0] for i in range(50)} == {"child"}
    stuck = PoolView(scores=scores, heirs={"child": "seed"}, misses={"child": 6})
    picks = [select_parents(ParetoSelector(), stuck, 1, random.Random(i), pin_every=3)[0] for i in range(400)]
    counts = Counter(p for p, _ in picks)
    assert 250 < counts["seed"] < 350  # three quarters of the weight
    assert next(r for p, r in picks if p == "seed") == (
        "ancestor of child, which had 6 proposals in a row without improvement: part of its weight")


def test_an_answer_that_was_no_new_version_counts_as_a_miss():
    from engine.state import PoolState
    from storage.models import Candidate

    def child(cid, step, cause, call):
        return Candidate(id=cid, run_id="r", content={}, content_hash="", origin="reflection", parent_ids=["p"],
                         step=step, status="failed", cause=cause, lm_call_id=call)

    state = PoolState(val_keys=["x"])
    for c in (child("c1", 0, "unusable", 1), child("c2", 1, "no_fence", 2), child("c3", 2, "lm_failed", 3),
              child("c4", 3, "budget", None)):
        state.candidates[c.id] = c
    assert state._rut_counts(before_step=4)[0] == {"p": 2}  # the LM's failure and the budget's are not the parent's


def test_an_answer_that_brought_no_new_text_halves_the_weight_by_itself():
    """A repeat or an unchanged answer says the model has nothing new from that parent: it halves
    the weight at once, where three tested children that missed halve it once."""
    from engine.search.selection import rut_weight
    from engine.state import PoolState
    from storage.models import Candidate

    assert [rut_weight(m, r) for m, r in ((1, 0), (1, 1), (2, 2), (4, 1), (5, 2))] == [1, 0.5, 0.25, 0.25, 0.125]

    def child(cid, step, cause, improved=False, status="failed", text=True):
        return Candidate(id=cid, run_id="r", content={"t": cid} if text else {}, content_hash=cid if text else "",
                         origin="reflection", parent_ids=["p"], step=step, improved=improved, status=status,
                         cause=cause, lm_call_id=step + 1)

    state = PoolState(val_keys=["x"])
    for c in (child("c0", 0, "repeat"), child("c1", 1, "", True, "accepted"), child("c2", 2, "no_improvement", status="rejected"),
              child("c3", 3, "repeat"), child("c4", 4, "unusable", text=False), child("c5", 5, "lm_failed", text=False)):
        state.candidates[c.id] = c
    assert state._rut_counts(before_step=6) == ({"p": 3}, {"p": 2})  # back to c1
    view = state.view(6)
    assert (view.misses, view.no_new_text) == ({"p": 3}, {"p": 2})
    scores = {"p": {"x": 1.0, "y": 0.0}, "q": {"x": 0.0, "y": 1.0}}
    stuck = PoolView(scores=scores, misses={"p": 3}, no_new_text={"p": 2})
    picks = [select_parents(ParetoSelector(), stuck, 1, random.Random(i), pin_every=3)[0] for i in range(400)]
    assert 40 < Counter(p for p, _ in picks)["p"] < 120  # a quarter of the weight: 1 in 5
    assert any(r.endswith("weight ×0.25 after 3 proposals in a row without improvement (2 of them no new text: "
                          "a repeat or the text unchanged))") for p, r in picks if p == "p")


def test_the_heir_of_a_candidate_is_its_nearest_eligible_ancestor():
    from engine.state import PoolState
    from storage.models import Candidate

    def cand(cid, parents):
        return Candidate(id=cid, run_id="r", content={"t": cid}, content_hash=cid, origin="reflection",
                         parent_ids=parents, status="accepted")

    state = PoolState(val_keys=["x"])
    for c in (cand("s", []), cand("a", ["s"]), cand("b", ["a"]), cand("c", ["b"])):
        state.candidates[c.id] = c
    assert state._heirs({"s": {}, "a": {}, "c": {}}) == {"a": "s", "c": "a"}  # b is not eligible: c's heir is a
