"""``optimize_anything(…, branch_from=(run_id, candidate_id))``: the run's config is a branch of
that run (``engine.branch.branch_config``), with this call's evaluator and whatever it gives
(datasets, objective, ``config``'s settings) changed. Its evaluations of the same text on the
same example are reused from the base run when the evaluator is the same function."""

from __future__ import annotations

from typing import Any, Optional

from storage.db import Database

from engine.branch import BranchError, branch_config, expand, merge_into
from engine.config import ConfigError, RunConfig


def chosen(branch_from: Any) -> tuple[str, Optional[list[str]]]:
    """(run id, candidate ids or None for the run's best) of a ``branch_from`` argument."""
    if isinstance(branch_from, str):
        return branch_from, None
    if isinstance(branch_from, (tuple, list)) and len(branch_from) == 2 and isinstance(branch_from[0], str):
        ids = branch_from[1]
        if ids is None or isinstance(ids, str):
            return branch_from[0], None if ids is None else [ids]
        if isinstance(ids, (list, tuple)) and all(isinstance(c, str) for c in ids):
            return branch_from[0], list(ids)
    raise ConfigError("branch_from: give (run_id, candidate_id), (run_id, [candidate ids]) or a run id (its best)")


def branch_from_config(db: Database, branch_from: Any, seed_candidate, given: dict, config: Any,
                       evaluator_text: str, reflection_model: Optional[str]) -> RunConfig:
    """The branch's config. ``given`` holds the call's other arguments (None: not given)."""
    if seed_candidate is not None:
        raise ConfigError("seed_candidate: give a seed or branch_from, not both (a branch starts from its candidates)")
    if isinstance(config, RunConfig):
        raise ConfigError("config: with branch_from, give a dict of the settings to change (a RunConfig sets them all)")
    if not isinstance(config, (dict, type(None))):
        raise ConfigError(f"config: must be a dict, not {type(config).__name__}")
    run_id, ids = chosen(branch_from)
    overrides = expand(config or {})
    merge_into(overrides, expand({k: v for k, v in given.items() if v is not None}))
    if reflection_model is not None:
        merge_into(overrides, {"reflection_lm": {"model": reflection_model}})
    overrides["evaluator"] = evaluator_text
    try:
        return branch_config(db, run_id, ids, overrides)
    except BranchError as exc:
        raise ConfigError(str(exc)) from None
