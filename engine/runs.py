"""Creating runs from a validated config: the one path used by the CLI and the studio."""

from __future__ import annotations

from typing import Optional

from storage import repo
from storage.db import Database
from storage.states import RunStatus

from engine.access import Actor, RoleMap, check
from engine.config import RunConfig
from engine.datasets import example_key


def examples_of(cfg: RunConfig) -> list[tuple[str, str, object]]:
    """(key, split, payload) triples. Without a valset the dataset is also the validation set
    (multi-task search); in single-task mode there is one implicit example with no payload."""
    out: list[tuple[str, str, object]] = []
    seen: set[str] = set()

    def add(rows, split):
        for i, row in enumerate(rows or []):
            key = example_key(row, split, i)
            if key in seen:  # the same id in two splits, or twice in one: keep both, distinctly
                key = f"{split}-{i}-{key}"
            seen.add(key)
            out.append((key, split, row))

    add(cfg.dataset, "train")
    add(cfg.valset, "val")
    add(cfg.testset, "test")
    if not out:  # single-task search: one implicit example, the problem itself
        out.append(("task", "val", None))
    return out


def submit_run(db: Database, cfg: RunConfig, owner: str = "", status: RunStatus = RunStatus.QUEUED,
               actor: Optional[Actor] = None, roles: Optional[RoleMap] = None, evaluator_checked: bool = False,
               held_by: Optional[tuple[str, float]] = None) -> str:
    """Store a run (config + examples) and queue it for a worker, once its evaluator has
    loaded in the sandbox and fits the mode (``engine.sandbox.probe``; ``evaluator_checked``:
    the caller has just checked it so, with no actor). Returns the run id.

    ``actor`` (the studio's signed-in person) must be an editor within the hourly run limit of
    ``roles``, checked before the evaluator is even loaded (it is code); the run's owner is then
    ``actor.name``. Without an actor, ``owner`` is trusted (the CLI, the Python API). A branch's
    base run must be in this database (``engine.branch.check_base``). ``held_by`` (worker id,
    lease seconds): stored already claimed by that worker, for a run this process runs itself
    (``storage.repo.create_run``)."""
    from engine.branch import check_base
    from engine.sandbox.probe import check_evaluator

    if actor is not None:
        check(db, actor, "create_run", roles=roles)
        owner = actor.name
    check_base(db, cfg)
    if not (evaluator_checked and actor is None):
        check_evaluator(cfg)
    return repo.create_run(db, cfg.name, owner, cfg.stored(), examples_of(cfg), status=status,
                           held_by=held_by)


def stored_config(db: Database, run_id: str) -> RunConfig:
    return RunConfig.model_validate(repo.get_run(db, run_id).config)
