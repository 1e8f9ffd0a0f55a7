"""Why a run should stop when it cannot make progress, in words that name the real cause.

- ``evaluator_failing``: most training evaluations of the candidates that can be parents
  failed (a broken evaluator, or dataset rows it cannot read): those are what the reflection LM
  reads, so no reflection can learn from them; the run stops early with the first error
  instead of spending its budget.
- ``no_progress``: several steps in a row made no proposal that could be evaluated; says what
  happened to those proposals (the LM failed, repeated itself, answered without a fence …).
- ``lm_pause_reason`` / ``paused_for_lm``: the reflection LM failed so often in a row that the
  engine paused the run (a person fixes the LM settings and resumes it); ``python -m engine run``
  exits with its own code then.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from storage import repo
from storage.db import Database
from storage.states import Cause

LM_PAUSE = "paused: the reflection LM failed"  # how the reason of a run the engine paused for its LM begins


def lm_pause_reason(failures: int, last: str, run_id: str) -> str:
    return (f"{LM_PAUSE} {failures} times in a row ({last}). Fix the LM settings (Change the LM settings on the "
            f"dashboard, or python -m engine lm {run_id} --model … --api-base …), then resume.")


def paused_for_lm(run) -> bool:
    """Did the engine (not a person) pause this run because its reflection LM kept failing?"""
    return run.status == "paused" and run.status_reason.startswith(LM_PAUSE)


# "most": more than this share of the parents' training evaluations failed …
FAILING_SHARE = 0.5
# … once at least this many were made (or a whole minibatch, if smaller): one failure says little
MIN_EVALUATIONS = 4


def evaluator_failing(db: Database, run_id: str, minibatch_size: int) -> Optional[str]:
    """The reason to stop when most training evaluations of the accepted candidates (the
    parents) failed with an error; None otherwise."""
    n, failed, first = repo.parent_training_errors(db, run_id)
    if n < min(MIN_EVALUATIONS, minibatch_size) or failed <= FAILING_SHARE * n or first is None:
        return None
    key = next((e.key for e in repo.get_examples(db, run_id) if e.pk == first.example_pk), "?")
    lines = first.error.strip().splitlines()
    error = lines[-1] if lines else first.error
    return (f"the evaluator failed on {failed} of {n} training evaluations of the candidates that can be parents, "
            f"so no reflection can learn from them; first error (candidate {first.candidate_id}, example {key}): "
            f"{error[:500]}. Fix the evaluator or the dataset and start a new run")


def no_progress(db: Database, run_id: str, last_steps: int, step_index: int) -> str:
    """Why the last ``last_steps`` steps (before ``step_index``) made no evaluable proposal."""
    recent = [c for c in repo.list_candidates(db, run_id)
              if c.origin in ("reflection", "merge", "sibling_merge") and c.step >= step_index - last_steps]
    causes = Counter(_cause(c) for c in recent if c.status in ("failed", "rejected"))
    said = ", ".join(f"{cause} ×{n}" for cause, n in causes.most_common())
    last = next((c.reason for c in reversed(recent) if c.status == "failed"), "")
    return (f"no progress: the last {last_steps} steps made no evaluable proposal"
            + (f" ({said})" if said else " (no proposal was made)") + (f"; last: {last[:300]}" if last else ""))


# how "no progress" names each stored cause (``storage.states.Cause``)
CAUSES = {Cause.LM_FAILED: "the reflection LM failed", Cause.NO_FENCE: "answers without a fenced block",
          Cause.UNUSABLE: "unusable answers", Cause.REPEAT: "repeated proposals",
          Cause.INVALID: "invalid candidates (validate)", Cause.BUDGET: "budget refusals",
          Cause.INTERRUPTED: "interrupted proposals", Cause.NO_IMPROVEMENT: "no improvement on the minibatch"}


def _cause(cand) -> str:
    """The kind of a failed or rejected proposal, without its details: its stored cause, else
    (another reason, or a row written before causes were stored) its reason's first clause."""
    if cand.cause:
        return CAUSES[Cause(cand.cause)]
    return cand.reason.split(":", 1)[0] or "other"
