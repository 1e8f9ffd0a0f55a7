"""The runtime model's time to quality (engine/runtime/model.py, engine/runtime/sim.py):
improvements counted as they reach the best, merges without an LM call taking no time."""

from __future__ import annotations

from engine.runtime.model import (Latencies, Shape, improvements_to_quality, predict_run_seconds,
                                  predict_time_to_quality)

ONE, MERGE4 = Shape(), Shape(4, 1, merge_siblings=True)


def _lat(**over) -> Latencies:
    return Latencies(**{"lm": 1.0, "eval": 0.05, "accept": 1.0, "minibatch": 3, "n_val": 16, "workers": 4,
                        "merge_pass": 1.0, "merge_lm": 0.0, **over})


def test_one_by_one_takes_one_improvement_per_step():
    lat = _lat()
    seed = 4 * lat.eval  # the seed's validation pass: 16 calls on 4 workers
    step = 2 * lat.eval + lat.lm + 4 * lat.eval  # parent's minibatch, reflection, child's minibatch, validation
    for n in (1, 3, 5):
        assert abs(predict_time_to_quality(ONE, lat, 10_000, n) - (seed + n * step)) < 1e-9


def test_a_three_way_sibling_merge_carries_four_improvements_in_one_step_without_an_lm_call():
    free = predict_time_to_quality(MERGE4, _lat(), 10_000, 4)
    paid = predict_time_to_quality(MERGE4, _lat(merge_lm=1.0), 10_000, 4)
    assert abs(paid - free - 1.0) < 1e-9  # a conflict costs exactly one more LM latency
    assert predict_time_to_quality(ONE, _lat(), 10_000, 4) > 2 * free
    lost = predict_time_to_quality(MERGE4, _lat(merge_pass=0.0), 10_000, 4)  # merges never keep the gains
    assert lost > 3 * free  # then a step adds one improvement, as accept = all without a merge


def test_an_unreached_quality_is_none_and_the_overhead_is_charged_per_step():
    assert predict_time_to_quality(ONE, _lat(), 100, 50) is None  # the budget ends first
    slow = predict_time_to_quality(ONE, _lat(overhead=0.5), 10_000, 3)
    assert abs(slow - predict_time_to_quality(ONE, _lat(), 10_000, 3) - 3 * 0.5) < 1e-9
    assert predict_run_seconds(ONE, _lat(overhead=0.5), 240)[0] > predict_run_seconds(ONE, _lat(), 240)[0]


def test_improvements_to_quality_inverts_the_one_by_one_calls():
    lat = _lat(accept=0.5)
    for n in (1, 4, 9):
        calls = lat.n_val + n * (2 * lat.minibatch / 0.5 + lat.n_val)
        assert improvements_to_quality(calls, lat) == n
