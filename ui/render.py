"""Showing untrusted text safely: candidates, datasets, side information and LM answers are
rendered as text (``st.code`` / ``st.text`` / ``st.json``), never as HTML or Markdown.

``md`` escapes a string for the few places where Streamlit only takes Markdown (titles,
captions, labels), so a run named ``![x](http://…)`` cannot load an image or inject a link.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

import streamlit as st

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def md(text: Any, limit: int = 300) -> str:
    """Escape text for a Markdown-only place (titles, captions, labels)."""
    s = str(text)
    if len(s) > limit:
        s = s[:limit] + "…"
    return _MD_SPECIAL.sub(r"\\\1", s.replace("\n", " "))


def code_span(text: Any, limit: int = 120) -> str:
    """Text inside inline code (Markdown escapes do not apply there: drop backticks instead)."""
    s = str(text).replace("`", "'").replace("\n", " ")
    return f"`{s[:limit]}`"


def compact(n: float) -> str:
    """12,345 → 12.3k; 1,234,567 → 1.23M."""
    n = float(n or 0)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.0f}"


def is_image(value: Any) -> bool:
    return isinstance(value, dict) and "__image__" in value and isinstance(value.get("data"), str)


def show_text(text: Any, language: str | None = None, height: int | None = None) -> None:
    """A block of untrusted text, verbatim, with a copy button."""
    body = text if isinstance(text, str) else json.dumps(text, indent=2, ensure_ascii=False, default=str)
    st.code(body, language=language or "text", wrap_lines=True, height=height if height else "content")


def show_value(name: str, value: Any) -> None:
    """One side-information entry: an image, a JSON structure, or text."""
    st.caption(md(name))
    if is_image(value):
        try:
            st.image(base64.b64decode(value["data"], validate=True), caption=f"{value['__image__']} image")
        except (binascii.Error, ValueError, TypeError) as exc:
            st.warning(f"this image could not be decoded ({exc}); its raw data follows")
            show_text(value.get("data", "")[:2000])
    elif isinstance(value, (dict, list)):
        images = _images_in(value)
        if images:
            for key, img in images:
                show_value(f"{name}.{key}", img)
        st.json(_without_images(value), expanded=2)
    else:
        show_text(value if isinstance(value, str) else repr(value))


def show_side_info(info: dict) -> None:
    if not info:
        st.caption("no side information")
        return
    for key, value in info.items():
        show_value(str(key), value)


def _images_in(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for k, v in items:
        if is_image(v):
            found.append((f"{prefix}{k}", v))
        elif isinstance(v, (dict, list)):
            found += _images_in(v, f"{prefix}{k}.")
    return found


def _without_images(value: Any) -> Any:
    if is_image(value):
        return f"<{value['__image__']} image shown above>"
    if isinstance(value, dict):
        return {k: _without_images(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_images(v) for v in value]
    return value


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and part.get("type") == "text":
        return str(part.get("text", ""))
    if isinstance(part, dict) and part.get("type") == "image_url":
        url = str((part.get("image_url") or {}).get("url", ""))
        return f"[image part: {url.split(';', 1)[0].removeprefix('data:')}, {len(url) * 3 // 4 // 1024:,} KB]"
    return json.dumps(part, ensure_ascii=False, default=str)


def messages_text(messages: list) -> str:
    """An LM conversation as plain text, one block per message."""
    parts = []
    for m in messages or []:
        if isinstance(m, dict):
            content = m.get("content")
            if isinstance(content, list):  # text and image parts (a vision reflection model)
                content = "\n".join(_part_text(p) for p in content)
            elif not isinstance(content, str):
                content = json.dumps(content, indent=2, ensure_ascii=False, default=str)
            parts.append(f"── {m.get('role', '?')} ──\n{content}")
        else:
            parts.append(str(m))
    return "\n\n".join(parts)


def status_badge(status: str) -> str:
    """A Markdown badge for a known status word (our own vocabulary, never user text)."""
    colour = {"running": "blue", "queued": "gray", "paused": "orange", "completed": "green", "failed": "red",
              "stopped": "gray", "accepted": "green", "rejected": "gray", "proposed": "blue"}.get(status, "gray")
    return f":{colour}-badge[{md(status)}]"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "—"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"
