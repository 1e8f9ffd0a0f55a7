"""Is the gain real? (engine/gain.py): the held-out gain over the seed with a paired bootstrap
interval, the examples won and lost, the validation–test gap, and the minimum gain under which
approving warns (the run's own, else the team's)."""

from __future__ import annotations

import engine  # noqa: F401  first: offline litellm price map
import numpy as np
import pytest

from engine.cli import main
from engine.gain import TEAM_MIN_GAIN_ENV, held_out_gain, paired_interval
from storage import repo
from storage.db import open_db
from tests.support import toy
from tests.support.harness import run_toy, toy_config
from tests.support.scripted_lm import uninstall_script

# the best finds w0…w5; of the test words it knows two (w0, w5), and no candidate knows "zulu"
TEST = [{"id": "te0", "word": toy.WORDS[0]}, {"id": "te1", "word": toy.WORDS[5]}, {"id": "te2", "word": "zulu"}]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished toy run with a test set, shared by the tests below (they only read it)."""
    tmp = tmp_path_factory.mktemp("gain")
    db = open_db(f"sqlite:///{tmp / 'gain.db'}")
    run_id, _ = run_toy(db, tmp, toy_config(6, testset=TEST, review={"min_held_out_gain": 0.9}))
    uninstall_script()
    yield db, run_id
    db.dispose()


def test_the_interval_of_equal_differences_is_that_difference_and_is_reproducible():
    assert paired_interval(np.array([0.5] * 7)) == (0.5, 0.5)
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.2, 0.3, size=60)
    low, high = paired_interval(diffs)
    assert low < diffs.mean() < high and 0 < low  # a clear gain: the whole interval above 0
    assert paired_interval(diffs) == (low, high)  # the same every time (a fixed generator)
    low, high = paired_interval(np.array([1.0, -1.0, 0.0, 1.0, -1.0, 0.0]))
    assert low < 0 < high


def test_the_best_against_the_seed_on_the_test_set(finished, capsys):
    db, run_id = finished
    run = repo.get_run(db, run_id)
    g = held_out_gain(db, run_id)
    assert g.held_out and g.candidate_id == run.best_candidate_id and g.n == 3
    assert g.candidate_mean == pytest.approx(run.test_mean) and g.seed_mean == pytest.approx(run.seed_test_mean)
    assert sorted(g.wins) == ["te0", "te1"] and g.losses == [] and g.ties == 1  # nobody knows "zulu"
    assert g.gain == pytest.approx(2 / 3) and g.low <= g.gain <= g.high
    assert g.gap == pytest.approx(run.best_val_mean - run.test_mean)
    assert g.min_gain == 0.9 and g.min_gain_from == "run"
    warnings = " ".join(g.warnings())
    assert "below the run's [review] min_held_out_gain, +0.900" in warnings and "Only 3 example(s)" in warnings
    assert g.line().startswith(f"held-out gain of {g.candidate_id} over the seed: +0.6667 (95 % interval")
    assert main(["status", run_id, "--db", db.url]) in (0, 1)
    assert g.line() in capsys.readouterr().out  # engine status says it too


def test_a_candidate_without_test_scores_is_measured_on_validation_and_says_so(finished, monkeypatch):
    db, run_id = finished
    run = repo.get_run(db, run_id)
    other = next(c for c in repo.list_candidates(db, run_id, ["accepted"])
                 if c.origin != "seed" and c.id != run.best_candidate_id and c.val_count)
    repo.set_run_fields(db, run_id, config={**run.config, "review": {"min_held_out_gain": None}})
    monkeypatch.setenv(TEAM_MIN_GAIN_ENV, "0.05")
    try:
        g = held_out_gain(db, run_id, other.id)
        assert not g.held_out and g.gap is None and g.min_gain_from == "team" and g.min_gain == 0.05
        assert g.candidate_mean == pytest.approx(other.val_mean)
        assert g.warnings()[0].startswith("No held-out test score of this candidate")
    finally:
        repo.set_run_fields(db, run_id, config=run.config)


def test_the_report_says_whether_the_best_gain_is_real(finished):
    from engine.records.report import build_report

    db, run_id = finished
    page = build_report(db, run_id)
    assert "<h2>Is the gain real?</h2>" in page
    assert "+0.6667 on the held-out test set, over 3 examples" in page
    assert "below the run&#x27;s [review] min_held_out_gain, +0.900" in page
