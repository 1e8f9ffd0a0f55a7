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


def test_a_runner_ups_pass_is_cheap_when_it_costs_a_quarter_of_a_reflection_at_most():
    """engine.search.runner_up: a regex or unit test pays, a task-LM evaluation seldom, an instant LM never."""
    from types import SimpleNamespace

    from engine.search.runner_up import pass_is_cheap

    def ctx(lm: float, ev: float, n_val: int, workers: int = 1):
        return SimpleNamespace(evals=SimpleNamespace(pace=_pace(lm, ev), executor=SimpleNamespace(workers=workers)),
                               val_keys=[f"val-{i}" for i in range(n_val)])

    assert pass_is_cheap(ctx(20.0, 0.002, 16))  # a regex: 0.03 s of 5 s
    assert pass_is_cheap(ctx(20.0, 0.09, 16))  # a unit test in a fresh process: 1.4 s
    assert not pass_is_cheap(ctx(20.0, 3.0, 10))  # a task-LM call per example: 30 s
    assert pass_is_cheap(ctx(20.0, 3.0, 10, workers=8))  # eight at a time: 30 s of calls within 8 × 5 s
    assert not pass_is_cheap(ctx(1.0, 0.001, 16))  # a reflection under 2 s: the next proposal is as cheap
