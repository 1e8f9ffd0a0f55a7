"""Helpers for evaluators that run in Refract's sandbox: ``log``, ``lm`` and friends.

Porting an evaluator written for GEPA's ``optimize_anything``: replace the one line
``import gepa.optimize_anything as oa`` with ``import refract_evaluator as oa`` (or
``from refract_evaluator import log, lm``). ``oa.log(...)``, ``oa.get_log_context()``,
``oa.set_log_context(ctx)`` and an ``opt_state`` parameter keep working.

- ``log(*args, sep=" ", end="\\n")`` appends to ``side_info["log"]`` of the current evaluation.
- ``lm(prompt_or_messages, model=None, **params) -> str`` calls the run's task LM through the
  engine (the API key stays in the engine; the call is cached, costed and charged to the run).
  Calls from several threads are serialised. It raises ``LMError`` when the engine refuses or
  the call fails, and is unavailable on the Dask executor (the error says so).

This module is importable inside a sandbox worker, and in a Python process that uses
``from engine import optimize_anything`` (the evaluator then runs in that process, see
``engine/in_process.py``); it has no dependencies.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["log", "lm", "LMError", "get_log_context", "set_log_context", "OptimizationState"]


class LMError(RuntimeError):
    """The engine could not answer an ``lm()`` call (budget spent, provider error, unsupported)."""


class BoundedText:
    """A write-only text sink that keeps the first ``limit`` characters and counts the rest,
    so that an evaluator printing 100 MB costs neither memory nor a huge side_info."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[str] = []
        self._kept = 0
        self.dropped = 0

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self._kept
        if room > 0:
            piece = text[:room]
            self._parts.append(piece)
            self._kept += len(piece)
            self.dropped += len(text) - len(piece)
        else:
            self.dropped += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        text = "".join(self._parts)
        if self.dropped:
            text += f"\n…[truncated: {self.dropped:,} more characters not kept]"
        return text


@dataclass
class OptimizationState:
    """What GEPA injects into an evaluator that declares ``opt_state``: ``best_example_evals``,
    the best evaluations so far of this example (up to 30, best first), each
    ``{"score": float, "side_info": dict}`` — as GEPA fills it."""

    best_example_evals: list = field(default_factory=list)


_local = threading.local()
_lm_lock = threading.Lock()
# Set by the worker: (messages, model, params) -> text. None outside a sandbox worker.
_lm_transport: Optional[Callable[[list, Optional[str], dict], str]] = None


def get_log_context() -> Optional[BoundedText]:
    """The log sink of the evaluation running in this thread (pass it to child threads)."""
    return getattr(_local, "ctx", None)


def set_log_context(ctx: Optional[BoundedText]) -> None:
    _local.ctx = ctx


def log(*args: Any, sep: str = " ", end: str = "\n") -> None:
    """Like ``print``, but into ``side_info["log"]`` of the current evaluation."""
    ctx = get_log_context()
    if ctx is None:
        warnings.warn("refract_evaluator.log() called outside an evaluation; the text is dropped")
        return
    ctx.write(sep.join(str(a) for a in args) + end)


def lm(prompt_or_messages: Any, model: Optional[str] = None, **params: Any) -> str:
    """Ask the run's task LM; returns the answer text. ``prompt_or_messages`` is a string (sent
    as one user message) or a list of ``{"role", "content"}`` dicts."""
    if isinstance(prompt_or_messages, str):
        messages = [{"role": "user", "content": prompt_or_messages}]
    elif isinstance(prompt_or_messages, list) and all(isinstance(m, dict) for m in prompt_or_messages):
        messages = prompt_or_messages
    else:
        raise TypeError("lm() takes a prompt string or a list of {'role': ..., 'content': ...} dicts, "
                        f"not {type(prompt_or_messages).__name__}")
    if _lm_transport is None:
        raise LMError("lm() is only available inside a Refract sandbox worker")
    with _lm_lock:
        return _lm_transport(messages, model, params)
