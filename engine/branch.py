"""Branching: a new run that starts from one or more candidates of another run (its *base run*),
with any of its settings changed.

The one entry point is ``branch_config`` (a validated draft: the base run's config, the chosen
candidates as the seed and the seed population, the overrides applied); ``branch_run`` stores
and queues it like any run (``engine.runs.submit_run``). The CLI (``python -m engine branch``),
the studio's *Branch from here* (which opens the draft in the New run form) and the Python API
(``optimize_anything(branch_from=…)``) all build their branch here.

A branch is an ordinary run whose config has a ``[branch]`` table (``engine.config_sections``);
what makes it pay nothing twice is ``engine.reuse``.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from storage import branches, repo
from storage.db import Database
from storage.errors import NotFound

from engine.access import Actor, RoleMap
from engine.config import RunConfig, parse_config
from engine.state import SINGLE

INPUTS = ("evaluator", "dataset", "valset", "testset")  # given inline or as a *_file


class BranchError(ValueError):
    """A branch that cannot be made; ``str()`` is ``field: reason``."""


def branch_config(db: Database, run_id: str, candidate_ids: Optional[Sequence[str]] = None,
                  overrides: Optional[Mapping[str, Any]] = None, base_dir: Optional[Path] = None,
                  allow_outside_files: bool = False) -> RunConfig:
    """The config of a branch of ``run_id`` from ``candidate_ids`` (default: the base run's best),
    not stored. The first candidate is the seed, the others the rest of the seed population.

    ``overrides`` change any setting, as dotted names (``{"search.parents_per_step": 4}``) or
    nested tables (``{"search": {"parents_per_step": 4}}``); ``dataset_file = "…"`` and the
    other ``*_file`` names are read against ``base_dir`` (default: the working folder). Raises
    ``BranchError`` for an unknown run or candidate, ``ConfigError`` for a setting that does not
    validate (``field: reason``, as a config file's)."""
    try:
        base = repo.get_run(db, run_id)
    except NotFound:
        raise BranchError(f"run: no run with id {run_id!r}; `python -m engine status` lists runs") from None
    ids = _chosen(base, candidate_ids)
    contents = _contents(db, run_id, ids, not RunConfig.model_validate(base.config).is_multi_component)
    data = copy.deepcopy(base.config)
    data["name"] = f"{base.name} · branch"[:200]
    data["seed_candidate"] = contents[0]
    data["branch"] = {"run": run_id, "candidates": ids, "seeds": contents[1:]}
    given = expand(overrides or {})
    merge_into(data, given)
    _inputs_as_given(data, given)
    return parse_config(data, base_dir=base_dir or Path.cwd(), allow_outside_files=allow_outside_files)


def branch_run(db: Database, run_id: str, candidate_ids: Optional[Sequence[str]] = None,
               overrides: Optional[Mapping[str, Any]] = None, owner: str = "", actor: Optional[Actor] = None,
               roles: Optional[RoleMap] = None, base_dir: Optional[Path] = None) -> str:
    """``branch_config`` stored and queued (``engine.runs.submit_run``, with its checks of the
    person and the evaluator); the new run's id."""
    from engine.runs import submit_run

    return submit_run(db, branch_config(db, run_id, candidate_ids, overrides, base_dir), owner=owner,
                      actor=actor, roles=roles)


def check_base(db: Database, cfg: RunConfig) -> None:
    """At submit: the ``[branch]`` run exists and the candidates are its own (a TOML file with a
    ``[branch]`` table may come from another database). ``BranchError`` says which is not."""
    if cfg.branch is None:
        return
    try:
        repo.get_run(db, cfg.branch.run)
    except NotFound:
        raise BranchError(f"branch.run: no run with id {cfg.branch.run!r} in this database; a branch needs its "
                          "base run (remove [branch] to start an ordinary run from this seed)") from None
    found = branches.candidates_by_id(db, cfg.branch.candidates)
    for i, cid in enumerate(cfg.branch.candidates):
        if found.get(cid, {}).get("run_id") != cfg.branch.run:
            raise BranchError(f"branch.candidates.{i}: {cid!r} is not a candidate of run {cfg.branch.run}")


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``NAME=VALUE`` strings (the CLI's ``--set``) as dotted overrides. VALUE is read as a TOML
    value (``4``, ``true``, ``0.5``, ``"text"``, ``[1, 2]``), else taken as text
    (``reflection_lm.model=openai/gpt-4.1-mini``)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise BranchError(f"--set: {item!r} is not NAME=VALUE (e.g. search.parents_per_step=4)")
        try:
            out[name] = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[name] = raw.strip()
    return out


def expand(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted names as nested tables: ``{"search.seed": 3}`` -> ``{"search": {"seed": 3}}``."""
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        *path, last = str(name).split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise BranchError(f"{name}: {part} is a setting, not a table")
        node[last] = expand(value) if isinstance(value, Mapping) else value
    return out


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config as ``{dotted name: value}``; tables are walked, lists (datasets) kept whole."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and key not in ("seed_candidate",):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


# what every branch changes by being one: left out of what a branch "changed"
BOOKKEEPING = ("name", "seed_candidate", "branch", "evaluator_file", "dataset_file", "valset_file", "testset_file")


def changes(before: Mapping[str, Any], after: Mapping[str, Any],
            skip: Sequence[str] = BOOKKEEPING) -> list[tuple[str, Any, Any]]:
    """(dotted name, value before, value after) of every setting that differs between two stored
    configs, in name order, leaving out the names in ``skip`` and the settings under them."""
    a, b = flatten(before), flatten(after)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and not any(k == s or k.startswith(s + ".") for s in skip)]


def merge_into(base: dict, over: Mapping[str, Any]) -> None:
    """Update the nested tables of ``base`` with ``over``'s, key by key."""
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_into(base[key], value)
        else:
            base[key] = value


def _inputs_as_given(data: dict, given: Mapping[str, Any]) -> None:
    """The stored config holds each input twice (the text or rows, and the file name it came
    from, for provenance); keep what the overrides name, else the stored text or rows. A prompt
    evaluator's source is generated again from its table, unless an evaluator is given."""
    for key in INPUTS:
        if f"{key}_file" in given:
            data.pop(key, None)
        else:
            data.pop(f"{key}_file", None)
    if "evaluator" in given or "evaluator_file" in given:
        data.pop("prompt_evaluator", None)
    elif data.get("prompt_evaluator"):
        data.pop("evaluator", None)
    for key in [k for k, v in data.items() if v is None]:  # unset: the default, and TOML-like
        del data[key]


def _chosen(base, candidate_ids: Optional[Sequence[str]]) -> list[str]:
    ids = list(dict.fromkeys(c.strip() for c in (candidate_ids or []) if c and c.strip()))
    if ids:
        return ids
    if not base.best_candidate_id:
        raise BranchError(f"candidate: run {base.id} has no best candidate yet; name the candidate to branch from")
    return [base.best_candidate_id]


def _contents(db: Database, run_id: str, ids: list[str], single_text: bool) -> list:
    """The texts of ``ids`` in the seed's form (one string, or the dict of components)."""
    found = branches.candidates_by_id(db, ids)
    out = []
    for cid in ids:
        row = found.get(cid)
        if row is None or row["run_id"] != run_id:
            raise BranchError(f"candidate: {cid!r} is not a candidate of run {run_id}"
                              + (f" (it belongs to run {row['run_id']})" if row else ""))
        if not row["content"]:
            raise BranchError(f"candidate: {cid} has no text (a failed proposal); branch from a candidate with a text")
        out.append(row["content"][SINGLE] if single_text else dict(row["content"]))
    return out

