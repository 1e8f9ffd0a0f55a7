"""Helpers for evaluators that run in Refract's sandbox: ``log``, ``lm`` and friends.

Porting an evaluator written for GEPA's ``optimize_anything``: replace the one line
``import gepa.optimize_anything as oa`` with ``import refract_evaluator as oa`` (or
``from refract_evaluator import log, lm``). ``oa.log(...)``, ``oa.get_log_context()``,
``oa.set_log_context(ctx)``, ``oa.Image(...)`` and an ``opt_state`` parameter keep working.

- ``log(*args, sep=" ", end="\\n")`` appends to ``side_info["log"]`` of the current evaluation.
- ``lm(prompt_or_messages, model=None, **params) -> str`` calls the run's task LM through the
  engine (the API key stays in the engine; the call is cached, costed and charged to the run);
  ``model="judge"`` asks the run's judge LM instead (``[judge_lm]``, else the reflection LM).
  Calls from several threads are serialised. It raises ``LMError`` when the engine refuses or
  the call fails, and is unavailable on the Dask executor (the error says so).

This module is importable inside a sandbox worker, and in a Python process that uses
``from engine import optimize_anything`` (the evaluator then runs in that process, see
``engine/api/in_process.py``); it has no dependencies.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

__all__ = ["log", "lm", "LMError", "get_log_context", "set_log_context", "OptimizationState", "Image"]


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


_MEDIA_BY_EXT = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".gif": "gif", ".webp": "webp"}


class Image:
    """An image for side information (GEPA's ``oa.Image``), shown in the studio and sent to a
    vision-capable reflection LM. Give exactly one source:

    - ``Image(source)``: PNG/JPEG ``bytes``, a PIL image, or the path of an image file;
    - ``Image(path=...)``, ``Image(base64_data=..., media_type="image/png")`` or
      ``Image(url="data:image/png;base64,...")`` as in GEPA. An ``http(s)`` URL is refused: the
      sandbox has no network, so the image must be here (read it into bytes, or give a path).

    The image is read and encoded when it is created; a bad source raises ``ValueError`` then.
    """

    def __init__(self, source: Any = None, *, url: Optional[str] = None, path: Optional[str] = None,
                 base64_data: Optional[str] = None, media_type: Optional[str] = None) -> None:
        given = [x for x in (source, url, path, base64_data) if x is not None]
        if len(given) != 1:
            raise ValueError("Image() takes exactly one of: source (bytes, PIL image or path), url, path, base64_data")
        if isinstance(source, (str, os.PathLike)):
            source, path = None, os.fspath(source)
        self.kind, self.data = _encode(source, url, path, base64_data, media_type)

    def __refract_image__(self) -> dict:
        return {"__image__": self.kind, "data": self.data}

    def __repr__(self) -> str:
        return f"Image({self.kind}, {len(self.data) * 3 // 4:,} bytes)"


def _encode(source, url, path, base64_data, media_type) -> tuple[str, str]:
    """(kind such as "png", base64 data) from whichever source was given."""
    if path is not None:
        kind = _MEDIA_BY_EXT.get(os.path.splitext(path)[1].lower())
        with open(path, "rb") as f:
            raw = f.read()
        return kind or _sniff(raw, path), base64.b64encode(raw).decode()
    if url is not None:
        if not url.startswith("data:image/") or ";base64," not in url:
            raise ValueError("Image(url=...) takes a data: URL (data:image/png;base64,...); the sandbox has no "
                             "network, so read the image into bytes or give its path")
        head, _, base64_data = url.partition(";base64,")
        media_type = head[len("data:"):]
    if base64_data is not None:
        if not media_type or not media_type.startswith("image/"):
            raise ValueError("Image(base64_data=...) needs media_type, e.g. media_type=\"image/png\"")
        try:
            base64.b64decode(base64_data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("Image(base64_data=...) is not valid base64") from None
        return media_type.split("/", 1)[1], base64_data
    if isinstance(source, (bytes, bytearray)):
        return _sniff(bytes(source), "the bytes"), base64.b64encode(bytes(source)).decode()
    if hasattr(source, "save") and hasattr(source, "size"):  # a PIL image
        buf = io.BytesIO()
        source.save(buf, format="PNG")
        return "png", base64.b64encode(buf.getvalue()).decode()
    raise ValueError(f"Image() cannot use a {type(source).__name__}: give bytes, a PIL image or a path")


def _sniff(raw: bytes, what: str) -> str:
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    raise ValueError(f"{what} are not a PNG or JPEG image")


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
