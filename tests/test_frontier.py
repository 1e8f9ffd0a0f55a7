"""engine.search.frontier: the per-example Pareto frontier and GEPA's dominance pruning, on
hand-worked cases (every expected value below was worked out on paper from the scores)."""

from __future__ import annotations

import pytest

from engine.search.frontier import can_still_matter, compute_frontier, mean_scores, nondominated_frequencies


def _freq(scores, eligible=None):
    front = compute_frontier(scores, eligible)
    return front, nondominated_frequencies(front, {c: scores[c] for c in front.members()})


def test_best_score_and_holders_per_example():
    scores = {
        "A": {"e1": 0.9, "e2": 0.1, "e3": 0.5},
        "B": {"e1": 0.2, "e2": 0.8, "e3": 0.5},
        "C": {"e1": 0.3, "e2": 0.3, "e3": 0.4},
    }
    front = compute_frontier(scores)
    assert front.best == {"e1": 0.9, "e2": 0.8, "e3": 0.5}
    assert front.holders == {"e1": {"A"}, "e2": {"B"}, "e3": {"A", "B"}}
    assert front.members() == {"A", "B"}  # C is best nowhere


def test_ties_within_tolerance_share_an_example():
    front = compute_frontier({"A": {"e": 0.5}, "B": {"e": 0.5 + 1e-12}, "C": {"e": 0.49}})
    assert front.holders["e"] == {"A", "B"}


def test_candidate_best_only_where_another_survivor_is_best_is_dropped():
    # A is best on e1 only, and B is best there too; B also holds e2 alone; C holds e3 alone.
    scores = {
        "A": {"e1": 1.0, "e2": 0.0, "e3": 0.0},
        "B": {"e1": 1.0, "e2": 1.0, "e3": 0.0},
        "C": {"e1": 0.0, "e2": 0.0, "e3": 1.0},
    }
    front, freq = _freq(scores)
    assert front.holders["e1"] == {"A", "B"}
    assert freq == {"B": 2, "C": 1}


def test_covered_by_two_different_survivors_is_dropped_too():
    # GEPA's rule: A is removed when *every* front it is in has another survivor, even if no
    # single candidate covers all of them (B covers e1, C covers e2).
    scores = {
        "A": {"e1": 1.0, "e2": 1.0, "e3": 0.0, "e4": 0.0},
        "B": {"e1": 1.0, "e2": 0.0, "e3": 1.0, "e4": 0.0},
        "C": {"e1": 0.0, "e2": 1.0, "e3": 0.0, "e4": 1.0},
    }
    _, freq = _freq(scores)
    # weakest first: all three have mean 0.5, ties broken by id, so A is examined first and dropped
    assert freq == {"B": 2, "C": 2}


def test_pruning_is_weakest_first_so_the_stronger_of_two_redundant_candidates_survives():
    # A and B hold exactly the same example; B has the higher mean, so A (weaker) goes.
    scores = {"A": {"e1": 1.0, "e2": 0.0}, "B": {"e1": 1.0, "e2": 0.2}, "C": {"e1": 0.0, "e2": 0.9}}
    _, freq = _freq(scores)
    assert freq == {"B": 1, "C": 1}


def test_identical_candidates_keep_exactly_one():
    scores = {"B": {"e1": 1.0, "e2": 0.5}, "A": {"e1": 1.0, "e2": 0.5}}
    _, freq = _freq(scores)
    assert freq == {"A": 2}  # equal means: the lower id is preferred, so B is examined (and dropped) first


def test_identical_candidates_keep_the_preferred_one():
    scores = {"A": {"e1": 1.0, "e2": 0.5}, "B": {"e1": 1.0, "e2": 0.5}, "C": {"e1": 0.0, "e2": 1.0}}
    front = compute_frontier(scores)
    rank = {"A": (0, "z"), "B": (-1, "y"), "C": (0, "a")}  # B preferred among equals
    assert nondominated_frequencies(front, scores, rank.get) == {"B": 1, "C": 1}


def test_frequencies_count_every_example_a_survivor_holds():
    scores = {
        "A": {"e1": 1, "e2": 1, "e3": 1, "e4": 0},
        "B": {"e1": 0, "e2": 0, "e3": 0, "e4": 1},
        "C": {"e1": 0, "e2": 0, "e3": 0, "e4": 0},
    }
    _, freq = _freq(scores)
    assert freq == {"A": 3, "B": 1}


def test_a_chain_of_dominance_leaves_only_the_top():
    scores = {"A": {"e1": 1, "e2": 0}, "B": {"e1": 1, "e2": 0.5}, "C": {"e1": 1, "e2": 1}}
    _, freq = _freq(scores)
    assert freq == {"C": 2}


def test_partial_validation_competes_only_where_evaluated():
    # P was validated on e1 only (e.g. a pass cut short by the budget): it holds e1 with 0.7 but
    # is not counted as 0 on e2 and e3.
    scores = {"S": {"e1": 0.5, "e2": 0.5, "e3": 0.5}, "P": {"e1": 0.7}}
    front, freq = _freq(scores)
    assert front.holders == {"e1": {"P"}, "e2": {"S"}, "e3": {"S"}}
    assert freq == {"P": 1, "S": 2}


def test_eligible_excludes_vetoed_candidates():
    scores = {"A": {"e1": 1.0, "e2": 1.0}, "B": {"e1": 0.5, "e2": 0.2}}
    front = compute_frontier(scores, eligible=["B"])
    assert front.best == {"e1": 0.5, "e2": 0.2}
    assert front.members() == {"B"}
    # an eligible id without scores is ignored, not an error
    assert compute_frontier(scores, eligible=["B", "ghost"]).members() == {"B"}


def test_empty_pool():
    front = compute_frontier({})
    assert front.best == {} and front.members() == set()
    assert nondominated_frequencies(front, {}) == {}


def test_mean_scores():
    assert mean_scores({"A": {"e1": 1.0, "e2": 0.0}, "B": {}}) == {"A": 0.5, "B": 0.0}


class TestCanStillMatter:
    FRONT = compute_frontier({"A": {"e1": 1.0, "e2": 1.0, "e3": 0.5}})

    def test_unknown_maximum_always_matters(self):
        assert can_still_matter({"e1": 0.0}, ["e2", "e3"], self.FRONT, 0.83, 3, None)

    def test_ties_the_best_on_an_evaluated_example(self):
        assert can_still_matter({"e1": 1.0}, ["e2", "e3"], self.FRONT, 0.83, 3, 1.0)

    def test_a_remaining_example_not_yet_at_the_maximum(self):
        assert can_still_matter({"e1": 0.0}, ["e3"], self.FRONT, 0.83, 3, 1.0)

    def test_hopeless(self):
        # e3 evaluated at 0.0 (< 0.5), e1/e2 remain but are already at max on the frontier,
        # and the optimistic mean (0 + 1 + 1) / 3 = 0.67 does not beat 0.83
        assert not can_still_matter({"e3": 0.0}, ["e1", "e2"], self.FRONT, 0.83, 3, 1.0)

    def test_optimistic_mean_could_beat_the_best(self):
        assert can_still_matter({"e3": 0.0}, ["e1", "e2"], self.FRONT, 0.6, 3, 1.0)


@pytest.mark.parametrize("n", [1, 5, 20])
def test_frontier_members_are_each_best_somewhere(n):
    import random

    rng = random.Random(n)
    scores = {f"c{i}": {f"e{j}": rng.choice([0, 0.5, 1]) for j in range(6)} for i in range(n)}
    front, freq = _freq(scores)
    for cid in freq:
        assert any(scores[cid][k] == front.best[k] for k in front.best)
    # every example keeps at least one surviving holder (pruning never empties a front)
    for key, holders in front.holders.items():
        assert holders & set(freq), key
