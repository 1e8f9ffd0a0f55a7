"""``optimize_anything`` from Python: a run in the studio's database, evaluated in this process.

GEPA 0.1.4's argument names for what both share; Refract's settings as ``config``. The run is
an ordinary run: the studio shows it live, and pause, pin, veto, edit, feedback and budget
commands from the studio or the CLI are applied at the next step boundary while the call
runs. It is optimised by the engine's own ``Optimizer`` with an ``InProcessExecutor``: the same
budgets, cache, records and accounting as any run. No engine worker ever claims it
(``storage.attached``): this process holds its lease while the call runs.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import uuid
from typing import Any, Callable, Optional, Union

from storage import attached, leases, repo
from storage.db import Database, open_db
from storage.errors import InvalidTransition
from storage.states import FINISHED, CommandKind, CommandStatus, RunStatus

from engine.commands import send_command
from engine.config import ConfigError, RunConfig
from engine.api.arguments import _storable, build_config, check_pickles, evaluator_record, plan_call
from engine.api.in_process import InProcessExecutor
from engine.lm.providers import load_plugins
from engine.optimizer import Optimizer
from engine.api.result import OptimizeResult, build_result
from engine.stopping import StopCheck
from engine.runs import examples_of

LEASE_SECONDS = 15.0
POLL_SECONDS = 0.25


def optimize_anything(seed_candidate: Union[str, dict, None] = None, *, evaluator: Callable[..., Any],
                      dataset: Optional[list] = None, valset: Optional[list] = None, testset: Optional[list] = None,
                      objective: Optional[str] = None, background: Optional[str] = None,
                      config: Union[dict, RunConfig, Any, None] = None, db: Optional[str] = None,
                      name: Optional[str] = None, resume: Optional[str] = None,
                      validate: Optional[Callable[[Any], Any]] = None, pool: str = "auto",
                      progress: Optional[bool] = None, owner: str = "", stop_callbacks: Any = None,
                      reflection_lm: Union[str, Callable, None] = None, batch_evaluator: Any = None,
                      branch_from: Any = None) -> OptimizeResult:
    """Optimize ``seed_candidate`` (a text, a dict of named texts, or None to let the reflection
    LM write one from ``objective``) against ``evaluator``, and return the result.

    ``evaluator(candidate)`` (no dataset) or ``evaluator(candidate, example)`` returns a score,
    ``(score, side_info)`` or a dict with ``"score"``; higher is better. **It runs in this
    process, not sandboxed** (trusted, your own code, as in GEPA): without a dataset on the
    calling thread (``pool="main"``, where ``signal`` works, as in GEPA), with one on
    ``[executor] workers`` threads (``pool="thread"``), or on spawned processes with
    ``pool="process"`` (the function must then pickle). ``import refract_evaluator as oa`` works
    inside it (``oa.log``; ``print`` is captured too).
    ``validate(candidate)``, if given, is the cheap check run before any metric call.
    ``reflection_lm``: a litellm model string, or a callable ``(prompt) -> str`` as in GEPA
    (``engine.api.callable_lm``; give it again to resume such a run).
    ``stop_callbacks``: a callable ``(state) -> bool`` or a list of them, called before every step
    (every proposal with the asynchronous schedule); True ends the run (``engine.stopping``:
    GEPA's own stoppers work unchanged). One that raises ends the run too, and the call raises its error.
    ``branch_from=(run_id, candidate_id)`` (or a list of candidate ids, or a run id for its best)
    starts a branch of that run from those candidates instead of a seed, with its settings and
    whatever this call changes (``engine.api.branch_from``).

    ``dataset`` / ``valset`` / ``testset`` are lists of examples: any Python objects, given to the
    evaluator as they are; the database (the studio, the reflection LM) gets their JSON form.
    ``config`` holds the other settings of a run TOML (``search``, ``budget``, ``reflection_lm``,
    ``task_lm``, ``executor``, ``artifact_kind``…) as a dict or a ``RunConfig``, or is GEPA's
    ``GEPAConfig`` (``engine.api.gepa_config``: its fields are mapped, the few Refract has no
    counterpart for refused by name). ``db`` is a database URL (default: the studio's).
    ``name`` names the run. ``progress`` draws a progress bar (default on; off with a GEPA config,
    as its ``display_progress_bar``).

    Ctrl-C finishes the current step (a second Ctrl-C cuts it) and leaves the run ``paused``
    (then re-raises KeyboardInterrupt); ``optimize_anything(evaluator=..., resume=RUN_ID)`` continues it with
    its stored settings (pass the same dataset objects again if they are not plain JSON).
    While the run is paused from the studio or the CLI the call waits for a resume; when the
    engine pauses it (the reflection LM keeps failing) the call returns, and the result's
    ``status_reason`` says why.
    Raises ``ConfigError`` (``field: reason``) for bad arguments.
    """
    if batch_evaluator is not None:
        raise ConfigError("batch_evaluator: not supported; give evaluator=, which Refract calls for each "
                          "(candidate, example) pair, in parallel")
    if not callable(evaluator):
        raise ConfigError("evaluator: must be a function evaluator(candidate[, example]) -> score or (score, side_info)")
    plan = plan_call(seed_candidate, config, dataset, reflection_lm, stop_callbacks, progress, pool, objective, resume,
                     branch_from)
    sys.modules["refract_evaluator"]._adopt_gepa_image()  # from here on oa.Image is also a gepa.Image (gepa installed)
    if plan.pool == "process":
        check_pickles(evaluator, "evaluator")
        check_pickles(validate, "validate")
    load_plugins()  # the test hook, honoured here as in `python -m engine` (this process is the engine)
    database = open_db(db)
    process_id = f"python:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    if resume:
        if not _reattach(database, resume, process_id, owner):
            return build_result(database, resume)
        run_id = resume
    else:
        if branch_from is not None:
            from engine.api.branch_from import branch_from_config

            given = {"dataset": _storable(dataset, "dataset"), "valset": _storable(valset, "valset"),
                     "testset": _storable(testset, "testset"), "objective": objective, "background": background,
                     "name": name}
            cfg = branch_from_config(database, branch_from, seed_candidate, given, plan.config,
                                     evaluator_record(evaluator), plan.reflection_model)
        else:
            cfg = build_config(seed_candidate, evaluator, dataset, valset, testset, objective, background, plan.config,
                               name, plan.reflection_model)
        from engine.lm.check import check_run_lms
        check_run_lms(cfg)  # each LM answers one short request, or ConfigError at its field: no run is created
        run_id = attached.create_attached_run(database, cfg.name, owner, cfg.stored(), examples_of(cfg), process_id,
                                              LEASE_SECONDS)
    session = _Session(database, run_id, process_id, evaluator, validate, plan.pool,
                       list(dataset or []) + list(valset or []) + list(testset or []),
                       StopCheck(database, run_id, plan.stop_callbacks), plan.raise_on_exception)
    session.run(plan.progress)
    for error in (session.stop_check.error, session.evaluator_error()):
        if error is not None:  # the run is settled and says why; the caller sees their error
            raise error
    return build_result(database, run_id, run_dir=plan.run_dir)


# ---------------------------------------------------------------- resuming


def _reattach(db: Database, run_id: str, process_id: str, owner: str) -> bool:
    """Take over an attached run whose process is gone. False when it is finished and has
    nothing to continue (its result is then returned as it is)."""
    run = repo.get_run(db, run_id)
    if not run.attached_to:
        raise ConfigError(f"resume: run {run_id} was not started from Python; continue it with "
                          f"`python -m engine resume {run_id}` (an engine worker runs it)")
    if not attached.attach_run(db, run_id, process_id, LEASE_SECONDS):
        raise ConfigError(f"resume: run {run_id} is held by another live Python process ({run.lease_owner}); "
                          "stop that one first (its lease lapses 15 s after it exits)")
    pending = {c.kind for c in repo.pending_commands(db, run_id)}
    if run.status in FINISHED and not pending & {"resume", "step"}:
        leases.release_run(db, run_id, process_id)
        return False
    if run.status == RunStatus.PAUSED and not pending & {"resume", "step"}:
        send_command(db, run_id, "resume", author=owner or "python", reason="optimize_anything(resume=...)")
    return True


# ---------------------------------------------------------------- running


def _paused_by_person(db: Database, run_id: str) -> bool:
    """Was the run paused by a pause or step command (rather than by the engine)?"""
    control = [c for c in repo.list_commands(db, run_id) if c.status == CommandStatus.APPLIED
               and c.kind in (CommandKind.PAUSE, CommandKind.RESUME, CommandKind.STEP)]
    return bool(control) and control[-1].kind in (CommandKind.PAUSE, CommandKind.STEP)


class _Session:
    """This process running an attached run: the lease and its heartbeat, the optimizer in a
    thread (so that Ctrl-C reaches this one), the progress bar, the wait while paused."""

    def __init__(self, db: Database, run_id: str, process_id: str, fn: Callable, validate, pool: str,
                 rows: list, stop_check: Optional[StopCheck] = None, raise_on_exception: bool = False) -> None:
        self.db, self.run_id, self.process_id = db, run_id, process_id
        self.stop_check = stop_check or StopCheck(db, run_id, [])
        self.fn, self.validate, self.pool = fn, validate, pool
        self.raise_on_exception = raise_on_exception
        self.executors: list[InProcessExecutor] = []
        if raise_on_exception:  # GEPA's raise_on_exception: the evaluator's first error ends the run
            self.stop_check.extra = self._evaluator_raised
        # the caller's own example objects (the database holds their JSON form), matched by
        # position: examples are stored dataset, valset, testset, in order
        keys = [e.key for e in repo.get_examples(db, run_id) if e.payload is not None]
        self.originals = dict(zip(keys, rows)) if len(rows) == len(keys) else {}
        self.optimizer: Optional[Optimizer] = None
        self.lost = threading.Event()

    def executor(self, cfg, _source: str, lm_handler) -> InProcessExecutor:
        """The Optimizer's executor factory."""
        made = InProcessExecutor(self.fn, cfg.workers, lm_handler, self.validate, self.pool, self.originals)
        self.executors.append(made)
        return made

    def evaluator_error(self) -> Optional[BaseException]:
        """With raise_on_exception, the first exception the evaluator raised (for the caller)."""
        raised = [exc for made in self.executors for exc in made.raised]
        return raised[0] if self.raise_on_exception and raised else None

    def _evaluator_raised(self) -> Optional[str]:
        error = self.evaluator_error()
        return None if error is None else (f"the evaluator raised {type(error).__name__}: {error} "
                                           "(raise_on_exception is on: the call raises it)")

    def _serve(self, timeout: float) -> bool:
        """Wait up to ``timeout``; with ``pool="main"`` run queued evaluations meanwhile, on this
        thread. True once the optimizer has finished."""
        made = self.executors[-1] if self.executors else None
        if made is None or made.kind != "main":
            return self.finished.wait(timeout)
        made.run_one(timeout)
        return self.finished.is_set()

    def run(self, progress: bool) -> None:
        from engine.api.progress import ProgressBar

        done = threading.Event()
        beat = threading.Thread(target=self._keep_lease, args=(done,), daemon=True, name="refract-lease")
        beat.start()
        bar = ProgressBar(self.db, self.run_id, enabled=progress)
        try:
            self._until_settled(bar)
        finally:
            bar.close()
            done.set()
            beat.join()
            leases.release_run(self.db, self.run_id, self.process_id)

    def _until_settled(self, bar) -> None:
        """Run the optimizer; while the run is paused by a person, wait for their next command."""
        while True:
            self.optimizer = Optimizer(self.db, self.run_id, executor_factory=self.executor, stop_check=self.stop_check)
            status = self._wait(self.optimizer, bar)
            if status == "lost":
                raise RuntimeError(f"run {self.run_id} was taken over by another process (this one's lease lapsed)")
            if status != RunStatus.PAUSED or not _paused_by_person(self.db, self.run_id):
                return  # e.g. the engine paused it (the reflection LM keeps failing): the result says why
            while not repo.pending_commands(self.db, self.run_id):
                bar.update(waiting=True)
                threading.Event().wait(POLL_SECONDS)

    def _wait(self, opt: Optimizer, bar) -> str:
        result: dict = {}
        # The wait is on an event the optimizer thread sets itself, not on Thread.join: a join
        # cut by Ctrl-C marks the thread stopped while it still runs (CPython 3.11), and the run
        # was then paused and released under an optimizer still writing to it (it ended 'failed').
        finished = self.finished = threading.Event()

        def body() -> None:
            try:
                result.update(status=opt.run())
            finally:
                finished.set()
                for made in self.executors:  # a caller's thread that waits for evaluations to run: it is over
                    made.wake()

        thread = threading.Thread(target=body, name="refract-optimizer")
        thread.start()
        interrupted = False
        while True:  # the test sits inside the try: a Ctrl-C between two polls is caught too
            try:
                if self._serve(POLL_SECONDS):
                    break
                bar.update()
            except KeyboardInterrupt:
                if interrupted:  # the second one: the step in flight is not waited for
                    bar.write("Cutting the step in flight, as a pause does.")
                    opt.interrupt("interrupted in Python (Ctrl-C twice)")
                else:
                    bar.write(f"Interrupted: finishing the current step of run {self.run_id}, then pausing it "
                              "(Ctrl-C again cuts the step).")
                interrupted = True
                opt.stop_event.set()
        thread.join()
        if interrupted and not self.lost.is_set():
            try:
                repo.transition_run(self.db, self.run_id, RunStatus.PAUSED,
                                    f"paused: interrupted in Python (Ctrl-C); continue with "
                                    f"optimize_anything(..., resume=\"{self.run_id}\")")
            except InvalidTransition:  # it finished as the step ended: there is nothing left to pause
                pass
            bar.write(f"Run {self.run_id} is paused; continue it with optimize_anything(..., resume=\"{self.run_id}\").")
            raise KeyboardInterrupt
        return "lost" if self.lost.is_set() else result.get("status", "failed")

    def _keep_lease(self, done: threading.Event) -> None:
        while not done.wait(LEASE_SECONDS / 3):
            try:
                if not leases.renew_lease(self.db, self.run_id, self.process_id, LEASE_SECONDS):
                    self.lost.set()
                    if self.optimizer is not None:
                        self.optimizer.stop_event.set()
                        self.optimizer.interrupt("another process holds the run's lease")
                    return
            except Exception:  # a transient database error: try again at the next beat
                continue
