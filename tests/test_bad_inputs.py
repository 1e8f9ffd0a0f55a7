"""The bad-input catalogue (issue 13): every bad input a user can give the command line, one row
each, answered with exit code 2, a ``field: reason`` line naming what was wrong, and a database
exactly as it was before.

The commands run in this process through ``engine.cli.main`` (the function ``python -m engine``
calls; two rows also go through a real subprocess), against one SQLite database holding one
queued run with a seed candidate, so steering commands have something real to refuse.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import pytest

from engine import cli
from engine.runs import examples_of, submit_run
from engine.state import SINGLE, content_hash
from storage import repo
from storage.db import open_db
from storage.models import Candidate
from tests.support import toy
from tests.support.harness import PYTHON, ROOT, subprocess_env, toy_config
from tests.support.snapshot import _snapshot

SECRET = "root:$6$secret-hash-that-must-never-be-printed"
CONFIG = textwrap.dedent('''
    name = "catalogue"
    seed_candidate = "start"
    evaluator_file = "evaluator.py"
    dataset_file = "train.jsonl"
    {extra_top}
    [search]
    parents_per_step = 2
    {search}
    [budget]
    max_metric_calls = 300
    {budget}
    [reflection_lm]
    model = "scripted/toy"
    {lm}
    [limits]
    {limits}
''')


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A project folder (config, evaluator, dataset, a secret file outside it) and a database
    with one run and its seed candidate."""
    root = tmp_path_factory.mktemp("catalogue")
    project = root / "project"
    project.mkdir()
    (project / "evaluator.py").write_text(toy.EVALUATOR)
    (project / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in toy.dataset(6)))
    (root / "secret.txt").write_text(SECRET + "\n")
    (project / "notes.txt").write_text(SECRET + "\n")
    (project / "binary.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (project / "empty.txt").write_text("   \n")
    (project / "empty.jsonl").write_text("\n\n")
    (root / "outside.jsonl").write_text('{"word": "alpha"}\n')
    url = f"sqlite:///{root / 'catalogue.db'}"
    db = open_db(url)
    run_id = submit_run(db, toy_config(4))
    seed = {SINGLE: "start"}
    repo.save_candidate(db, Candidate(id="cseed00001", run_id=run_id, content=seed, content_hash=content_hash(seed),
                                      origin="seed", status="accepted"))
    return {"root": root, "project": project, "url": url, "db": db, "run": run_id, "cand": "cseed00001"}


def _write_config(world, name="bad.toml", extra_top="", search="", budget="", lm="", limits="", evaluator=None,
                  files=None) -> str:
    project = world["project"]
    body = CONFIG.format(extra_top=extra_top, search=search, budget=budget, lm=lm, limits=limits)
    if evaluator is not None:
        (project / f"{name}.py").write_text(evaluator)
        body = body.replace('evaluator_file = "evaluator.py"', f'evaluator_file = "{name}.py"')
    for old, new in (files or {}).items():
        body = body.replace(old, new)
    (project / name).write_text(body)
    return str(project / name)


def _closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (it was free a moment ago)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# (id, how to build the argv, fragments every one of which the error output must contain)
CASES = [
    # -- the run config (submit; a few also through validate) -------------------------------------
    ("batch shape 0", lambda w: ["submit", _write_config(w, search="proposals_per_parent = 0")],
     ["error: search.proposals_per_parent: must be at least 1, not 0"]),
    ("unknown field", lambda w: ["submit", _write_config(w, search='selektion = "best"')],
     ["error: search.selektion: unknown field (check the spelling)"]),
    ("unknown choice", lambda w: ["validate", _write_config(w, search='selection = "random"')],
     ["error: search.selection: must be one of 'pareto', 'best', 'epsilon_greedy' or 'top_k_pareto', not 'random'"]),
    ("wrong type", lambda w: ["submit", _write_config(w, search='minibatch_size = "three"')],
     ["error: search.minibatch_size: must be a whole number, not 'three'"]),
    ("nan seconds", lambda w: ["submit", _write_config(w, budget="max_seconds = nan")],
     ["error: budget.max_seconds: must be a finite number, not nan"]),
    ("inf dollars", lambda w: ["validate", _write_config(w, budget="max_cost_usd = inf")],
     ["error: budget.max_cost_usd: must be a finite number, not inf"]),
    ("negative dollars", lambda w: ["submit", _write_config(w, budget="max_cost_usd = -1.0")],
     ["error: budget.max_cost_usd: must be greater than 0, not -1.0"]),
    ("budget below one step", lambda w: ["submit", _write_config(w, files={"max_metric_calls = 300": "max_metric_calls = 5"})],
     ["error: budget.max_metric_calls: 5 is too small for even one step; the minimum is 12"]),
    ("a key as api_key_env", lambda w: ["submit", _write_config(w, lm='api_key_env = "sk-abc123"')],
     ["error: reflection_lm.api_key_env: must be the NAME of an environment variable"]),
    ("temperature out of range", lambda w: ["submit", _write_config(w, lm="temperature = 5.0")],
     ["error: reflection_lm.temperature: must be at most 2, not 5.0"]),
    ("not TOML", lambda w: ["submit", str((w["project"] / "notes.txt"))],
     ["notes.txt: not valid TOML"]),
    ("config missing", lambda w: ["submit", str(w["project"] / "nope.toml")],
     ["nope.toml: cannot read: No such file or directory"]),
    ("no seed, no objective", lambda w: ["submit", _write_config(w, files={'seed_candidate = "start"': ""})],
     ["error: seed_candidate: missing; give a seed_candidate, or an objective"]),
    # -- the LMs: one short request each at submit / validate / run, before anything is stored -------
    ("nothing listens at the api_base", lambda w: ["submit", _write_config(w, files={'model = "scripted/toy"': (
        f'model = "openai/any"\napi_base = "http://127.0.0.1:{_closed_port()}/v1"')})],
     ["error: reflection_lm.api_base: nothing answers at http://127.0.0.1:", "start the server there"]),
    ("an api_base without http://", lambda w: ["submit", _write_config(w, files={'model = "scripted/toy"': (
        'model = "openai/any"\napi_base = "127.0.0.1:8000/v1"')})],
     ["error: reflection_lm.api_base: '127.0.0.1:8000/v1' needs http:// or https:// in front"]),
    ("a model litellm does not know", lambda w: ["validate", _write_config(w, extra_top='[task_lm]\nmodel = "gpt4-mini-typo"')],
     ["error: task_lm.model: 'gpt4-mini-typo' did not answer: litellm does not know its provider"]),
    # -- the evaluator file ------------------------------------------------------------------------
    ("evaluator outside the folder", lambda w: ["submit", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "/etc/shadow"'})],
     ["error: evaluator_file: /etc/shadow is outside the config's folder", "allow_outside_files = true"]),
    ("evaluator ../ outside", lambda w: ["validate", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "../secret.txt"'})],
     ["error: evaluator_file: ../secret.txt is outside the config's folder"]),
    ("outside allowed, not Python", lambda w: ["submit", "--allow-outside-files", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "../secret.txt"'})],
     ["error: evaluator_file: ../secret.txt, line 1: invalid syntax"]),
    ("evaluator not Python", lambda w: ["submit", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "notes.txt"'})],
     ["error: evaluator_file: notes.txt, line 1: invalid syntax"]),
    ("evaluator not UTF-8", lambda w: ["submit", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "binary.py"'})],
     ["error: evaluator_file: ", "binary.py: not UTF-8 text (byte 0x89 at position 0)"]),
    ("evaluator missing", lambda w: ["submit", _write_config(
        w, files={'evaluator_file = "evaluator.py"': 'evaluator_file = "gone.py"'})],
     ["error: evaluator_file: cannot read ", "gone.py: No such file or directory"]),
    ("no evaluate()", lambda w: ["submit", _write_config(w, evaluator="def score(c, e):\n    return 1\n")],
     ["error: evaluator_file: bad.toml.py defines no function evaluate"]),
    ("syntax error", lambda w: ["submit", _write_config(w, evaluator="def evaluate(c, e):\n    return (1\n")],
     ["error: evaluator_file: bad.toml.py, line 2: "]),
    ("evaluate() with 3 arguments", lambda w: ["submit", _write_config(
        w, evaluator="def evaluate(candidate, example, extra):\n    return 1.0\n")],
     ["error: evaluator_file: evaluate() requires 3 arguments, but this run has a dataset and it is called as "
      "evaluate(candidate, example)"]),
    ("evaluate() without the example", lambda w: ["validate", _write_config(
        w, evaluator="def evaluate(candidate):\n    return 1.0\n")],
     ["error: evaluator_file: evaluate() takes 1 argument(s), but this run has a dataset: define "
      "evaluate(candidate, example)"]),
    ("import of a missing module", lambda w: ["submit", _write_config(
        w, evaluator="import missing_module\n\ndef evaluate(candidate, example):\n    return 1.0\n")],
     ["error: evaluator_file: bad.toml.py failed to load: ModuleNotFoundError: No module named 'missing_module'"]),
    ("evaluator raises on import", lambda w: ["submit", _write_config(
        w, evaluator="raise RuntimeError('no config here')\ndef evaluate(c, e):\n    return 1\n")],
     ["error: evaluator_file: bad.toml.py failed to load: RuntimeError: no config here"]),
    # -- the dataset ------------------------------------------------------------------------------
    ("dataset line not JSON", lambda w: ["submit", _write_config(w, files={'"train.jsonl"': '"broken.jsonl"'})
                                          if (w["project"] / "broken.jsonl").write_text('{"word": "a"}\n{"word": \n')
                                          else None],
     ["error: dataset_file: ", "broken.jsonl, line 2: not valid JSON"]),
    ("dataset in an unknown format", lambda w: ["submit", _write_config(w, files={'"train.jsonl"': '"empty.txt"'})],
     ["error: dataset_file: ", "empty.txt: unknown format 'txt'; use .jsonl, .json or .csv"]),
    ("dataset empty", lambda w: ["submit", _write_config(w, files={'"train.jsonl"': '"empty.jsonl"'})],
     ["error: dataset_file: ", "empty.jsonl: the dataset is empty"]),
    ("dataset outside the folder", lambda w: ["submit", _write_config(w, files={'"train.jsonl"': '"../outside.jsonl"'})],
     ["error: dataset_file: ../outside.jsonl is outside the config's folder"]),
    ("dataset over max_rows", lambda w: ["submit", _write_config(w, limits="max_rows = 3")],
     ["error: dataset_file: ", "train.jsonl: more than 3 rows (limits.max_rows)"]),
    ("dataset over max_dataset_bytes", lambda w: ["submit", _write_config(w, limits="max_dataset_bytes = 100")],
     ["error: dataset_file: ", "train.jsonl is 1", "more than limits.max_dataset_bytes (100 bytes)"]),
    ("row over max_row_bytes", lambda w: ["validate", _write_config(w, limits="max_row_bytes = 10")],
     ["error: dataset_file: ", "train.jsonl, line 1: the row is 30 bytes, more than limits.max_row_bytes (10 bytes)"]),
    ("a limit that is no limit", lambda w: ["submit", _write_config(w, limits="max_rows = 0")],
     ["error: limits.max_rows: must be at least 1, not 0"]),
    # -- steering a run -----------------------------------------------------------------------------
    ("budget below 1", lambda w: ["budget", w["run"], "--max-metric-calls", "-5"],
     ["error: budget.max_metric_calls: must be at least 1, not -5"]),
    ("budget nan", lambda w: ["budget", w["run"], "--max-seconds", "nan"],
     ["error: budget.max_seconds: must be a finite number, not nan"]),
    ("budget nothing", lambda w: ["budget", w["run"]],
     ["error: budget: give at least one of --max-metric-calls"]),
    ("budget not a number", lambda w: ["budget", w["run"], "--max-metric-calls", "lots"],
     ["argument --max-metric-calls: invalid int value: 'lots'"]),
    ("budget of an unknown run", lambda w: ["budget", "rnope", "--max-metric-calls", "50"],
     ["error: run: no run with id 'rnope'"]),
    ("lm, nothing to change", lambda w: ["lm", w["run"]],
     ["error: lm: give at least one of --model, --api-base, --api-key-env"]),
    ("lm of a run that is not paused", lambda w: ["lm", w["run"], "--model", "openai/gpt-4.1-mini"],
     ["error: run: ", "is queued; the LM settings of a paused run can be changed: pause it first"]),
    ("edit, --file missing", lambda w: ["edit", w["run"], w["cand"], "--file", str(w["root"] / "missing.txt")],
     ["error: --file: cannot read ", "missing.txt: No such file or directory"]),
    ("inject, --file missing", lambda w: ["inject", w["run"], "--file", str(w["root"] / "missing.txt")],
     ["error: --file: cannot read ", "missing.txt: No such file or directory"]),
    ("edit, empty text", lambda w: ["edit", w["run"], w["cand"], "--file", str(w["project"] / "empty.txt")],
     ["error: content: the edited text is empty"]),
    ("edit, --file not UTF-8", lambda w: ["inject", w["run"], "--file", str(w["project"] / "binary.py")],
     ["error: --file: ", "not UTF-8 text"]),
    ("comment on an unknown run", lambda w: ["comment", "rnope", w["cand"], "looks good"],
     ["error: run: no run with id 'rnope'"]),
    ("comment on an unknown candidate", lambda w: ["comment", w["run"], "cnope", "looks good"],
     ["error: candidate: no candidate with id 'cnope'"]),
    ("empty comment", lambda w: ["comment", w["run"], w["cand"], "  "],
     ["error: text: the comment is empty"]),
    ("empty feedback", lambda w: ["feedback", w["run"], w["cand"], " "],
     ["error: text: the feedback is empty"]),
    ("pin an unknown candidate", lambda w: ["pin", w["run"], "cnope"],
     ["error: candidate: no candidate with id 'cnope'"]),
    ("veto the last parent", lambda w: ["veto", w["run"], w["cand"]],
     ["error: candidate: this is the last candidate that can be a parent"]),
    ("pause an unknown run", lambda w: ["pause", "rnope"], ["error: run: no run with id 'rnope'"]),
    ("status of an unknown run", lambda w: ["status", "rnope"], ["error: run: no run with id 'rnope'"]),
    ("export of an unknown run", lambda w: ["export", "rnope", "--out", str(w["root"] / "x.json")],
     ["error: run: no run with id 'rnope'"]),
    ("export to a folder that does not exist", lambda w: ["export", w["run"], "--out", str(w["root"] / "no" / "x.json")],
     ["error: --out: cannot write ", "No such file or directory"]),
    ("import of a file that is not JSON", lambda w: ["import", str(w["project"] / "notes.txt")],
     ["error: file: cannot read ", "notes.txt: not JSON"]),
    ("import of a missing file", lambda w: ["import", str(w["root"] / "missing.json")],
     ["error: file: cannot read ", "missing.json: No such file or directory"]),
    # -- branching a run ----------------------------------------------------------------------------
    ("branch of an unknown run", lambda w: ["branch", "rnope"], ["error: run: no run with id 'rnope'"]),
    ("branch of a run with no best yet", lambda w: ["branch", w["run"]],
     ["error: candidate: run ", "has no best candidate yet; name the candidate to branch from"]),
    ("branch from an unknown candidate", lambda w: ["branch", w["run"], "cnope"],
     ["error: candidate: 'cnope' is not a candidate of run "]),
    ("branch with a setting out of range", lambda w: ["branch", w["run"], w["cand"], "--set", "search.parents_per_step=0"],
     ["error: search.parents_per_step: must be at least 1, not 0"]),
    ("branch with a misspelt setting", lambda w: ["branch", w["run"], w["cand"], "--set", "serch.seed=2"],
     ["error: serch: unknown field (check the spelling)"]),
    ("branch with --set that is no NAME=VALUE", lambda w: ["branch", w["run"], w["cand"], "--set", "search"],
     ["error: --set: 'search' is not NAME=VALUE"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_field_and_reason_and_changes_nothing(world, case, capsys):
    _, argv_of, fragments = case
    before = _snapshot(world["db"])
    argv = argv_of(world) + ["--db", world["url"]]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse refuses malformed flags itself, with its own exit code 2
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert SECRET not in err + out and "Traceback" not in err, err
    # no help links of litellm or pydantic: only the addresses the config gave
    assert all(url.startswith("http://127.0.0.1") for url in re.findall(r"https?://[^\s)]+", err)), err
    assert _snapshot(world["db"]) == before


def test_the_real_entry_point_answers_alike(world):
    """Two rows through ``python -m engine`` in a subprocess: the same text, the same code."""
    env = subprocess_env(world["root"])
    for argv, fragment in ((["budget", world["run"], "--max-metric-calls", "-5"],
                            "error: budget.max_metric_calls: must be at least 1, not -5\n"),
                           (["submit", _write_config(world, "shadow.toml", files={
                               'evaluator_file = "evaluator.py"': 'evaluator_file = "notes.txt"'})],
                            "error: evaluator_file: notes.txt, line 1: invalid syntax\n")):
        before = _snapshot(world["db"])
        res = subprocess.run([PYTHON, "-m", "engine", *argv, "--db", world["url"]], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stderr == fragment and res.stdout == "", res.stderr
        assert _snapshot(world["db"]) == before


# -- inputs that used to crash a parser or hang a command (issue 30), on SQLite and PostgreSQL ------
def _deep_jsonl(p):
    (p / "deep.jsonl").write_text('{"word": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    return {'"train.jsonl"': '"deep.jsonl"'}


def _shallow_but_deep_jsonl(p):  # parses, but nests past the rows' limit
    (p / "nested.jsonl").write_text('{"word": "a"}\n{"word": ' + "[" * 150 + "]" * 150 + "}\n")
    return {'"train.jsonl"': '"nested.jsonl"'}


def _wide_csv(p, chars):
    (p / "wide.csv").write_text("word,note\nalpha,short\nbravo," + "x" * chars + "\n")
    return {'"train.jsonl"': '"wide.csv"'}


def _fifo(p, name):
    import os

    if not (p / name).exists():
        os.mkfifo(p / name)
    return name


FILE_CASES = [
    ("a JSONL row nested 100,000 deep", lambda p: ["submit", _project(p, files=_deep_jsonl(p))],
     ["error: dataset_file: ", "deep.jsonl, line 2: the row is nested too deeply for a JSON reader"]),
    ("a JSONL row nested past the limit", lambda p: ["submit", _project(p, files=_shallow_but_deep_jsonl(p))],
     ["error: dataset_file: ", "nested.jsonl, line 2: the row is nested more than 100 levels deep"]),
    ("a CSV field past the row limit", lambda p: ["submit", _project(p, files=_wide_csv(p, 2_000_000))],
     ["error: dataset_file: ", "wide.csv, line 3: a field is longer than limits.max_row_bytes (1.0 MB)"]),
    ("a TOML array nested 3,000 deep", lambda p: ["validate", _project(p, extra_top="deep = " + "[" * 3000 + "]" * 3000)],
     ["error: config: ", "bad.toml: nested too deeply for the TOML reader"]),
    ("a TOML file not in UTF-8", lambda p: ["submit", _latin1(p)],
     ["error: config: ", "latin1.toml: not UTF-8 text (byte 0xe9 at position 11); save the file as UTF-8"]),
    ("minibatch_size = true", lambda p: ["submit", _project(p, search="minibatch_size = true")],
     ["error: search.minibatch_size: must be a whole number, not True"]),
    ("temperature = true", lambda p: ["submit", _project(p, lm="temperature = true")],
     ["error: reflection_lm.temperature: must be a number, not True"]),
    ("a FIFO as the dataset", lambda p: ["submit", _project(p, files={'"train.jsonl"': f'"{_fifo(p, "pipe.jsonl")}"'})],
     ["error: dataset_file: ", "pipe.jsonl: a named pipe (FIFO), not a regular file"]),
    ("a FIFO as the evaluator", lambda p: ["validate", _project(p, files={'"evaluator.py"': f'"{_fifo(p, "pipe.py")}"'})],
     ["error: evaluator_file: ", "pipe.py: a named pipe (FIFO), not a regular file"]),
    ("a FIFO as the config", lambda p: ["submit", str(p / _fifo(p, "pipe.toml"))],
     ["error: config: ", "pipe.toml: a named pipe (FIFO), not a regular file"]),
    ("a folder as the dataset", lambda p: ["submit", _project(p, files={'"train.jsonl"': '"sub.jsonl"'}, mkdir="sub.jsonl")],
     ["error: dataset_file: ", "sub.jsonl: a folder, not a regular file"]),
    ("a device as the dataset", lambda p: ["submit", "--allow-outside-files", _project(
        p, files={'"train.jsonl"': '"/dev/zero"'})], ["error: dataset_file: /dev/zero: a device, not a regular file"]),
    ("a FIFO to import", lambda p: ["import", str(p / _fifo(p, "pipe.json"))],
     ["error: file: ", "pipe.json: a named pipe (FIFO), not a regular file"]),
    ("a JSON import nested 100,000 deep", lambda p: ["import", _write(p, "deep.json", "[" * 100_000 + "]" * 100_000)],
     ["error: file: cannot read ", "deep.json: nested too deeply for a JSON reader"]),
]


def _project(p, mkdir: str = "", **parts) -> str:
    if mkdir:
        (p / mkdir).mkdir(exist_ok=True)
    (p / "evaluator.py").write_text(toy.EVALUATOR)
    (p / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in toy.dataset(6)))
    return _write_config({"project": p}, **parts)


def _latin1(p) -> str:
    (p / "latin1.toml").write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))
    return str(p / "latin1.toml")


def _write(p, name: str, text: str) -> str:
    (p / name).write_text(text)
    return str(p / name)


@pytest.mark.timeout(120)  # a command that blocks on a named pipe fails here instead of hanging the suite
def test_files_that_crashed_or_hung_a_command_are_refused_at_once(db, tmp_path, capsys):
    """Every row of FILE_CASES in turn, each in a folder of its own (one database per backend)."""
    cfg = toy_config(4)
    run_id = repo.create_run(db, cfg.name, "", cfg.stored(), examples_of(cfg))  # something to keep
    before = _snapshot(db)
    for n, (name, argv_of, fragments) in enumerate(FILE_CASES):
        folder = tmp_path / f"case{n}"
        folder.mkdir()
        code = cli.main(argv_of(folder) + ["--db", db.url])
        out, err = capsys.readouterr()
        assert code == 2, (name, out, err)
        for fragment in fragments:
            assert fragment in err, (name, fragment, err)
        assert "Traceback" not in err and len(err) < 600, (name, err)
        assert _snapshot(db) == before and repo.get_run(db, run_id) is not None, name


def test_a_csv_field_longer_than_csvs_own_limit_but_within_the_row_limit_is_read(tmp_path):
    """csv refuses a field over 128 KiB by itself; here only [limits] decides."""
    from engine.datasets import load_dataset

    (tmp_path / "wide.csv").write_text("word,note\nalpha," + "x" * 200_000 + "\n")
    assert [len(r["note"]) for r in load_dataset(tmp_path / "wide.csv")] == [200_000]


def test_true_is_no_weight_of_an_assertion():
    from engine.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"prompt_evaluator\.assert\.0\.weight: must be a number, not True"):
        parse_config({"name": "p", "seed_candidate": "Classify.", "dataset": [{"text": "a"}],
                      "prompt_evaluator": {"user": "{text}", "assert": [{"type": "contains", "value": "a", "weight": True}]}})
