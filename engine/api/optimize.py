"""``optimize_anything`` from Python: a run in the studio's database, evaluated in this process.

GEPA 0.1.4's argument names for what both share; Refract's settings as ``config``. The run is
an ordinary run: the studio shows it live, and pause, pin, veto, edit, feedback and budget
commands from the studio or the CLI are applied at the next step boundary while the call
runs. It is optimised by the engine's own ``Optimizer`` with an ``InProcessExecutor``: the same
budgets, cache, records and accounting as any run. No engine worker ever claims it
(``storage.attached``): this process holds its lease while the call runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pickle
import socket
import threading
import uuid
from typing import Any, Callable, Optional, Union

from storage import attached, leases, repo
from storage.db import Database, open_db
from storage.errors import InvalidTransition
from storage.states import FINISHED, RunStatus

from engine.commands import send_command
from engine.config import ConfigError, RunConfig, parse_config
from engine.api.in_process import InProcessExecutor
from engine.lm.providers import load_plugins
from engine.optimizer import Optimizer
from engine.api.result import OptimizeResult, build_result
from engine.api.callable_lm import model_for
from engine.api.stopping import StopCheck, callbacks_of
from engine.runs import examples_of
from engine.sandbox.runtime import outcome

LEASE_SECONDS = 15.0
POLL_SECONDS = 0.25
POOLS = ("thread", "process")


def optimize_anything(seed_candidate: Union[str, dict, None] = None, *, evaluator: Callable[..., Any],
                      dataset: Optional[list] = None, valset: Optional[list] = None, testset: Optional[list] = None,
                      objective: Optional[str] = None, background: Optional[str] = None,
                      config: Union[dict, RunConfig, None] = None, db: Optional[str] = None, name: Optional[str] = None,
                      resume: Optional[str] = None, validate: Optional[Callable[[Any], Any]] = None,
                      pool: str = "thread", progress: bool = True, owner: str = "",
                      stop_callbacks: Any = None, reflection_lm: Union[str, Callable, None] = None,
                      branch_from: Any = None) -> OptimizeResult:
    """Optimize ``seed_candidate`` (a text, a dict of named texts, or None to let the reflection
    LM write one from ``objective``) against ``evaluator``, and return the result.

    ``evaluator(candidate)`` (no dataset) or ``evaluator(candidate, example)`` returns a score,
    ``(score, side_info)`` or a dict with ``"score"``; higher is better. **It runs in this
    process, not sandboxed** (trusted, your own code, as in GEPA): on ``[executor] workers``
    threads, or spawned processes with ``pool="process"`` (the function must then pickle).
    ``import refract_evaluator as oa`` works inside it (``oa.log``; ``print`` is captured too).
    ``validate(candidate)``, if given, is the cheap check run before any metric call.
    ``reflection_lm``: a litellm model string, or a callable ``(prompt: str) -> str`` as in GEPA
    (``engine.api.callable_lm``; give it again to resume such a run).
    ``stop_callbacks``: a callable ``(state) -> bool`` or a list of them, called before every step
    (every proposal with the asynchronous schedule); True ends the run (``engine.api.stopping``:
    GEPA's own stoppers work unchanged). One that raises ends the run too, and the call raises its error.
    ``branch_from=(run_id, candidate_id)`` (or a list of candidate ids, or a run id for its best)
    starts a branch of that run from those candidates instead of a seed, with its settings and
    whatever this call changes (``engine.api.branch_from``).

    ``dataset`` / ``valset`` / ``testset`` are lists of examples: any Python objects, given to the
    evaluator as they are; the database (the studio, the reflection LM) gets their JSON form. ``config`` holds
    the other settings of a run TOML (``search``, ``budget``, ``reflection_lm``, ``task_lm``,
    ``executor``, ``artifact_kind``…) as a dict or a ``RunConfig``. ``db`` is a database URL
    (default: the studio's). ``name`` names the run.

    Ctrl-C finishes the current step (a second Ctrl-C cuts it) and leaves the run ``paused``
    (then re-raises KeyboardInterrupt); ``optimize_anything(evaluator=..., resume=RUN_ID)`` continues it with
    its stored settings (pass the same dataset objects again if they are not plain JSON).
    While the run is paused from the studio or the CLI the call waits for a resume; when the
    engine pauses it (the reflection LM keeps failing) the call returns, and the result's
    ``status_reason`` says why.
    Raises ``ConfigError`` (``field: reason``) for bad arguments.
    """
    if not callable(evaluator):
        raise ConfigError("evaluator: must be a function evaluator(candidate[, example]) -> score or (score, side_info)")
    if pool not in POOLS:
        raise ConfigError(f"pool: {pool!r} is not one of {', '.join(POOLS)}")
    stoppers = callbacks_of(stop_callbacks)
    reflection_model = model_for(reflection_lm) if callable(reflection_lm) else reflection_lm
    if reflection_model is not None and not isinstance(reflection_model, str):
        raise ConfigError(f"reflection_lm: must be a litellm model string or a callable (prompt) -> str, "
                          f"not {type(reflection_lm).__name__}")
    if pool == "process":
        _check_pickles(evaluator, "evaluator")
        _check_pickles(validate, "validate")
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
            cfg = branch_from_config(database, branch_from, seed_candidate, given, config, evaluator_record(evaluator),
                                     reflection_model)
        else:
            cfg = build_config(seed_candidate, evaluator, dataset, valset, testset, objective, background, config,
                               name, reflection_model)
        run_id = attached.create_attached_run(database, cfg.name, owner, cfg.stored(), examples_of(cfg), process_id,
                                              LEASE_SECONDS)
    session = _Session(database, run_id, process_id, evaluator, validate, pool,
                       list(dataset or []) + list(valset or []) + list(testset or []),
                       StopCheck(database, run_id, stoppers))
    session.run(progress)
    if session.stop_check.error is not None:  # the run is settled and says why; the caller sees their error
        raise session.stop_check.error
    return build_result(database, run_id)


# ---------------------------------------------------------------- arguments


def build_config(seed_candidate, evaluator: Callable, dataset, valset, testset, objective, background,
                 config: Union[dict, RunConfig, None], name: Optional[str],
                 reflection_model: Optional[str] = None) -> RunConfig:
    """The run's validated config: ``config``'s settings plus the arguments (an argument and a
    ``config`` key for the same thing is an error, not a silent choice)."""
    if not isinstance(config, (dict, RunConfig, type(None))):
        raise ConfigError(f"config: must be a dict or a RunConfig, not {type(config).__name__}")
    data = config.model_dump(mode="json") if isinstance(config, RunConfig) else dict(config or {})
    given = {"seed_candidate": seed_candidate, "objective": objective, "background": background, "name": name,
             "dataset": _storable(dataset, "dataset"), "valset": _storable(valset, "valset"),
             "testset": _storable(testset, "testset")}
    for key, value in given.items():
        if value is None:
            continue
        if data.get(key) not in (None, value) and not isinstance(config, RunConfig):
            raise ConfigError(f"config.{key}: also given as the argument {key}=; give it once")
        data[key] = value
    if reflection_model is not None:
        lm = dict(data.get("reflection_lm") or {})
        if lm.get("model") not in (None, reflection_model) and not isinstance(config, RunConfig):
            raise ConfigError("config.reflection_lm.model: also given as the argument reflection_lm=; give it once")
        data["reflection_lm"] = {**lm, "model": reflection_model}
    data.pop("evaluator_file", None)
    data["evaluator"] = evaluator_record(evaluator)
    data.setdefault("name", getattr(evaluator, "__name__", "") or "python run")
    return parse_config(data)


def _check_pickles(fn: Optional[Callable], field: str) -> None:
    """A process pool sends the function to its processes by pickling it."""
    if fn is None:
        return
    try:
        pickle.dumps(fn)
    except Exception as exc:  # pickling raises several types (PicklingError, AttributeError, TypeError…)
        raise ConfigError(f"{field}: cannot be sent to a process pool ({exc}); define it at the top level of a "
                          "module, or use pool=\"thread\"") from None


def evaluator_record(fn: Callable) -> str:
    """What the run stores as its evaluator: provenance only (the function runs from memory)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return (f"# evaluated in the Python process that started this run, not sandboxed: {where}\n"
            + (source or "# (source not available)\n"))


def _storable(rows: Optional[list], field: str) -> Optional[list]:
    """The examples as stored for the studio and shown to the reflection LM: JSON as they are;
    a dataclass or a pydantic model as its fields; anything else as its repr."""
    if rows is None:
        return None
    if not isinstance(rows, (list, tuple)):
        raise ConfigError(f"{field}: must be a list of examples, not {type(rows).__name__}")
    out = []
    for i, row in enumerate(rows):
        out.append(_storable_row(row, f"{field}[{i}]"))
    return out


def _storable_row(row: Any, where: str) -> Any:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        fields = dataclasses.asdict(row)
    elif callable(getattr(row, "model_dump", None)):
        fields = row.model_dump()
    else:
        fields = row
    try:
        return outcome.to_json(fields, where)
    except outcome.NotJSON:
        return {"repr": repr(row)[:2000]}


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
    control = [c for c in repo.list_commands(db, run_id) if c.kind in ("pause", "resume", "step") and c.status == "applied"]
    return bool(control) and control[-1].kind in ("pause", "step")


class _Session:
    """This process running an attached run: the lease and its heartbeat, the optimizer in a
    thread (so that Ctrl-C reaches this one), the progress bar, the wait while paused."""

    def __init__(self, db: Database, run_id: str, process_id: str, fn: Callable, validate, pool: str,
                 rows: list, stop_check: Optional[StopCheck] = None) -> None:
        self.db, self.run_id, self.process_id = db, run_id, process_id
        self.stop_check = stop_check or StopCheck(db, run_id, [])
        self.fn, self.validate, self.pool = fn, validate, pool
        # the caller's own example objects (the database holds their JSON form), matched by
        # position: examples are stored dataset, valset, testset, in order
        keys = [e.key for e in repo.get_examples(db, run_id) if e.payload is not None]
        self.originals = dict(zip(keys, rows)) if len(rows) == len(keys) else {}
        self.optimizer: Optional[Optimizer] = None
        self.lost = threading.Event()

    def executor(self, cfg, _source: str, lm_handler) -> InProcessExecutor:
        """The Optimizer's executor factory."""
        return InProcessExecutor(self.fn, cfg.workers, lm_handler, self.validate, self.pool, self.originals)

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
        finished = threading.Event()

        def body() -> None:
            try:
                result.update(status=opt.run())
            finally:
                finished.set()

        thread = threading.Thread(target=body, name="refract-optimizer")
        thread.start()
        interrupted = False
        while True:  # the test sits inside the try: a Ctrl-C between two polls is caught too
            try:
                if finished.wait(POLL_SECONDS):
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
