"""Turn whatever an evaluator returned or raised into a JSON-safe (score, side_info, error).

Contract (docs/design.md §1, "evaluator"): a finite number, ``(number, dict)``, or a dict with a ``"score"`` key.
Anything else is an *error outcome* whose message says what was returned and what to return
instead. Images (``refract_evaluator.Image`` or GEPA's ``gepa.Image``, PNG or JPEG bytes, PIL
images) in side_info become ``{"__image__": "png" | "jpeg" | …, "data": b64}`` (an http(s) URL:
``{"__image__": "url", "url": …}``).
"""

from __future__ import annotations

import base64
import io
import math
import numbers
import traceback

EVALUATOR_FILE = "evaluator.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
MAX_DEPTH = 50


class NotJSON(Exception):
    """side_info holds a value that cannot leave the worker; the message names where and what."""


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _score(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NotJSON(f"{what} {_short(value)} (type {type(value).__name__}); the score must be a number")
    score = float(value)
    if not math.isfinite(score):
        raise NotJSON(f"{what} a score of {score}; the score must be a finite number")
    return score


def normalise(result) -> tuple[float, dict]:
    """(score, side_info) from an evaluator's return value; raises NotJSON with a clear message."""
    if isinstance(result, (tuple, list)) and len(result) == 2:
        value, side = result
        if side is None:
            side = {}
        if not isinstance(side, dict):
            raise NotJSON(f"evaluate() returned (score, {type(side).__name__}); side_info must be a dict")
    elif isinstance(result, dict):
        if "score" not in result:
            raise NotJSON("evaluate() returned a dict without a 'score' key; return a float, "
                          "(score, side_info) or a dict with 'score'")
        side = {k: v for k, v in result.items() if k != "score"}
        value = result["score"]
    else:
        value, side = result, {}
        if not isinstance(result, numbers.Real) or isinstance(result, bool):
            raise NotJSON(f"evaluate() returned {_short(result)} (type {type(result).__name__}); "
                          "return a float score, (score, side_info) or a dict with a 'score' key")
    score = _score(value, "evaluate() returned")
    side = to_json(side, "side_info")
    scores = side.get("scores")
    if scores is not None:
        if not isinstance(scores, dict):
            raise NotJSON("side_info['scores'] must be a dict {name: float}")
        for name, v in scores.items():
            _score(v, f"side_info['scores'][{name!r}] is")
    return score, side


def _image(obj) -> dict | None:
    if hasattr(type(obj), "__refract_image__"):
        return obj.__refract_image__()
    if hasattr(type(obj), "to_openai_content_part") and hasattr(obj, "base64_data"):  # GEPA's own gepa.Image
        import refract_evaluator

        return refract_evaluator.Image(url=obj.url, path=obj.path, base64_data=obj.base64_data,
                                       media_type=obj.media_type).__refract_image__()
    if isinstance(obj, (bytes, bytearray)) and bytes(obj[:8]) == PNG_MAGIC:
        return {"__image__": "png", "data": base64.b64encode(bytes(obj)).decode()}
    if isinstance(obj, (bytes, bytearray)) and bytes(obj[:3]) == JPEG_MAGIC:
        return {"__image__": "jpeg", "data": base64.b64encode(bytes(obj)).decode()}
    if type(obj).__module__.startswith("PIL.") and hasattr(obj, "save") and hasattr(obj, "size"):
        buf = io.BytesIO()
        obj.save(buf, format="PNG")
        return {"__image__": "png", "data": base64.b64encode(buf.getvalue()).decode()}
    return None


def to_json(obj, path: str, depth: int = 0):
    """A JSON-safe copy of ``obj``; non-finite floats become strings ("nan", "inf")."""
    if depth > MAX_DEPTH:
        raise NotJSON(f"{path} is nested more than {MAX_DEPTH} levels deep (or contains a cycle)")
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        value = float(obj)
        return value if math.isfinite(value) else str(value)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise NotJSON(f"{path} has a key of type {type(k).__name__}; keys must be strings")
            out[str(k)] = to_json(v, f"{path}[{k!r}]", depth + 1)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_json(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]
    try:
        image = _image(obj)
    except (OSError, ValueError) as exc:  # a path that cannot be read, data that is not base64…
        raise NotJSON(f"{path} is an image that cannot be stored: {exc}") from None
    if image is not None:
        return image
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy arrays and scalars
        return to_json(obj.tolist(), path, depth + 1)
    raise NotJSON(f"{path} is a {type(obj).__module__}.{type(obj).__qualname__} object, which cannot be "
                  "stored as JSON; convert it to a string, number, list or dict")


_HINTS = {
    "MemoryError": "the evaluator exceeded the sandbox memory limit ([executor] memory_mb)",
    "ModuleNotFoundError": "that module is not installed in the sandbox's Python environment",
    "SystemExit": "the evaluator called sys.exit(); return a score instead",
}


def describe(exc: BaseException, network: bool) -> tuple[str, str]:
    """(one-line message with file and line, traceback limited to the evaluator's frames)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != EVALUATOR_FILE:
        tb = tb.tb_next  # the worker's own frames say nothing useful to the user
    if tb is None and exc.__traceback__ is not None:
        tb = exc.__traceback__.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    where = ""
    for frame in reversed(traceback.extract_tb(tb)):
        if frame.filename == EVALUATOR_FILE:
            where = f" ({EVALUATOR_FILE}, line {frame.lineno})"
            break
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, SystemExit):
        text = f"sys.exit({exc.code!r})"
    message = f"{name}: {text}{where}" if text else f"{name}{where}"
    hint = _HINTS.get(name)
    if isinstance(exc, OSError) and exc.errno == 27:
        hint = "the sandbox limits the size of files the evaluator writes"
    elif isinstance(exc, OSError) and not network and ("socket" in "".join(lines) or exc.errno in (101, 111, -2, -3)):
        hint = "network access is off for evaluators; set [executor] network = true to allow it"
    if hint:
        message += f" — {hint}"
    return message, "".join(lines)
