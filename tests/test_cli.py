"""The headless CLI, as a user runs it: ``python -m engine …`` in a subprocess (issue 2 §8).

The subprocesses run from a folder that is neither the repository nor the config's folder;
the reflection LM is the toy's scripted one (REFRACT_SCRIPTED_LM), the database a SQLite file.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from storage import repo
from storage.db import Database
from tests.support.harness import PYTHON, subprocess_env, toy_project


@pytest.fixture
def cli(tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = subprocess_env(tmp_path)

    def run(*args, timeout=120):
        return subprocess.run([PYTHON, "-m", "engine", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run


@pytest.fixture
def project(tmp_path):
    return toy_project(tmp_path / "project", "cli toy", '''
        [search]
        parents_per_step = 2
        proposals_per_parent = 2
        minibatch_size = 3

        [budget]
        max_metric_calls = 300
        stop_at_score = 1.0

        [reflection_lm]
        model = "scripted/toy"

        [executor]
        workers = 2
    ''').parent


def _url(tmp_path, name="cli.db"):
    return f"sqlite:///{tmp_path / name}"


def _run_id(stdout):
    m = re.search(r"^run (r[0-9a-f]+)$", stdout, re.M)
    assert m, stdout
    return m.group(1)


def test_run_prints_the_run_id_and_the_best_score_then_export_and_import(cli, project, tmp_path):
    res = cli("run", project / "run.toml", "--db", _url(tmp_path), "--quiet")  # cwd is not the config's folder
    assert res.returncode == 0, res.stderr
    run_id = _run_id(res.stdout)
    assert res.stdout.splitlines()[0] == f"run {run_id}"  # printed first, before the run ends
    assert re.search(r"^best 1\.0000 \(candidate c[0-9a-f]+\)$", res.stdout, re.M), res.stdout
    assert "status completed: reached stop_at_score 1.0" in res.stdout
    url = _url(tmp_path)
    db = Database(url)
    run = repo.get_run(db, run_id)
    assert run.status == "completed" and run.best_val_mean == 1.0 and run.owner == "cli"
    assert run.lease_owner is None
    db.dispose()

    # then: export it, import it into another database, export it again (one run, to save time)
    out = tmp_path / "run.json"
    res = cli("export", run_id, "--out", out, "--db", url)
    assert res.returncode == 0 and res.stdout.strip() == f"wrote {out}"
    doc = json.loads(out.read_text())
    assert doc["run"]["id"] == run_id and doc["best"]["val_mean"] == 1.0

    other = _url(tmp_path, "other.db")
    res = cli("import", out, "--db", other)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"run {run_id}"
    again = tmp_path / "again.json"
    assert cli("export", run_id, "--out", again, "--db", other).returncode == 0
    assert json.loads(again.read_text()) == doc

    # importing it a second time is refused with a message, not a traceback
    res = cli("import", out, "--db", other)
    assert res.returncode == 2 and f"run {run_id} already exists" in res.stderr
    assert "Traceback" not in res.stderr


def test_submit_then_worker_once_then_status(cli, project, tmp_path):
    url = _url(tmp_path)
    res = cli("submit", project / "run.toml", "--db", url, "--author", "ana")
    assert res.returncode == 0, res.stderr
    run_id = _run_id(res.stdout)

    listing = cli("status", "--db", url)
    assert listing.returncode == 0
    assert re.search(rf"^{run_id}\s+queued\s+best\s+-\s+calls\s+0\s+\$0\.0000\s+cli toy$", listing.stdout, re.M), \
        listing.stdout

    worker = cli("worker", "--db", url, "--once", "--lease", "5")
    assert worker.returncode == 0, worker.stderr

    status = cli("status", run_id, "--db", url)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("status completed: reached stop_at_score 1.0")
    assert "best 1.0000" in status.stdout
    assert re.search(r"^metric calls \d+ +cost \$0\.0000 +tokens \d+\+\d+ +running [\d.]+ s +steps \d+$", status.stdout, re.M)
    assert re.search(r"^proposals \d+: of the \d+ answered, parsed \d+%, valid \d+%, improved \d+%; \d+ asked the LM again \(a retry\)$", status.stdout, re.M)

    # a worker with nothing to do exits at once with --once
    assert cli("worker", "--db", url, "--once").returncode == 0


def test_bad_config_exits_2_with_field_and_reason(cli, project, tmp_path):
    text = (project / "run.toml").read_text().replace("parents_per_step = 2", "parents_per_step = 0")
    (project / "bad.toml").write_text(text.replace("minibatch_size = 3", "minibatch_size = 3\nselektion = \"best\""))
    res = cli("run", project / "bad.toml", "--db", _url(tmp_path))
    assert res.returncode == 2
    assert res.stderr.splitlines() == ["error: search.parents_per_step: must be at least 1, not 0",
                                       "error: search.selektion: unknown field (check the spelling)"]
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_dataset_that_does_not_parse_names_file_and_line(cli, project, tmp_path):
    rows = (project / "train.jsonl").read_text().splitlines()
    rows[3] = rows[3][:-1]  # line 4 loses its closing brace
    (project / "train.jsonl").write_text("\n".join(rows) + "\n")
    res = cli("submit", project / "run.toml", "--db", _url(tmp_path))
    assert res.returncode == 2
    assert f"dataset_file: {project / 'train.jsonl'}, line 4: not valid JSON" in res.stderr


def test_evaluator_syntax_error_names_file_and_line(cli, project, tmp_path):
    (project / "evaluator.py").write_text("def evaluate(candidate, example):\n    return (1.0\n")
    res = cli("submit", project / "run.toml", "--db", _url(tmp_path))
    assert res.returncode == 2
    assert res.stderr.startswith("error: evaluator_file: evaluator.py, line 2: "), res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_run_id_is_a_clear_message(cli, tmp_path):
    url = _url(tmp_path)
    for args in (["status", "rnope"], ["export", "rnope", "--out", tmp_path / "x.json"], ["pause", "rnope"]):
        res = cli(*args, "--db", url)
        assert res.returncode == 2, args
        assert "no run with id 'rnope'" in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_import_of_a_file_that_is_not_json(cli, tmp_path):
    (tmp_path / "junk.json").write_text("{not json")
    res = cli("import", tmp_path / "junk.json", "--db", _url(tmp_path))
    assert res.returncode == 2 and "cannot read" in res.stderr and "junk.json" in res.stderr


def test_steering_commands_are_queued_for_the_engine(cli, project, tmp_path):
    url = _url(tmp_path)
    run_id = _run_id(cli("submit", project / "run.toml", "--db", url).stdout)
    res = cli("pause", run_id, "--db", url, "--author", "ana", "--reason", "lunch")
    assert res.returncode == 0, res.stderr
    assert re.match(r"command \d+ \(pause\) queued; the step in flight is cut within seconds "
                    r"\(no engine worker has run yet",
                    res.stdout), res.stdout
    res = cli("budget", run_id, "--db", url)
    assert res.returncode == 2 and "give at least one of --max-metric-calls" in res.stderr
    res = cli("budget", run_id, "--max-metric-calls", "0", "--db", url)
    assert res.returncode == 2 and res.stderr == "error: budget.max_metric_calls: must be at least 1, not 0\n"
    db = Database(url)
    [cmd] = repo.list_commands(db, run_id)
    assert (cmd.kind, cmd.author, cmd.reason, cmd.status) == ("pause", "ana", "lunch", "pending")
    db.dispose()


def test_run_whose_evaluator_fails_everywhere_exits_1_with_the_reason(cli, project, tmp_path):
    (project / "evaluator.py").write_text("def evaluate(candidate, example):\n    return {}['missing']\n")
    res = cli("run", project / "run.toml", "--db", _url(tmp_path), "--quiet")
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "status failed: the evaluator failed on every validation example for the seed" in res.stdout
    assert "KeyError" in res.stdout


def test_branch_from_the_best_with_a_changed_setting_runs_in_the_foreground(cli, project, tmp_path):
    from tests.support.harness import run_toy, toy_config
    from tests.support.scripted_lm import uninstall_script

    url = _url(tmp_path)
    db = Database(url)
    db.create_all()
    try:  # the base run in this process: one subprocess less
        base_id, _ = run_toy(db, tmp_path / "base", toy_config(6))
    finally:
        uninstall_script()
    seed = next(c.id for c in repo.list_candidates(db, base_id) if c.origin == "seed")
    res = cli("branch", base_id, seed, "--set", "search.parents_per_step=1", "--set", "budget.max_metric_calls=200",
              "--set", "budget.max_steps=1", "--foreground", "--quiet", "--db", url)
    assert res.returncode == 0, res.stderr
    m = re.search(rf"^run (r[0-9a-f]+): a branch of run {base_id} from {seed}$", res.stdout, re.M)
    assert m, res.stdout
    assert "  search.parents_per_step: 2 → 1" in res.stdout and "  budget.max_metric_calls: 300 → 200" in res.stdout
    assert f"that run {base_id} recorded are reused, not paid" in res.stderr
    assert "status completed: step budget spent (1 of 1)" in res.stdout
    branch = repo.get_run(db, m.group(1))
    assert branch.branch_of == base_id and branch.config["search"]["parents_per_step"] == 1
    seed_evals = repo.evaluations_for(db, branch.id, [c.id for c in repo.list_candidates(db, branch.id)
                                                     if c.origin == "seed"])
    assert seed_evals and all(e.reused_from == base_id and e.cached for e in seed_evals)
    db.dispose()


def _run_args(config, tmp_path):
    import argparse

    return argparse.Namespace(config=str(config), allow_outside_files=False, db=_url(tmp_path, "inproc.db"),
                              author="cli", quiet=True)


def test_run_loads_the_evaluator_and_spawns_the_pool_while_the_lm_check_waits(project, tmp_path, monkeypatch):
    """The check of the run's LMs waits for litellm's import (seconds of CPU) in a thread of its
    own: meanwhile the evaluator is loaded in the sandbox, once (submit does not load it again),
    and the run's sandbox processes are spawned, which its pool then takes."""
    from engine.cli import run as run_cli
    from engine.sandbox import probe
    from tests.support import toy
    from tests.support.scripted_lm import install_script, uninstall_script

    stocks, loads = [], []
    real_spawn, real_load = run_cli.spawn_ahead, probe.check_evaluator
    monkeypatch.setattr(run_cli, "spawn_ahead", lambda cfg: stocks.append(real_spawn(cfg)) or stocks[-1])
    monkeypatch.setattr(probe, "check_evaluator", lambda cfg: loads.append(cfg.name) or real_load(cfg))
    install_script(toy.script)
    try:
        assert run_cli.cmd_run(_run_args(project / "run.toml", tmp_path)) == 0
    finally:
        uninstall_script()
    assert loads == ["cli toy"]
    assert stocks[0].taken == 2 and stocks[0].ready() == 0  # both workers of the run came from it; none refilled
    db = Database(_url(tmp_path, "inproc.db"))
    assert [r.status for r in repo.list_runs(db)] == ["completed"]
    db.dispose()


def test_run_stores_nothing_when_an_lm_does_not_answer_and_stops_its_spawned_processes(tmp_path, monkeypatch):
    from engine.cli import run as run_cli
    from engine.config import ConfigError

    config = toy_project(tmp_path / "p", "unanswered", '''
        [reflection_lm]
        model = "openai/nobody"
        api_base = "http://127.0.0.1:9/v1"

        [executor]
        workers = 2
    ''')
    stocks = []
    real_spawn = run_cli.spawn_ahead
    monkeypatch.setattr(run_cli, "spawn_ahead", lambda cfg: stocks.append(real_spawn(cfg)) or stocks[-1])
    with pytest.raises(ConfigError, match="reflection_lm.api_base"):
        run_cli.cmd_run(_run_args(config, tmp_path))
    assert stocks[0].ready() == 0 and stocks[0]._closed
    db = Database(_url(tmp_path, "inproc.db"))
    db.create_all()
    assert repo.list_runs(db) == []
    db.dispose()
