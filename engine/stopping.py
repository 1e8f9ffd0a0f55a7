"""Why a run stops, other than its budgets: the rules that end a run which cannot make progress,
the stoppers beside the budgets, and the Python API's stop callbacks (GEPA's stoppers).

**Progress.**

- ``evaluator_failing``: most training evaluations of the candidates that can be parents
  failed (a broken evaluator, or dataset rows it cannot read): those are what the reflection LM
  reads, so no reflection can learn from them; the run stops early with the first error
  instead of spending its budget.
- ``no_progress``: several steps in a row made no proposal that could be evaluated; says what
  happened to those proposals (the LM failed, repeated itself, answered without a fence …).
- ``lm_pause_reason`` / ``paused_for_lm``: the reflection LM failed so often in a row that the
  engine paused the run (a person fixes the LM settings and resumes it); ``python -m engine run``
  exits with its own code then.

**Stoppers** beside the budgets (GEPA's ``MaxCandidateProposalsStopper`` and
``NoImprovementStopper``), derived from the pool and the run's counters so a resumed run
decides exactly as the original would have.

**Stop callbacks**: ``optimize_anything(stop_callbacks=…)`` takes GEPA's stoppers, and any callable of
the same shape.

GEPA calls each stopper with its ``GEPAState`` before every iteration and stops when one returns
True. Refract calls it with a ``StopState`` before every step (every proposal with the
asynchronous schedule) — with the names GEPA's own stoppers read (``i``, ``total_num_evals``,
``program_candidates``, ``program_full_scores_val_set``), so ``gepa.utils.ScoreThresholdStopper``,
``NoImprovementStopper``, ``TimeoutStopCondition``, ``FileStopper``, ``MaxMetricCallsStopper`` and
``MaxCandidateProposalsStopper`` work unchanged (``SignalStopper`` would take over the Ctrl-C that
pauses the run here: not for this API). The run then ends ``completed`` with the stopper named in
its reason.

A GEPA iteration is one proposal; a synchronous Refract step is P × K of them, so a stopper that
counts its calls (``NoImprovementStopper``) counts steps there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol

from engine.config import ConfigError
from engine.search.frontier import mean_scores
from engine.state import to_evaluator
from storage import repo
from storage.db import Database
from storage.run_figures import running_seconds
from storage.states import CandidateStatus, Cause


# ---------------------------------------------------------------- progress


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


# ---------------------------------------------------------------- stoppers beside the budgets


def steps_without_improvement(ctx) -> int:
    """Steps finished since the step that first reached the current best mean (the seed counts
    as reached before step 0)."""
    with ctx.state.lock:
        full = {c: ctx.state.scores[c] for c in ctx.state.eligible_ids() if c in ctx.state.full}
        means = mean_scores(full)
        if not means:
            return 0
        best = max(means.values())
        firsts = [ctx.state.candidates[c] for c, m in means.items() if m >= best - 1e-12]
    reached = min(-1 if c.origin == "seed" else c.step for c in firsts)
    return ctx.step_index - (reached + 1)


def stop_reason(ctx, proposals_total: int) -> Optional[str]:
    """Why the run must stop now by one of these stoppers, or None."""
    b = ctx.cfg.budget
    if b.max_candidate_proposals is not None and proposals_total >= b.max_candidate_proposals:
        return f"proposal limit reached ({proposals_total} of max_candidate_proposals = {b.max_candidate_proposals})"
    if b.max_steps_without_improvement is not None:
        idle = steps_without_improvement(ctx)
        if idle >= b.max_steps_without_improvement:
            return (f"no improvement of the best mean for {idle} steps "
                    f"(max_steps_without_improvement = {b.max_steps_without_improvement})")
    return None


# ---------------------------------------------------------------- the Python API's stop callbacks


@dataclass
class StopState:
    """The run as it stands, for a stop callback."""

    i: int  # proposals made so far, minus one (GEPA's iteration index: -1 before the first)
    total_num_evals: int  # metric calls spent
    program_candidates: list  # every validated candidate, as the evaluator receives it, oldest first
    program_full_scores_val_set: list[float]  # their validation means, in the same order
    run_id: str
    steps: int
    cost_usd: float
    seconds: float  # active seconds, as the time budget counts them
    best_score: Optional[float]  # the best validation mean so far (None before the seed is validated)


def callbacks_of(stop_callbacks: Any) -> list[Callable]:
    """``stop_callbacks`` as a list (one callable, or a sequence of them, as GEPA takes it)."""
    if stop_callbacks is None:
        return []
    found = list(stop_callbacks) if isinstance(stop_callbacks, Sequence) and not isinstance(stop_callbacks, str) \
        else [stop_callbacks]
    for i, fn in enumerate(found):
        if not callable(fn):
            raise ConfigError(f"stop_callbacks[{i}]: must be callable (state) -> bool, not {type(fn).__name__}")
    return found


def stop_state(db: Database, run_id: str) -> StopState:
    run = repo.get_run(db, run_id)
    single = not isinstance(run.config.get("seed_candidate"), dict)
    done = [c for c in repo.list_candidates(db, run_id, [CandidateStatus.ACCEPTED]) if c.val_mean is not None]
    return StopState(i=run.proposals_total - 1, total_num_evals=run.metric_calls,
                     program_candidates=[to_evaluator(c.content, single) for c in done],
                     program_full_scores_val_set=[c.val_mean for c in done], run_id=run_id, steps=run.steps_done,
                     cost_usd=run.cost_usd, seconds=running_seconds(run, search_only=True), best_score=run.best_val_mean)


def name_of(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


class StopRule(Protocol):
    """A rule the optimizer asks before each unit of work (a step; with the asynchronous schedule, a
    proposal): why the run must stop now, in words, or None. ``StopCheck`` is the Python API's."""

    def __call__(self) -> Optional[str]:
        ...


class StopCheck:
    """The optimizer's extra stopping rule: why the run stops now by one of ``callbacks``, or None.
    A callback that raises stops the run too (its error in the reason); ``error`` keeps the
    exception, which ``optimize_anything`` raises once the run is settled."""

    def __init__(self, db: Database, run_id: str, callbacks: list[Callable]) -> None:
        self.db, self.run_id, self.callbacks = db, run_id, callbacks
        self.error: Optional[BaseException] = None
        self.extra: Optional[Callable[[], Optional[str]]] = None  # a reason of the caller's session, asked first

    def __call__(self) -> Optional[str]:
        why = self.extra() if self.extra is not None else None
        if why or not self.callbacks:
            return why
        state = stop_state(self.db, self.run_id)
        for i, fn in enumerate(self.callbacks):
            try:
                stop = fn(state)
            except Exception as exc:  # noqa: BLE001 -- the caller's code: any error stops the run and is raised to them
                self.error = exc
                return f"stop_callbacks[{i}] ({name_of(fn)}) raised {type(exc).__name__}: {exc}"
            if stop:
                return f"stop_callbacks[{i}] ({name_of(fn)}) returned True"
        return None
