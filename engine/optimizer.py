"""Running one optimization: seed, steps, human commands at step boundaries, budgets, the
held-out test pass, and the final status — every fact written to the database as it happens.

``Optimizer(db, run_id, …).run()`` returns the status the run was left in: ``completed``,
``stopped``, ``failed``, ``paused`` (a human paused it, or the reflection LM kept failing) or
``lost`` (another worker took the lease; we stop touching the run).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Callable, Optional

from storage import frontier as frontier_rows, repo
from storage.db import Database
from storage.models import Candidate, utcnow
from storage.states import CandidateStatus, Origin, RunStatus

from engine.schedules.asynchronous import AsyncSchedule
from engine.budget import FREE_LM_MIN_SHARE, Budget
from engine.commands import CommandApplier
from engine.lm.params import evaluator_lm
from engine.config import RunConfig
from engine.context import RunContext
from engine.evaluation import EvaluationService, Timeline
from engine.search.frontier_types import missing_objectives
from engine.executor import EvalTask, Executor, LazyExecutor, LMAnswer
from engine.fair_share import FairExecutor, FairShare
from engine.interrupt import INTERRUPTED, stopping_status, watch
from engine.reuse import base_evaluations
from engine.lm.journal import recover_interrupted, run_lm_failures
from engine.lm.starting import StartingLM
from engine.search.merge import try_merge
from engine.search.reflection import parse_answer, seed_prompt
from engine.state import SINGLE, PoolState, content_hash, deterministic_id
from engine.stopping import StopRule, evaluator_failing, lm_pause_reason, stop_reason
from engine.lm.providers import is_local, one_at_a_time
from engine.held_out_pass import held_out_pass
from engine.schedules.base import LOST, Decision, Schedule, StepRecord
from engine.schedules.synchronous import SyncSchedule
from engine.search.validation import step_rng, validate_child, write_frontier

log = logging.getLogger("refract.engine")
MAX_CONSECUTIVE_LM_FAILURES = 5
MAX_IDLE_STEPS = 5


def min_step_calls(cfg) -> int:
    """The fewest metric calls a useful step needs: a parent and a child on a minibatch; without
    a dataset the child alone (the one example is the validation set, where every parent was
    already evaluated), so that GEPA's smallest single-task budgets still make a proposal."""
    minibatch = min(cfg.search.minibatch_size, len(cfg.dataset or [None]))
    return minibatch if cfg.dataset is None else 2 * minibatch


class Optimizer:
    def __init__(self, db: Database, run_id: str, lm=None, executor_factory: Optional[Callable[..., Executor]] = None,
                 on_step: Optional[Callable[[RunContext], None]] = None, share: Optional[FairShare] = None,
                 stock=None, stop_check: Optional[StopRule] = None) -> None:
        self.db, self.run_id = db, run_id
        self.stock = stock  # the worker's engine.sandbox.warm.WarmStock, if it keeps one
        self.share = share  # the worker's evaluation share, when it runs several runs at once
        self.lm = lm
        self.executor_factory = executor_factory
        self.on_step = on_step
        self.stop_check = stop_check  # a Python caller's stop_callbacks (engine.stopping): why to stop, or None
        self.stop_event = threading.Event()  # set by the worker when the lease is lost
        self._watching = threading.Event()  # set: the interrupt watcher ends
        self._ctx: Optional[RunContext] = None  # the running run's context, once it is built

    # -- setup ---------------------------------------------------------------------------

    def _context(self) -> RunContext:
        from engine.sandbox import make_executor

        recover_interrupted(self.db, self.run_id)  # before the totals are read: their estimates count
        run = repo.get_run(self.db, self.run_id)
        cfg = RunConfig.model_validate(run.config)
        examples = {ex.key: ex for ex in repo.get_examples(self.db, self.run_id)}
        by_split = {s: [k for k, ex in examples.items() if ex.split == s] for s in ("train", "val", "test")}
        val_keys = by_split["val"] or by_split["train"]
        train_keys = by_split["train"] or val_keys
        single = not cfg.is_multi_component
        components = [SINGLE] if single else list(cfg.seed_candidate)
        # built (litellm imported and warmed) while the pool starts and the seed is evaluated
        lm = self.lm or StartingLM((cfg.reflection_lm.model, cfg.task_lm.model if cfg.task_lm else ""))
        budget = Budget(cfg.budget, run.metric_calls, run.cost_usd, run.seconds)
        timeline = Timeline()
        steps_done = repo.completed_steps(self.db, self.run_id)
        state = PoolState.load(self.db, self.run_id, val_keys, before_step=steps_done)
        ctx = RunContext(db=self.db, run_id=self.run_id, cfg=cfg, lm=lm, evals=None, state=state, budget=budget,
                         timeline=timeline, examples=examples, train_keys=train_keys, val_keys=val_keys,
                         test_keys=by_split["test"], single_text=single, components=components,
                         step_index=steps_done, stop_event=self.stop_event)
        factory = self.executor_factory or functools.partial(make_executor, stock=self.stock)
        handler = self._task_lm_handler(ctx)
        make = lambda: factory(cfg.executor, cfg.evaluator, handler)  # noqa: E731
        if self.share is not None:
            share = self.share
            executor = LazyExecutor(lambda: FairExecutor(share, self.run_id, make(), cfg.executor.workers))
        else:
            executor = LazyExecutor(make)
        ctx.evals = EvaluationService(self.db, self.run_id, executor, budget, examples, single, timeline,
                                      opt_state_k=cfg.search.best_example_evals_k if "opt_state" in cfg.evaluator else 0,
                                      interrupt=ctx.interrupt, base=base_evaluations(self.db, cfg, examples))
        state.frontier_type = cfg.search.frontier
        keep_frontier(ctx)
        return ctx

    def _task_lm_handler(self, ctx: RunContext):
        """The evaluator's ``lm()``: the engine makes the call with its key, records it, and
        charges it to the run and to that evaluation."""

        def handle(messages: list, model: Optional[str], params: dict, task: EvalTask) -> LMAnswer:
            lm_cfg, purpose = evaluator_lm(ctx.cfg, model, params)
            testing = task.kind == "test"  # the held-out audit: outside the search's budgets
            if not testing and not ctx.budget.may_call_lm("task"):
                raise RuntimeError("the run's cost or time budget is spent; lm() is refused")
            res, _ = ctx.call_lm(lm_cfg, messages, "test" if testing else purpose, task.candidate_id,
                                 example_key=task.example_key, charge=not testing)
            if res.error_kind == INTERRUPTED:
                task.lm_interrupted = True
            if res.error:
                raise RuntimeError(f"{purpose} LM failed: {res.error}")
            # the pool adds cost and tokens to the evaluation that made the call (attribution)
            return LMAnswer(text=res.text, cost_usd=res.cost_usd, tokens_in=res.tokens_in, tokens_out=res.tokens_out)

        return handle

    # -- the run -------------------------------------------------------------------------

    def run(self) -> str:
        try:
            ctx = self._context()
        except Exception as exc:
            log.exception("run %s cannot start", self.run_id)
            return self._finish(None, RunStatus.FAILED, f"cannot start: {exc}")
        self._ctx = ctx
        # running time counts from here (storage.run_figures.running_seconds)
        repo.set_run_fields(self.db, self.run_id, seconds_at=utcnow())
        watcher = threading.Thread(target=watch, args=(self.db, self.run_id, ctx.budget, ctx.interrupt, self._watching),
                                   daemon=True, name="interrupt-watch")
        watcher.start()
        try:
            return self._loop(ctx)
        except Exception as exc:
            log.exception("run %s failed", self.run_id)
            self._end_interrupts(ctx)
            return self._finish(ctx, RunStatus.FAILED, f"engine error: {exc}")
        finally:
            self._watching.set()
            watcher.join()
            ctx.evals.close()
            ctx.evals.executor.close()

    def interrupt(self, reason: str) -> None:
        """Cut the work in flight, as a pause would (the worker's, with ``stop_event`` set: it
        is leaving the run). Nothing to cut before the run's context exists."""
        if self._ctx is not None:
            self._ctx.interrupt.set(reason)

    def interrupted(self) -> bool:
        return self._ctx is not None and self._ctx.interrupt.is_set()

    def _loop(self, ctx: RunContext) -> str:
        applier = CommandApplier(ctx, lambda cid: validate_child(ctx, cid))
        if not ctx.state.scores or self._population_missing(ctx):
            problem = self._seed(ctx)
            if problem and not ctx.interrupt.is_set():  # cut by a pause: the gate applies it; resuming redoes the seed
                return self._finish(ctx, RunStatus.FAILED, problem)
        search = ctx.cfg.search
        schedule: Schedule = (AsyncSchedule(ctx, MAX_IDLE_STEPS) if search.schedule == "async" and search.batch_size > 1
                              else SyncSchedule(ctx, MAX_IDLE_STEPS))  # C = 1 is the synchronous loop
        decision = schedule.run(lambda: self._gate(ctx, applier), lambda record: self._after_step(ctx, record))
        if decision.status == RunStatus.PAUSED:  # left as it is; paused time is not running time
            repo.set_run_fields(self.db, self.run_id, seconds=ctx.budget.seconds, seconds_at=None)
        if decision.status in (LOST, RunStatus.PAUSED):
            return decision.status
        self._end_interrupts(ctx)
        return self._finish(ctx, decision.status, decision.reason)

    def _end_interrupts(self, ctx: RunContext) -> None:
        """The search is over: the held-out test pass (outside the budgets) is not cut."""
        self._watching.set()
        ctx.interrupt.clear()

    def _gate(self, ctx: RunContext, applier: CommandApplier) -> tuple[Optional[Decision], list[int]]:
        """Between steps (or, asynchronously, between proposals): apply the human commands
        that arrived, then say whether the run must stop. Returns (a decision or None, the
        applied command ids)."""
        if self.stop_event.is_set():
            return Decision(LOST, ""), []
        was_cut = ctx.interrupt.is_set()
        with ctx.interrupt.held():
            ctx.interrupt.clear()  # the step it cut is closed; the commands below say what comes next
            decision, applied = self._decide(ctx, applier)
        if decision is not None and (ctx.budget.out_of_time() or (stopping_status(decision.status) and (
                was_cut or self._halted_by(applied)))):
            ctx.interrupt.set(decision.reason or decision.status)  # the asynchronous work still in flight
        return decision, applied

    def _halted_by(self, applied: list[int]) -> bool:
        """A pause or a stop is among the commands just applied (a step-mode pause is not: the
        asynchronous work in flight then finishes)."""
        return bool(applied) and any(c.kind in ("pause", "stop") for c in repo.list_commands(self.db, self.run_id)
                                     if c.id in applied)

    def _decide(self, ctx: RunContext, applier: CommandApplier) -> tuple[Optional[Decision], list[int]]:
        """``_gate`` without the interrupt: apply the commands, then the stopping rules."""
        applied = applier.apply_pending()
        run = repo.get_run(self.db, self.run_id)
        if run.status in (RunStatus.STOPPED, RunStatus.PAUSED):
            return Decision(run.status, run.status_reason), applied
        if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):  # continued by a budget change: go on
            repo.transition_run(self.db, self.run_id, RunStatus.RUNNING, "", finished_at=None)
        min_calls = min_step_calls(ctx.cfg)
        why = ctx.budget.exhausted(ctx.state.best()[1], ctx.step_index, min_calls, min_time_share(ctx.cfg))
        why = why or stop_reason(ctx, run.proposals_total) or (self.stop_check() if self.stop_check else None)
        if why:
            return Decision(RunStatus.COMPLETED, why, ctx.budget.out_of_room(min_calls)), applied
        failing = evaluator_failing(self.db, self.run_id, ctx.cfg.search.minibatch_size)
        if failing:
            return Decision(RunStatus.FAILED, failing), applied
        if ctx.consecutive_lm_failures >= MAX_CONSECUTIVE_LM_FAILURES:
            last = repo.list_candidates(self.db, self.run_id, [CandidateStatus.FAILED])[-1].reason
            repo.transition_run(self.db, self.run_id, RunStatus.PAUSED,
                                lm_pause_reason(ctx.consecutive_lm_failures, last, self.run_id))
            return Decision(RunStatus.PAUSED, ""), applied
        if not ctx.state.eligible_ids():
            return Decision(RunStatus.STOPPED, "no candidate can be a parent (all vetoed)"), applied
        return None, applied

    def _after_step(self, ctx: RunContext, record: StepRecord) -> None:
        """The one post-step path of both schedules: run totals, the system-aware merge, the
        step-mode pause, the ``on_step`` hook."""
        search = ctx.cfg.search
        # the asynchronous schedule merges each validated child into the best as it arrives instead
        if search.merge and (search.schedule == "sync" or search.batch_size == 1):
            merges = sum(1 for c in ctx.state.candidates.values() if c.origin == Origin.MERGE)
            if merges < search.max_merges:  # recorded as part of the step just closed
                try_merge(ctx, step_rng(search.seed + 7919, record.index))
        best_id, best_mean = ctx.state.best()
        ctx.step_index = record.index + 1
        repo.set_run_fields(self.db, self.run_id, steps_done=ctx.step_index, seconds=ctx.budget.seconds,
                            seconds_at=utcnow(), best_candidate_id=best_id, best_val_mean=best_mean,
                            consecutive_lm_failures=ctx.consecutive_lm_failures)
        if repo.get_run(self.db, self.run_id).step_mode:
            repo.transition_run(self.db, self.run_id, RunStatus.PAUSED, "paused after one step (step mode)",
                                step_mode=False)
        if self.on_step:
            self.on_step(ctx)

    # -- seed ----------------------------------------------------------------------------

    def _seed(self, ctx: RunContext) -> Optional[str]:
        """Create (or find) the seed candidate and validate it. Returns a failure reason."""
        cfg = ctx.cfg
        seed_id = deterministic_id(self.run_id, "seed")
        cand = repo.find_candidate(self.db, seed_id)
        if cand is None:
            seed = cfg.seed_candidate
            content = dict(seed) if isinstance(seed, dict) else {SINGLE: seed} if seed else None
            call_id = None
            if content is None:
                res, call_id = ctx.call_lm(cfg.reflection_lm, seed_prompt(cfg.artifact_kind, cfg.objective, cfg.background, cfg.dataset),
                                           "seed", seed_id)
                parsed = parse_answer(res.text or "", "", require_fence=False)
                if res.error or parsed.text is None:
                    return f"the reflection LM could not write a seed from the objective: {res.error or parsed.reason}"
                content = {SINGLE: parsed.text}
            # a seed starts accepted: it competes from the start (its validation pass follows)
            ctx.set_status(Candidate(id=seed_id, run_id=self.run_id, content=content, content_hash=content_hash(content),
                                     origin=Origin.SEED, step=0, lm_call_id=call_id, started_at=utcnow()),
                           CandidateStatus.ACCEPTED, None)
        else:
            ctx.state.candidates[cand.id] = cand
        validate_child(ctx, seed_id)
        seed = ctx.state.candidates[seed_id]
        evs = repo.evaluations_for(self.db, self.run_id, [seed_id])
        problem = missing_objectives(cfg.search.frontier, ctx.state.objectives)
        if problem:
            return problem
        if evs and all(e.error for e in evs):
            return (f"the evaluator failed on every validation example for the seed; first error: {evs[0].error}. "
                    "Fix the evaluator (\"Try evaluator\" in the studio shows the traceback) and start a new run.")
        if not evs:
            return "the budget did not allow a single evaluation of the seed"
        self._seed_population(ctx)
        best_id, best_mean = ctx.state.best()
        repo.set_run_fields(self.db, self.run_id, best_candidate_id=best_id or seed.id,
                            best_val_mean=best_mean if best_mean is not None else seed.val_mean)
        return None

    def _population(self, ctx: RunContext) -> list[tuple[str, dict]]:
        """A branch's seeds after the first (``[branch] seeds``): (candidate id, content)."""
        branch = ctx.cfg.branch
        return [(deterministic_id(self.run_id, "seed", i), dict(text) if isinstance(text, dict) else {SINGLE: text})
                for i, text in enumerate(branch.seeds if branch else [], start=1)]

    def _population_missing(self, ctx: RunContext) -> bool:
        """A seed of the population has no row yet (the run was cut between its seeds)."""
        return any(cid not in ctx.state.candidates for cid, _ in self._population(ctx))

    def _seed_population(self, ctx: RunContext) -> None:
        """Validate the rest of a branch's seed population: each competes on the frontier from
        the start (its base run's evaluations of the same text are reused, ``engine.reuse``)."""
        for cid, content in self._population(ctx):
            if cid not in ctx.state.candidates:
                ctx.set_status(Candidate(id=cid, run_id=self.run_id, content=content, content_hash=content_hash(content),
                                         origin=Origin.SEED, step=0, started_at=utcnow()), CandidateStatus.ACCEPTED, None)
            if cid not in ctx.state.full:
                validate_child(ctx, cid)

    # -- end -----------------------------------------------------------------------------

    def _finish(self, ctx: Optional[RunContext], status: RunStatus, reason: str) -> str:
        fields: dict = {"finished_at": utcnow(), "seconds_at": None}
        if ctx is not None:
            best_id, best_mean = ctx.state.best()
            search_seconds = ctx.budget.seconds  # the test pass below is running time, not the search's
            repo.set_run_fields(self.db, self.run_id, seconds=search_seconds, seconds_at=utcnow())
            fields.update(best_candidate_id=best_id, best_val_mean=best_mean, seconds=search_seconds)
            run = repo.get_run(self.db, self.run_id)
            cap, usd_cap = ctx.cfg.budget.max_metric_calls, ctx.cfg.budget.max_cost_usd
            fields["budget_overshoot"] = max(0, run.metric_calls - cap) if cap else 0
            if usd_cap and run.cost_usd > usd_cap:
                reason = f"{reason} (cost ${run.cost_usd:.4f}: ${run.cost_usd - usd_cap:.4f} over the cap)"
            lm_note = run_lm_failures(self.db, run)
            if lm_note:
                reason += f". LM errors slowed it: {lm_note}"
            test_started = time.monotonic()
            fields.update(held_out_pass(ctx, status, best_id))
            fields["test_seconds"] = run.test_seconds + time.monotonic() - test_started
        repo.transition_run(self.db, self.run_id, status, reason, **fields)
        repo.close_run_commands(self.db, self.run_id, status)
        return RunStatus(status).value


def keep_frontier(ctx: RunContext) -> None:
    """Write the whole frontier of the pool as loaded (``PoolState.keep_frontier``): a run that
    starts, or resumes, perhaps recorded by a release that kept none; from here on each validation
    pass and veto writes what it changed. The lowest and highest validation score of candidates
    validated before those were recorded are filled in on the way."""
    state = ctx.state
    state.keep_frontier()
    ranges = {cid: (min(s.values()), max(s.values())) for cid, s in state.scores.items()
              if s and state.candidates[cid].val_min is None}
    frontier_rows.set_val_range(ctx.db, ranges)
    write_frontier(ctx)


def min_time_share(cfg) -> float:
    """The smallest share of a step worth starting in the time left (``Budget.time_too_short``).
    A synchronous step on an LM that answers one request at a time is shrunk to the proposals
    the time left pays (``run_step``): its reflections queue, so fewer take less time, and one
    proposal's share is enough. On the free local model half of that: see ``FREE_LM_MIN_SHARE``."""
    serial = cfg.search.schedule == "sync" and one_at_a_time(cfg.reflection_lm)
    share = 1 / cfg.search.batch_size if serial else 1.0
    return share * FREE_LM_MIN_SHARE if is_local(cfg.reflection_lm.model) else share
