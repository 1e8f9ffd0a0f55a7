"""Every REFRACT_* variable is declared once (storage.settings), read through it, and a bad or
misspelt one is said as ``NAME: reason`` before a command or the studio starts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from storage import settings
from tests.support.harness import PYTHON, ROOT, subprocess_env

PRODUCT = ["engine", "storage", "ui", "pages", "scripts", "app.py", "refract_evaluator.py"]


def _product_names() -> set[str]:
    names = set()
    for top in PRODUCT:
        path = ROOT / top
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".py", ".sh", ".example", ".service")]
        for f in files:
            names |= set(re.findall(r"REFRACT_[A-Z_]*[A-Z]", f.read_text(errors="replace")))
    return names


def test_every_variable_the_product_reads_is_declared_once():
    missing = _product_names() - set(settings.SETTINGS)
    assert not missing, f"read but not declared in storage/settings.py: {sorted(missing)}"


def test_every_variable_the_readme_lists_is_declared():
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"^\| `(REFRACT_[A-Z_]+)`", readme, re.M))
    assert listed and listed <= set(settings.SETTINGS)


def test_a_bad_value_is_one_error_naming_the_variable():
    with pytest.raises(settings.SettingError, match=r"^REFRACT_WORKER_RUNS: 'many' is not a whole number$"):
        settings.value("REFRACT_WORKER_RUNS", {"REFRACT_WORKER_RUNS": "many"})
    assert settings.value("REFRACT_WORKER_RUNS", {"REFRACT_WORKER_RUNS": " 3 "}) == 3
    assert settings.value("REFRACT_WORKER_RUNS", {"REFRACT_WORKER_RUNS": ""}) is None  # blank: the default
    assert settings.problems({"REFRACT_LOCAL_CTX": "100", "REFRACT_WORKER": "yes", "REFRACT_DB": "sqlite://"}) == [
        "REFRACT_WORKER: 'yes' must be 0 or 1", "REFRACT_LOCAL_CTX: 100 is below 512"]


def test_a_misspelt_variable_is_named_with_the_one_it_resembles():
    assert settings.problems({"REFRACT_WORKER_RUN": "2", "REFRACT_SCRIPTED_LM": "x", "REFRACT_TEST_FD_LOG": "f"}) == [
        "REFRACT_WORKER_RUN: not a Refract setting (did you mean REFRACT_WORKER_RUNS?)"]


def test_the_cli_refuses_to_start_on_a_bad_value(tmp_path: Path):
    env = {**subprocess_env(tmp_path), "REFRACT_STUDIO_QUERY_SECONDS": "soon"}
    out = subprocess.run([PYTHON, "-m", "engine", "status"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: REFRACT_STUDIO_QUERY_SECONDS: 'soon' is not a number of seconds"
