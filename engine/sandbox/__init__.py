"""The evaluator sandbox: where user evaluator code runs (never in the engine or UI process).

Public API:
- ``check_evaluator_source(source)`` — cheap syntax/shape check in the engine process (compiles,
  never executes); raises ``EvaluatorCompileError`` ("evaluator.py, line 3: invalid syntax").
- ``make_executor(cfg, evaluator_source, lm_handler=None)`` — the ``Executor`` for an
  ``[executor]`` config: ``LocalPool`` (backend "local") or ``DaskExecutor`` (backend "dask").
- ``spec_from_config(cfg)`` — the ``SandboxSpec`` (limits, network) both executors use.

Inside the sandbox the evaluator can ``import refract_evaluator`` (``log``, ``lm``); see
``engine/sandbox/runtime/refract_evaluator.py`` and docs/security.md.
"""

from __future__ import annotations

import ast
from typing import Optional

from engine.config import ExecutorConfig
from engine.executor import Executor, LMHandler
from engine.sandbox.worker_process import SandboxSpec

__all__ = ["EvaluatorCompileError", "check_evaluator_source", "make_executor", "spec_from_config", "SandboxSpec"]


class EvaluatorCompileError(ValueError):
    """The evaluator source cannot work: syntax error or no ``evaluate`` function."""


def check_evaluator_source(source: str, name: str = "evaluator.py") -> None:
    """Raise EvaluatorCompileError unless ``source`` compiles and defines ``evaluate`` at top level.
    ``name`` is the file the messages name (the user's own file name).

    Safe in the engine process: ``compile``/``ast`` parse but never run the code."""
    try:
        tree = compile(source, "evaluator.py", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        # the line itself is not shown: the "evaluator" may be any file (never echo its content)
        where = f"{name}, line {exc.lineno}" if exc.lineno else name
        raise EvaluatorCompileError(f"{where}: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise EvaluatorCompileError(f"{name}: {exc}") from None
    if not _binds_evaluate(tree):
        raise EvaluatorCompileError(
            f"{name} defines no function evaluate(candidate) or evaluate(candidate, example); "
            "add one that returns a score, or (score, side_info)")


def _binds_evaluate(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "evaluate":
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name) == "evaluate" for a in node.names):
                return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "evaluate" for t in targets):
            return True
        if isinstance(node, (ast.If, ast.Try, ast.With)):  # e.g. try: import fast ... except: def evaluate
            if _binds_evaluate(ast.Module(body=list(ast.iter_child_nodes(node)), type_ignores=[])):
                return True
    return False


def spec_from_config(cfg: ExecutorConfig) -> SandboxSpec:
    return SandboxSpec(timeout_seconds=cfg.timeout_seconds, memory_mb=cfg.memory_mb, network=cfg.network)


def make_executor(cfg: ExecutorConfig, evaluator_source: str, lm_handler: Optional[LMHandler] = None,
                  stock=None) -> Executor:
    """Start the executor for ``cfg``; the caller must ``close()`` it. Raises EvaluatorCompileError
    before starting anything if the source is not a usable evaluator file. ``stock``: an
    ``engine.sandbox.warm.WarmStock`` a local pool takes its processes from (Dask ignores it)."""
    check_evaluator_source(evaluator_source)
    spec = spec_from_config(cfg)
    if cfg.backend == "dask":
        from engine.sandbox.dask_executor import DaskExecutor

        return DaskExecutor(spec, evaluator_source, cfg.address or "local", cfg.workers, lm_handler)
    from engine.sandbox.pool import LocalPool

    return LocalPool(spec, evaluator_source, cfg.workers, lm_handler, stock)
