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

In a Python process (the repository's root on the path, as for ``import engine``) it is also
GEPA's ``optimize_anything`` module: ``oa.optimize_anything(...)``, ``oa.GEPAConfig`` and the
other config classes come from ``engine.api`` on first use, so that a GEPA program changes only
its import line (the evaluator then runs in that process, see ``engine/api/in_process.py``).
Inside a sandbox worker only the helpers above exist; the module has no dependencies.
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
        self._lock = threading.Lock()  # an evaluator's own threads may log into one context

    def write(self, text: str) -> int:
        text = str(text)
        with self._lock:
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


_MEDIA_BY_EXT = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
                 ".webp": "image/webp", ".bmp": "image/bmp", ".svg": "image/svg+xml"}
# Set by the sandbox worker: an http(s) URL would make the reflection LM's provider fetch data on
# the evaluator's behalf, a way out of a sandbox without network. In a Python process (the
# caller's own code, trusted) a URL is passed on as it is, as GEPA does.
_url_images_allowed = True


class Image:
    """An image for side information (GEPA's ``oa.Image``), shown in the studio and sent to a
    vision-capable reflection LM. Give exactly one of ``url``, ``path`` or ``base64_data`` (with
    ``media_type``), as in GEPA, or Refract's positional ``source``: PNG/JPEG ``bytes``, a PIL
    image, or a path. A ``path`` is read when the evaluation's side information is stored (the
    file must exist until the evaluator returns); ``media_type`` is then guessed from its
    extension. ``url`` is an http(s) URL (not inside the sandbox, which has no network) or a
    ``data:`` URL.
    """

    def __init__(self, source: Any = None, *, url: Optional[str] = None, path: Optional[str] = None,
                 base64_data: Optional[str] = None, media_type: Optional[str] = None) -> None:
        if source is not None and (url, path, base64_data) != (None, None, None):
            raise ValueError("Exactly one of url, path, or base64_data must be provided.")
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
        elif source is not None:
            kind, base64_data = _encode(source)
            media_type = media_type or f"image/{kind}"
        if sum(x is not None for x in (url, path, base64_data)) != 1:
            raise ValueError("Exactly one of url, path, or base64_data must be provided.")
        if base64_data is not None and media_type is None:
            raise ValueError("media_type is required when using base64_data.")
        self.url, self.path, self.base64_data, self.media_type = url, path, base64_data, media_type

    def to_openai_content_part(self) -> dict:
        """``{"type": "image_url", "image_url": {"url": ...}}``: the URL, or a data URL."""
        if self.url is not None:
            return {"type": "image_url", "image_url": {"url": self.url}}
        media, data = self._media_and_data()
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}

    def _media_and_data(self) -> tuple[str, str]:
        if self.path is not None:
            with open(self.path, "rb") as f:
                raw = f.read()
            media = self.media_type or _MEDIA_BY_EXT.get(os.path.splitext(self.path)[1].lower(), "image/png")
            return media, base64.b64encode(raw).decode()
        return str(self.media_type), str(self.base64_data)

    def __refract_image__(self) -> dict:
        """What the run stores: ``{"__image__": kind, "data": base64}``, or for an http(s) URL
        ``{"__image__": "url", "url": ...}``. Raises ValueError for what cannot be stored."""
        url = self.url
        if url is not None and url.startswith("data:"):
            head, sep, data = url.partition(";base64,")
            if not sep or not head.startswith("data:image/"):
                raise ValueError("Image(url=...): a data: URL must be data:image/<type>;base64,<data>")
            media, data = head[len("data:"):], data
        elif url is not None:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"Image(url=...): {url[:60]!r} is neither an http(s) URL nor a data: URL")
            if not _url_images_allowed:
                raise ValueError("Image(url=...): the sandbox has no network, so an image URL is refused; read the "
                                 "image into bytes or give its path (or set [executor] network = true)")
            return {"__image__": "url", "url": url}
        else:
            media, data = self._media_and_data()
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("Image: the image data is not valid base64") from None
        return {"__image__": media.split("/", 1)[-1], "data": data}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Image) and (self.url, self.path, self.base64_data, self.media_type) == (
            other.url, other.path, other.base64_data, other.media_type)

    def __repr__(self) -> str:
        if self.base64_data is not None:
            return f"Image(base64_data=<{len(self.base64_data) * 3 // 4:,} bytes>, media_type={self.media_type!r})"
        return f"Image(url={self.url!r})" if self.url is not None else f"Image(path={self.path!r})"


def _adopt_gepa_image() -> None:
    """Where gepa is installed, make ``Image`` also a ``gepa.Image`` (a subclass of both), so
    that GEPA's own code that checks ``isinstance(x, gepa.Image)`` (its reflection prompt
    renderer, a ported program's helpers) takes Refract's images. Called for a Python process
    that imports this module by name (the repository's ``refract_evaluator.py``) and by each
    ``optimize_anything`` call, never in the sandbox, which need not import gepa."""
    global Image
    import importlib.util

    if importlib.util.find_spec("gepa") is None or "gepa.image.Image" in {f"{c.__module__}.{c.__qualname__}"
                                                                          for c in Image.__mro__}:
        return
    from gepa.image import Image as GepaImage

    Image = type("Image", (Image, GepaImage), {"__doc__": Image.__doc__, "__module__": __name__,
                                               "__init__": Image.__init__, "__eq__": Image.__eq__,
                                               "__repr__": Image.__repr__, "__hash__": None})


def _encode(source: Any) -> tuple[str, str]:
    """(kind such as "png", base64 data) of PNG/JPEG bytes or a PIL image."""
    if isinstance(source, (bytes, bytearray)):
        raw = bytes(source)
        if raw.startswith(b"\x89PNG\r\n\x1a\n"):
            return "png", base64.b64encode(raw).decode()
        if raw.startswith(b"\xff\xd8\xff"):
            return "jpeg", base64.b64encode(raw).decode()
        raise ValueError("Image(): the bytes are not a PNG or JPEG image")
    if hasattr(source, "save") and hasattr(source, "size"):  # a PIL image
        buf = io.BytesIO()
        source.save(buf, format="PNG")
        return "png", base64.b64encode(buf.getvalue()).decode()
    raise ValueError(f"Image() cannot use a {type(source).__name__}: give bytes, a PIL image or a path")


_local = threading.local()
_lm_lock = threading.Lock()
# Set by the worker: (messages, model, params) -> text. None outside a sandbox worker.
_lm_transport: Optional[Callable[[list, Optional[str], dict], str]] = None


def get_log_context() -> BoundedText:
    """The log sink of the evaluation running in this thread: give it to ``set_log_context`` in
    a thread the evaluator starts, so that its ``log()`` lands in the same side information.
    Raises RuntimeError outside an evaluation, as GEPA does."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise RuntimeError("No active log context: get_log_context() must be called inside an evaluator "
                           "(from the thread Refract called it on, or one given its context)")
    return ctx


def set_log_context(ctx: Optional[BoundedText]) -> None:
    _local.ctx = ctx


def log(*args: Any, sep: str = " ", end: str = "\n") -> None:
    """Like ``print``, but into ``side_info["log"]`` of the current evaluation."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        warnings.warn("refract_evaluator.log() called outside of an evaluator: the text is dropped "
                      "(in a thread of your own, call set_log_context(get_log_context()) first)", stacklevel=2)
        return
    ctx.write(sep.join(str(a) for a in args) + end)


def add_captured(side_info: dict, captured: dict) -> dict:
    """``side_info`` with the captured ``log`` / ``stdout`` / ``stderr`` texts (the non-empty
    ones) added. A key the evaluator already used keeps its value; the captured text then goes
    under ``_gepa_<key>``, with a warning, as GEPA does."""
    for key, text in captured.items():
        if not text:
            continue
        if key in side_info:
            warnings.warn(f"side_info key {key!r} conflicts with the captured {key}: the evaluator's value is kept and "
                          f"the captured text stored under '_gepa_{key}'", stacklevel=2)
            key = f"_gepa_{key}"
        side_info[key] = text
    return side_info


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


# GEPA's optimize_anything names, for ``import refract_evaluator as oa`` then
# ``oa.optimize_anything(...)``: resolved on first use from the engine (which the caller's process
# can import; a sandbox cannot, and does not need them).
_API = {"optimize_anything": "engine.api.optimize", "GEPAConfig": "engine.api.gepa_config",
        "EngineConfig": "engine.api.gepa_config", "ReflectionConfig": "engine.api.gepa_config",
        "MergeConfig": "engine.api.gepa_config", "RefinerConfig": "engine.api.gepa_config",
        "TrackingConfig": "engine.api.gepa_config", "EvaluatorWrapper": "engine.api.gepa_names",
        "make_litellm_lm": "engine.api.gepa_names", "SideInfo": "engine.api.gepa_names",
        "_STR_CANDIDATE_KEY": "engine.api.gepa_names", "_build_seed_generation_prompt": "engine.api.gepa_names",
        "_generate_seed_candidate": "engine.api.gepa_names", "OptimizeResult": "engine.api.result",
        "GEPAResult": "engine.api.result"}


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'refract_evaluator' has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(_API[name])
    except ImportError as exc:
        raise AttributeError(f"refract_evaluator.{name} needs Refract's engine, which cannot be imported here "
                             f"({exc}); it is for the Python process that runs optimize_anything") from None
    value = getattr(module, "OptimizeResult" if name == "GEPAResult" else name)
    globals()[name] = value
    return value
