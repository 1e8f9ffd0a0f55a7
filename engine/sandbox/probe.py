"""The checks a run's evaluator passes before the run is accepted (``submit``, ``validate``).

``check_evaluator(cfg)`` parses the source in the engine process (never runs it), then imports
it once in a sandboxed worker with the run's own limits (so ``import missing_module`` or a
module that eats memory is refused now, not in the engine worker later), and checks that
``evaluate`` can be called the way the run's mode calls it: ``evaluate(candidate)`` without a
dataset, ``evaluate(candidate, example)`` with one. Every message is ``field: reason``, with
``field`` the config key the user wrote (``evaluator_file`` or ``evaluator``).
"""

from __future__ import annotations

from typing import Optional

from engine.config import RunConfig
from engine.sandbox import EvaluatorCompileError, check_evaluator_source, spec_from_config
from engine.sandbox.worker_process import LoadError, WorkerFailed, WorkerProcess


def _where(cfg: RunConfig) -> tuple[str, str]:
    """(config field, file name) the messages name."""
    if cfg.prompt_evaluator is not None:
        return "prompt_evaluator", "the evaluator generated from [prompt_evaluator]"
    return ("evaluator_file", cfg.evaluator_file) if cfg.evaluator_file else ("evaluator", "evaluator.py")


def shape_problem(shape: dict, with_dataset: bool) -> Optional[str]:
    """Why ``evaluate`` (described by the worker's ``evaluate_shape``) cannot be called the way
    the mode calls it, or None. Without a dataset it gets the candidate (and example None if
    it takes two arguments); with one, the candidate and the example."""
    positional, required = shape.get("positional", 0), shape.get("required", 0)
    passes = 2 if with_dataset or positional >= 2 or shape.get("varargs") else 1
    call = "evaluate(candidate, example)" if with_dataset else "evaluate(candidate)"
    mode = "this run has a dataset" if with_dataset else "this run has no dataset (single-task search)"
    if with_dataset and positional < 2 and not shape.get("varargs"):
        return f"evaluate() takes {positional} argument(s), but {mode}: define {call}"
    if not with_dataset and positional < 1 and not shape.get("varargs"):
        return f"evaluate() takes no argument, but it is called as {call}"
    if required > passes:
        return f"evaluate() requires {required} arguments, but {mode} and it is called as {call}"
    if shape.get("required_keywords"):
        names = ", ".join(shape["required_keywords"])
        return f"evaluate() requires the keyword argument(s) {names}, which are never passed; give them defaults"
    return None


def check_evaluator(cfg: RunConfig) -> None:
    """Raise EvaluatorCompileError (``field: reason``) unless the evaluator loads in the sandbox
    and its ``evaluate`` fits the run's mode. Starts and stops one sandboxed worker (skipped
    for a Dask executor: its workers may have modules this machine lacks)."""
    field, name = _where(cfg)
    try:
        check_evaluator_source(cfg.evaluator, name)
    except EvaluatorCompileError as exc:
        raise EvaluatorCompileError(f"{field}: {exc}") from None
    if cfg.executor.backend != "local":
        return
    try:
        proc = WorkerProcess(spec_from_config(cfg.executor), cfg.evaluator)
    except LoadError as exc:
        reason = str(exc).replace("evaluator.py failed to load", f"{name} failed to load", 1)
        raise EvaluatorCompileError(f"{field}: {reason}") from None
    except (WorkerFailed, OSError) as exc:
        raise EvaluatorCompileError(f"{field}: {name} could not be loaded in the sandbox: {exc}") from None
    try:
        problem = shape_problem(proc.evaluate_shape, with_dataset=bool(cfg.dataset))
    finally:
        proc.close()
    if problem:
        raise EvaluatorCompileError(f"{field}: {problem}")
