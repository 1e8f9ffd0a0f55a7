"""The executor contract: where evaluations of (candidate, example) pairs run.

An executor owns W sandboxed workers that have compiled the run's evaluator once. The engine
submits evaluation tasks from many threads at once (all P×K proposals of a step share one
pool) and gets a ``concurrent.futures.Future`` per task, so results stream back as they
finish. User code never runs in the calling process.

Implementations: ``engine.sandbox.pool.LocalPool`` (default) and
``engine.sandbox.dask_executor.DaskExecutor``. ``make_executor`` picks one from the config.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, TypedDict, Union


@dataclass
class EvalTask:
    candidate: Any  # str for single-text runs, dict[str, str] for multi-component runs
    example: Any = None  # None in single-task mode (the evaluator takes only the candidate)
    example_key: str = ""
    # attribution of evaluator-side LM calls (``lm()`` inside the evaluator)
    candidate_id: Optional[str] = None
    kind: str = "eval"  # minibatch | validation | test | …: the test pass's lm() calls are outside the budgets
    # GEPA's OptimizationState.best_example_evals for this example: [{"score", "side_info"}], best first
    opt_state: Optional[list] = None
    # set by the engine when an lm() call of this evaluation was cut by a pause, a stop or the
    # time limit: the outcome is then discarded, not recorded (the LM call itself is)
    lm_interrupted: bool = False


@dataclass
class EvalOutcome:
    """The normalised result of one metric call.

    ``error`` is set when the evaluator failed (raised, timed out, crashed, returned junk);
    then ``score`` is 0.0 and ``side_info`` holds what is known (traceback, captured output).
    ``lm_cost_usd`` / ``lm_tokens_*`` sum the evaluator's own ``lm()`` calls.
    """

    score: float
    side_info: dict = field(default_factory=dict)
    error: Optional[str] = None
    seconds: float = 0.0
    lm_cost_usd: float = 0.0
    lm_tokens_in: int = 0
    lm_tokens_out: int = 0


class LMAnswer(TypedDict):
    """An evaluator's ``lm()`` answer with what it cost: the pool adds cost and tokens to the
    evaluation that made the call."""

    text: str
    cost_usd: float
    tokens_in: int
    tokens_out: int


# Called by the executor (in the engine process, any thread) when an evaluator calls lm():
# (messages, model_or_None, params, task) -> the answer text, or an LMAnswer (the optimizer's
# handler). Raises on failure; the message is passed back to the evaluator as an exception.
LMHandler = Callable[[list, Optional[str], dict, EvalTask], Union[str, LMAnswer]]


class Executor(Protocol):
    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        """Queue one evaluation; never raises for evaluator errors (they are outcomes)."""

    def validate(self, candidate: Any) -> Optional[str]:
        """Run the evaluator file's optional ``validate(candidate)``: None if valid (or if there
        is no validate function), else the error message. Costs no metric call."""

    @property
    def workers(self) -> int: ...

    def busy_seconds(self) -> float:
        """Total seconds workers spent evaluating since start (for utilisation)."""

    def close(self) -> None: ...


class BusyMeter:
    """Seconds the workers of an executor spent evaluating, summed across the threads that
    report them: the numerator of a step's worker utilisation (``Executor.busy_seconds``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self._busy += seconds

    def busy_seconds(self) -> float:
        with self._lock:
            return self._busy


class LazyExecutor:
    """An executor created on first use. A worker that claims a paused run only to apply a pin
    or a veto then starts no sandbox workers at all, so the command shows in the studio sooner."""

    def __init__(self, create: Callable[[], Executor]) -> None:
        self._create = create
        self._made: Optional[Executor] = None
        self._lock = threading.Lock()

    def _get(self) -> Executor:
        with self._lock:
            if self._made is None:
                self._made = self._create()
            return self._made

    def submit(self, task: EvalTask) -> "Future[EvalOutcome]":
        return self._get().submit(task)

    def validate(self, candidate: Any) -> Optional[str]:
        return self._get().validate(candidate)

    @property
    def workers(self) -> int:
        return self._get().workers

    def busy_seconds(self) -> float:
        return self._get().busy_seconds()

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, None
        if made is not None:
            made.close()
