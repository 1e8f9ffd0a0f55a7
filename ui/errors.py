"""Storage errors shown where they happen: an unreachable database or a read over the studio's
time limit (``REFRACT_STUDIO_QUERY_SECONDS``) becomes a message on the page, not a traceback.

``app.py`` catches them around the page script; fragments run on their own, so each fragment
body is wrapped with ``shows_storage_errors`` (under ``@st.fragment``): its next refresh tries again.
"""

from __future__ import annotations

import functools
from typing import Callable

import streamlit as st

from storage.errors import StorageError


def show_storage_error(exc: StorageError) -> None:
    st.error(f"The database could not answer: {exc}", icon=":material/database:")


def shows_storage_errors(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except StorageError as exc:
            show_storage_error(exc)
    return wrapper
