"""A branch pays nothing twice: an evaluation its base run recorded of the same candidate text,
with the same evaluator, on the same example is copied instead of run again (marked cached and
``reused_from`` the base run, no metric call).

*The same evaluator* is ``evaluator_fingerprint``: the evaluator's source, the sandbox limits
that can change a result (time limit, memory, network) and, when the source names ``lm`` (or it
is a prompt evaluator), the settings of the models its ``lm()`` calls reach (the task LM and the
judge, else the reflection LM). A branch that changed any of them reuses nothing. *The same
example* is the same payload (its JSON), whatever its key or split, so a branch with other
splits of the same rows still reuses. The base run's own base runs count too, as long as the
evaluator stays the same along the way.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Optional

from storage import branches
from storage.db import Database
from storage.models import Evaluation, Example

from engine.config import RunConfig

MAX_DEPTH = 20  # base runs of base runs followed, at most (a guard against a cycle made by hand)
_NAMES_LM = re.compile(r"\blm\b")
_ANSWER_SETTINGS = ("model", "api_base", "temperature", "max_tokens", "kwargs")  # what changes an LM's answer


def evaluator_fingerprint(cfg: RunConfig) -> str:
    """What decides an evaluation's result besides the candidate and the example, hashed."""
    ex = cfg.executor
    parts: dict = {"evaluator": cfg.evaluator, "limits": [ex.timeout_seconds, ex.memory_mb, ex.network]}
    if cfg.prompt_evaluator is not None or _NAMES_LM.search(cfg.evaluator):
        for name, lm in (("task", cfg.task_lm), ("judge", cfg.judge_lm)):
            chosen = (lm or cfg.reflection_lm).model_dump(mode="json")
            parts[name] = {k: chosen[k] for k in _ANSWER_SETTINGS}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def reuse_bases(db: Database, cfg: RunConfig) -> tuple[list[str], str]:
    """(the runs whose evaluations this branch may reuse, nearest first; why none or fewer can
    be, or ""). Empty for a run that is no branch."""
    if cfg.branch is None:
        return [], ""
    mine, bases, note = evaluator_fingerprint(cfg), [], ""
    run_id = cfg.branch.run
    while run_id and run_id not in bases and len(bases) < MAX_DEPTH:
        stored = branches.run_configs(db, [run_id]).get(run_id)
        if stored is None:
            note = f"run {run_id} is not in this database (deleted, or this run was imported): nothing of it is reused"
            break
        base = RunConfig.model_validate(stored)
        if evaluator_fingerprint(base) != mine:
            note = (f"the evaluator differs from run {run_id}'s (its source, its limits or the models its lm() calls "
                    "reach): its evaluations are not reused")
            break
        bases.append(run_id)
        run_id = base.branch.run if base.branch else None
    return bases, note


def payload_key(payload) -> str:
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)


class BaseEvaluations:
    """The evaluations of ``bases`` that this run may copy: ``find`` maps this run's example
    pks to a base run's evaluation of the same content on the same example (nearest base
    run first). Reads the base runs' examples once, then one statement per ``find``."""

    def __init__(self, db: Database, bases: list[str], examples: dict[str, Example]) -> None:
        self.db, self.bases = db, list(bases)
        rank = {rid: i for i, rid in enumerate(self.bases)}
        by_payload: dict[str, list[tuple[int, int]]] = {}
        for rid, pk, payload in branches.example_payloads(db, self.bases):
            by_payload.setdefault(payload_key(payload), []).append((rank[rid], pk))
        # this run's example pk -> the base runs' pks of the same payload, nearest base run first
        self._same: dict[int, list[int]] = {
            ex.pk: [pk for _, pk in sorted(by_payload.get(payload_key(ex.payload), []))] for ex in examples.values()}
        self._rank = rank

    def find(self, content_hash: str, pks: list[int]) -> dict[int, Evaluation]:
        wanted = {pk: self._same.get(pk) or [] for pk in pks}
        theirs = [o for found in wanted.values() for o in found]
        if not theirs:
            return {}
        rows = branches.evaluations_of_content(self.db, self.bases, content_hash, theirs)
        best: dict[int, Evaluation] = {}
        for ev in sorted(rows, key=lambda e: self._rank[e.run_id]):
            best.setdefault(ev.example_pk, ev)
        out: dict[int, Evaluation] = {}
        for pk, found in wanted.items():
            hit = next((best[o] for o in found if o in best), None)
            if hit is not None:
                out[pk] = hit
        return out


def base_evaluations(db: Database, cfg: RunConfig, examples: dict[str, Example]) -> Optional[BaseEvaluations]:
    """What the evaluation service of this run reuses; None for a run that is no branch (or
    whose base runs' evaluations cannot be reused)."""
    bases, _ = reuse_bases(db, cfg)
    return BaseEvaluations(db, bases, examples) if bases else None
