"""The fault-injection suite (issue 13): a real run whose reflection LM is a misbehaving
OpenAI-compatible server (429, 500, hangs past the timeout, bodies that are not JSON, answers
without a fenced block, 30 % of requests) and whose engine worker is killed with SIGKILL at
random points, several times. The export must show a completed run, nothing paid twice, totals
equal to the rows, no accepted candidate lost, the budget kept and every failure recorded.
The long version is bench/faults_soak.py (figures in docs/benchmarks-faults.md)."""

from __future__ import annotations

import pytest

from tests.support.chaos import check_run, run_with_kills
from tests.support.fault_server import FAULTS, FaultServer

pytestmark = pytest.mark.faults


@pytest.fixture
def server():
    srv = FaultServer(rate=0.3, seed=13, hang_seconds=1.6).start()
    yield srv
    srv.stop()


# about a minute on a quiet 2-core machine; several times that when the machine is loaded
@pytest.mark.timeout(600)
def test_a_run_survives_kills_and_lm_faults_with_nothing_lost_or_paid_twice(tmp_path, server):
    chaos = run_with_kills(tmp_path, server, kills=3, seed=13, words=5, budget=150, timeout=540)
    figures = check_run(chaos, server)
    assert figures["kills"] == 3, figures  # the run outlived every kill
    assert all(figures["injected"][f] > 0 for f in FAULTS), figures  # each kind of fault happened
    assert figures["best"] == 1.0, figures
    assert "LM errors slowed it:" in figures["status_reason"]
    print(figures)
