"""Ctrl-C in ``python -m engine run``: the step in flight is cut, the run is paused (not left
``running`` for a worker to take over), the person is told how to continue, and a resume
lets a worker pick it up. In-process: the CLI's main thread gets the KeyboardInterrupt that a
terminal's Ctrl-C raises."""

from __future__ import annotations

import _thread
import threading
import time

from engine import cli
from engine.commands import send_command
from storage import leases, repo
from tests.support import toy
from tests.support.harness import toy_project
from tests.support.scripted_lm import install_script, uninstall_script




def _press_ctrl_c_once(ready, db, pressed: list, seconds: float) -> threading.Thread:
    """A thread that presses Ctrl-C in the main thread (as a terminal would) once ``ready(run)``
    holds for the first run, and notes (run id, when) in ``pressed``."""

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            runs = repo.list_runs(db)
            if runs and ready(runs[0]):
                pressed.append((runs[0].id, time.monotonic()))
                _thread.interrupt_main()
                return
            time.sleep(0.1)

    presser = threading.Thread(target=watch, daemon=True)
    presser.start()
    return presser


def test_ctrl_c_pauses_the_run_and_says_how_to_continue(sqlite_db, tmp_path, capsys):
    config = toy_project(tmp_path / "project", "ctrl-c", '''
        [search]
        minibatch_size = 3
        [budget]
        max_metric_calls = 100000
        [reflection_lm]
        model = "scripted/toy"
        [executor]
        workers = 2
    ''')
    install_script(toy.endless, latency=0.05)
    pressed: list[tuple[str, float]] = []
    presser = _press_ctrl_c_once(lambda run: run.steps_done >= 2, sqlite_db, pressed, 120)
    try:
        code = cli.main(["run", str(config), "--db", sqlite_db.url, "--quiet"])
    finally:
        uninstall_script()
    presser.join()
    err = capsys.readouterr().err
    assert pressed and code == 130, err
    run_id = pressed[0][0]
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "paused" and run.lease_owner is None, (run.status, run.status_reason)
    assert f"Interrupted: pausing run {run_id}; the step in flight is cut" in err
    assert f"python -m engine resume {run_id}" in err  # how to continue
    pause = repo.list_commands(sqlite_db, run_id)[-1]
    assert (pause.kind, pause.status, pause.author) == ("pause", "applied", "cli")
    # nobody takes it over while it is paused; a resume makes it a worker's again
    assert leases.claim_run(sqlite_db, "worker-1", 15) is None
    send_command(sqlite_db, run_id, "resume", author="cli")
    assert leases.claim_run(sqlite_db, "worker-1", 15) == run_id


def test_ctrl_c_cuts_a_long_reflection_instead_of_waiting_for_it(sqlite_db, tmp_path, capsys):
    """The pause that Ctrl-C sends cuts the step in flight, as a pause from the studio does: a
    reflection that would take a minute (a local model) is not waited for."""
    config = toy_project(tmp_path / "project", "ctrl-c long", '''
        [budget]
        max_metric_calls = 1000
        [reflection_lm]
        model = "scripted/toy"
    ''')
    install_script(toy.endless, latency=60)
    pressed: list[tuple[str, float]] = []
    in_flight = lambda run: any(c.status == "started" for c in repo.lm_calls_for(sqlite_db, run.id))  # noqa: E731
    presser = _press_ctrl_c_once(in_flight, sqlite_db, pressed, 60)
    try:
        code = cli.main(["run", str(config), "--db", sqlite_db.url, "--quiet"])
    finally:
        uninstall_script()
    left = time.monotonic() - pressed[0][1]
    presser.join()
    assert code == 130 and left < 15, (code, left, capsys.readouterr().err)
    run = repo.list_runs(sqlite_db)[0]
    assert run.status == "paused"
    # the reflections in flight were cut (an answer the LM cache held came back at once: done)
    statuses = [c.status for c in repo.lm_calls_for(sqlite_db, run.id)]
    assert "interrupted" in statuses and "started" not in statuses, statuses
