"""A request the caller no longer waits for, told to the in-process runtime that serves it.

``LMClient`` stops waiting for an interrupted call at once (``engine.lm.client``), but a request
to the local model is served in this process: left alone, the runtime went on writing the dropped
answer to its end (up to its token cap: minutes on one core), and every later call, of this run
or the next, queued behind it. So the thread that sends a request marks it with an event
(``abandon_on``), set when the caller gives up; the local runtime reads it (``current``), stops
writing within a token and gives up a place in its queue.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Optional

_EVENT: ContextVar[Optional[threading.Event]] = ContextVar("refract_lm_abandon", default=None)


@contextmanager
def abandon_on(event: threading.Event) -> Iterator[None]:
    """Requests sent by this thread inside the block are abandoned once ``event`` is set."""
    token = _EVENT.set(event)
    try:
        yield
    finally:
        _EVENT.reset(token)


def current() -> Optional[threading.Event]:
    """The event that abandons this thread's request, or None when nobody set one."""
    return _EVENT.get()
