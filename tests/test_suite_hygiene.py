"""The suite itself: what tests/conftest.py promises every test, however the suite was started."""

from __future__ import annotations

import signal
import subprocess

from storage.db import data_dir
from tests.support.harness import PYTHON, ROOT


def test_a_test_keeps_out_of_the_checkouts_data_folder(tmp_path):
    """Its LM cache and drafts are its own, not the checkout's (which a developer's runs use)."""
    assert data_dir() == tmp_path / "refract-data"
    assert not data_dir().resolve().is_relative_to(ROOT.resolve())


def test_ctrl_c_works_in_a_suite_started_with_sigint_ignored():
    """A background job of a shell without job control starts with SIGINT ignored; the conftest
    gives Ctrl-C back, or the Ctrl-C tests fail for a reason outside the code under test."""
    test = "tests/test_api.py::test_ctrl_c_pauses_the_run_only_after_the_step_in_flight_ends"
    done = subprocess.run([PYTHON, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", test], cwd=ROOT,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-2000:]
