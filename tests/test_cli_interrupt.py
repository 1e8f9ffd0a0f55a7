"""Ctrl-C in ``python -m engine run``: the step in flight ends, the run is paused (not left
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




def test_ctrl_c_pauses_the_run_after_its_step_and_says_how_to_continue(sqlite_db, tmp_path, capsys):
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
    pressed: list[str] = []

    def press_ctrl_c_after_two_steps() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = repo.list_runs(sqlite_db)
            if runs and runs[0].steps_done >= 2:
                pressed.append(runs[0].id)
                _thread.interrupt_main()
                return
            time.sleep(0.1)

    presser = threading.Thread(target=press_ctrl_c_after_two_steps, daemon=True)
    presser.start()
    try:
        code = cli.main(["run", str(config), "--db", sqlite_db.url, "--quiet"])
    finally:
        uninstall_script()
    presser.join()
    err = capsys.readouterr().err
    assert pressed and code == 130, err
    run_id = pressed[0]
    run = repo.get_run(sqlite_db, run_id)
    assert run.status == "paused" and run.lease_owner is None, (run.status, run.status_reason)
    assert "Interrupted: finishing the current step" in err
    assert f"python -m engine resume {run_id}" in err  # how to continue
    pause = repo.list_commands(sqlite_db, run_id)[-1]
    assert (pause.kind, pause.status, pause.author) == ("pause", "applied", "cli")
    # nobody takes it over while it is paused; a resume makes it a worker's again
    assert leases.claim_run(sqlite_db, "worker-1", 15) is None
    send_command(sqlite_db, run_id, "resume", author="cli")
    assert leases.claim_run(sqlite_db, "worker-1", 15) == run_id
