"""Which training examples a second look takes (engine.search.second_look), and when none."""

from engine.evaluation import Scored
from engine.search.second_look import MAX_EXAMPLES, Pace, extra_keys, looks_again

KEYS = [f"train-{i}" for i in range(12)]


def _pace(lm: float, ev: float) -> Pace:
    pace = Pace()
    pace.note_lm(lm)
    pace.note_eval(ev)
    return pace


def test_examples_the_parent_is_scored_on_come_first_and_at_most_max_examples():
    known = {"train-9", "train-10"}
    got = extra_keys("c1", KEYS, ["train-0", "train-1", "train-2"], known, _pace(20.0, 0.01), workers=1)
    assert len(got) == MAX_EXAMPLES and set(got[:2]) == known
    assert not set(got) & {"train-0", "train-1", "train-2"}
    assert got == extra_keys("c1", KEYS, ["train-0", "train-1", "train-2"], known, _pace(20.0, 0.01), workers=1)
    assert got != extra_keys("c2", KEYS, ["train-0", "train-1", "train-2"], known, _pace(20.0, 0.01), workers=1)


def test_the_share_of_a_reflection_bounds_how_many():
    # 0.25 of a 20 s reflection = 5 s; an unknown parent score costs two 2 s calls, a known one one
    assert len(extra_keys("c", KEYS, [], set(), _pace(20.0, 2.0), workers=1)) == 1
    assert len(extra_keys("c", KEYS, [], {"train-3", "train-4"}, _pace(20.0, 2.0), workers=1)) == 2
    assert len(extra_keys("c", KEYS, [], set(), _pace(20.0, 2.0), workers=4)) == 5  # four at a time
    assert extra_keys("c", KEYS, [], set(), _pace(20.0, 6.0), workers=1) == []


def test_no_second_look_before_timings_are_known_or_with_a_quick_lm():
    assert extra_keys("c", KEYS, [], set(), Pace(), workers=1) == []
    assert extra_keys("c", KEYS, [], set(), _pace(0.5, 0.001), workers=1) == []


def test_only_a_tie_with_nothing_lost_is_looked_at_again():
    p = {"a": Scored(1.0, {}, None), "b": Scored(0.0, {}, None)}
    assert looks_again(p, {"a": Scored(1.0, {}, None), "b": Scored(0.0, {}, None)}, ["a", "b"])
    assert not looks_again(p, {"a": Scored(0.0, {}, None), "b": Scored(1.0, {}, None)}, ["a", "b"])  # one fixed, one broken
    assert not looks_again(p, {"a": Scored(1.0, {}, None), "b": Scored(1.0, {}, None)}, ["a", "b"])  # improved
