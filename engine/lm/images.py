"""Images in side information, on their way to the reflection LM.

The sandbox stores every image an evaluator returns (``refract_evaluator.Image``, PNG or JPEG
bytes, a PIL image) as ``{"__image__": "png" | "jpeg", "data": base64}``; an http(s) URL given
in a Python process as ``{"__image__": "url", "url": ...}`` (passed on as it is). For a vision-capable
reflection model (litellm's ``supports_vision``) each image becomes an OpenAI-style
``image_url`` content part with a data URL, after the prompt text, downscaled so that its longer
side is at most ``MAX_SIDE`` pixels; at most ``MAX_IMAGES`` go into one prompt. For any other
model (the local model included) the prompt says where an image was left out.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

MAX_SIDE = 1024
MAX_IMAGES = 8


def is_image(value: Any) -> bool:
    """A stored image: inline data, or (from a Python process) an http(s) URL."""
    return isinstance(value, dict) and "__image__" in value and (
        isinstance(value.get("data"), str) or isinstance(value.get("url"), str))


def supports_vision(model: str) -> bool:
    """Whether litellm knows ``model`` to accept image parts (False when it does not know)."""
    from engine.config import LOCAL_MODEL

    if model == LOCAL_MODEL:
        return False
    if model.startswith("python/"):  # a callable of the caller's (engine.api.callable_lm) gets the images, as in GEPA
        return True
    import litellm

    try:
        return bool(litellm.supports_vision(model=model))
    except Exception:  # noqa: BLE001 -- an unmapped model: assume text only
        return False


def mentions_images(evaluator_source: str) -> bool:
    """A cheap guess, for a load-time warning: does the evaluator look like it returns images?"""
    return re.search(r"\bImage\b|PNG|\.png\b|\.jpe?g\b", evaluator_source) is not None


class ImageCollector:
    """Replaces images in side information with a marker the prompt text can hold, and keeps
    the images (up to ``MAX_IMAGES`` when the model can see them) for the content parts."""

    def __init__(self, vision: bool) -> None:
        self.vision = vision
        self.images: list[dict] = []
        self.omitted = 0

    def strip(self, value: Any) -> Any:
        if is_image(value):
            if self.vision and len(self.images) < MAX_IMAGES:
                self.images.append(value)
                return f"[IMAGE-{len(self.images)}: attached after the text]"
            self.omitted += 1
            return ("[image omitted: the reflection model cannot see images]" if not self.vision
                    else f"[image omitted: at most {MAX_IMAGES} images per prompt]")
        if isinstance(value, dict):
            return {k: self.strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.strip(v) for v in value]
        return value

    def content(self, text: str) -> str | list[dict]:
        """The user message content: the text alone, or the text and the image parts."""
        if not self.images:
            return text
        parts = [_part(img) for img in self.images]
        shrunk = sum(1 for _, was_shrunk in parts if was_shrunk)
        note = f"\n\n({len(parts)} image(s) attached after this text, in the order of their markers"
        note += f"; {shrunk} downscaled to at most {MAX_SIDE} px on the longer side)" if shrunk else ")"
        return [{"type": "text", "text": text + note}] + [p for p, _ in parts]


def _part(img: dict) -> tuple[dict, bool]:
    """(an ``image_url`` content part, whether the image was downscaled)."""
    if "data" not in img:  # a URL: the provider fetches it
        return {"type": "image_url", "image_url": {"url": img["url"]}}, False
    raw = base64.b64decode(img["data"])
    kind = str(img["__image__"])
    shrunk = False
    try:
        from PIL import Image

        with Image.open(io.BytesIO(raw)) as pic:
            if max(pic.size) > MAX_SIDE:
                pic.thumbnail((MAX_SIDE, MAX_SIDE))
                buf = io.BytesIO()
                kind = "jpeg" if kind == "jpeg" else "png"  # what PIL writes for any other input
                (pic.convert("RGB") if kind == "jpeg" else pic).save(buf, format=kind.upper())
                raw, shrunk = buf.getvalue(), True
    except Exception:  # noqa: BLE001 -- undecodable: sent as it is, the provider says what is wrong
        pass
    url = f"data:image/{kind};base64,{base64.b64encode(raw).decode()}"
    return {"type": "image_url", "image_url": {"url": url}}, shrunk
