"""Reading a run configuration: its TOML, the files it names (evaluator, datasets), resolved
against the config's folder and read at load time so that a stored run is self-contained, then
validated by the models of ``engine.config``; every error is ``field: reason`` (``ConfigError``)."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from engine.config import ConfigError, ConfigWarning, DataLimits, RunConfig, config_warnings


def _format_errors(exc: ValidationError) -> str:
    from engine.user_errors import validation_reasons

    return "\n".join(validation_reasons(exc))


def parse_config(data: dict, base_dir: Path | None = None, allow_outside_files: bool = False,
                 check_budget: bool = True) -> RunConfig:
    """Validate a config dict (as parsed from TOML); read the files it names. Files must lie
    in ``base_dir`` (the config's folder) or below, unless ``allow_outside_files`` (or the
    config's own ``allow_outside_files = true``) says otherwise. ``check_budget``: refuse a
    metric-call budget too small for one step (the Python API runs what a budget allows)."""
    from engine.datasets import DatasetError, load_dataset, read_text_file
    from engine.lm.keys import config_key_problems  # one check for submit, the studio's form, the Python API

    data = dict(data)
    base = (base_dir or Path.cwd()).resolve()
    problems: list[str] = []
    limits = _limits(data)
    allow = allow_outside_files or data.get("allow_outside_files") is True
    if "prompt_evaluator" in data and ("evaluator_file" in data or "evaluator" in data):
        problems.append("prompt_evaluator: give prompt_evaluator or an evaluator (evaluator_file / evaluator), not both")
    elif "prompt_evaluator" in data:
        pass  # compiled to the evaluator's source when the config is validated
    elif "evaluator_file" in data and "evaluator" in data:
        problems.append("evaluator: give evaluator_file or evaluator, not both")
    elif "evaluator_file" in data:
        path = _inside(base, data, "evaluator_file", allow, problems)
        try:
            data["evaluator"] = read_text_file(path) if path else ""
        except OSError as exc:
            problems.append(f"evaluator_file: cannot read {path}: {exc.strerror}")
        except ValueError as exc:  # names the file and the byte, never the content
            problems.append(f"evaluator_file: {exc}")
    elif "evaluator" not in data:
        problems.append("evaluator: missing; give evaluator_file = \"evaluator.py\", evaluator = \"\"\"…\"\"\", "
                        "or a [prompt_evaluator] table")
    for key in ("dataset", "valset", "testset"):
        fkey = f"{key}_file"
        if fkey in data:
            if key in data:
                problems.append(f"{key}: give {fkey} or {key}, not both")
                continue
            path = _inside(base, data, fkey, allow, problems)
            try:
                data[key] = load_dataset(path, limits) if path else None
            except DatasetError as exc:
                problems.append(f"{fkey}: {exc}")
    if problems:
        raise ConfigError("\n".join(problems))
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from None
    keys = config_key_problems(cfg)  # a key the deployment does not let go where the config sends it
    if keys:
        raise ConfigError("\n".join(keys))
    if check_budget:
        check_budget_feasible(cfg)
    for message in config_warnings(cfg):
        warnings.warn(message, ConfigWarning, stacklevel=2)
    return cfg


def _inside(base: Path, data: dict, key: str, allow: bool, problems: list[str]) -> Optional[Path]:
    """The file ``data[key]`` names, resolved against ``base``; None (and a problem) when it
    lies outside ``base`` and that is not allowed."""
    raw = str(data[key])
    path = (base / raw).resolve()
    if allow or path.is_relative_to(base):
        return path
    problems.append(f"{key}: {raw} is outside the config's folder {base}; move it there, or allow it with "
                    "allow_outside_files = true in the config (or --allow-outside-files)")
    return None


def _limits(data: dict):
    """The config's ``[limits]``, needed before its files are read (defaults when invalid: the
    validation of the whole config then reports the problem)."""
    from engine.datasets import Limits

    try:
        return Limits(**DataLimits.model_validate(data.get("limits") or {}).model_dump())
    except (ValidationError, TypeError):
        return Limits()


def check_budget_feasible(cfg: RunConfig) -> None:
    """Refuse budgets too small for even one step, naming the minimum."""
    mc = cfg.budget.max_metric_calls
    if mc is None:
        return
    n_val = len(cfg.valset or cfg.dataset or [None])
    mb = min(cfg.search.minibatch_size, len(cfg.dataset or [None]))
    minimum = n_val + 2 * mb  # seed validation + one parent minibatch + one child minibatch
    if mc < minimum:
        raise ConfigError(
            f"budget.max_metric_calls: {mc} is too small for even one step; the minimum is {minimum} "
            f"(seed on {n_val} validation example(s) + parent and child on a minibatch of {mb})"
        )


def parse_toml(text: str, name: str) -> dict:
    """A config file's TOML as a dict; ``ConfigError`` (``config: NAME: reason``) when it is not TOML
    or nests deeper than the TOML reader can follow."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {name}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config: {name}: nested too deeply for the TOML reader (arrays or tables about "
                          "1,000 levels deep); flatten it") from None


def load_config(path: str | Path, allow_outside_files: bool = False) -> RunConfig:
    from engine.datasets import read_text_file

    path = Path(path)
    try:
        text = read_text_file(path)  # a regular file, UTF-8: the error names the file and the byte
    except OSError as exc:
        raise ConfigError(f"config: {path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"config: {exc}") from None
    return parse_config(parse_toml(text, str(path)), base_dir=path.parent, allow_outside_files=allow_outside_files)
