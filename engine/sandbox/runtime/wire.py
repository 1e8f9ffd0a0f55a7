"""Framing of the worker protocol: 4-byte big-endian length + UTF-8 JSON.

JSON, never pickle: the engine must not unpickle bytes written by untrusted code. Shared by
the engine side (``engine.sandbox.worker_process``) and the sandboxed worker (stdlib only, so
the sandbox needs nothing but this folder and the Python standard library).
"""

from __future__ import annotations

import json
import struct

HEADER = struct.Struct("!I")
MAX_FRAME = 64 << 20  # a side_info larger than this is refused, not buffered


class FrameError(Exception):
    """The byte stream is not a valid frame sequence (corrupted or oversized)."""


def encode(obj) -> bytes:
    """Serialise ``obj`` as one frame; raises TypeError/ValueError if it is not plain JSON."""
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if len(data) > MAX_FRAME:
        raise ValueError(f"message of {len(data):,} bytes exceeds the {MAX_FRAME:,}-byte limit")
    return HEADER.pack(len(data)) + data


class FrameReader:
    """Incremental decoder: ``feed`` bytes as they arrive, get back the complete messages."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list:
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise FrameError(f"frame of {n:,} bytes exceeds the {MAX_FRAME:,}-byte limit")
            if len(self._buf) < HEADER.size + n:
                break
            raw = bytes(self._buf[HEADER.size : HEADER.size + n])
            del self._buf[: HEADER.size + n]
            try:
                out.append(json.loads(raw))
            except ValueError as exc:
                raise FrameError(f"invalid JSON frame: {exc}") from None
        return out
