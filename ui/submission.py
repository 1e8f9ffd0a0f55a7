"""One click, one command: every control that sends a command submits under a client token
(``engine.commands.send_command`` refuses a token it has seen, so the database holds one
command per submission).

The token is part of the control's widget key. After a submission the token is renewed, so
the control is redrawn as a new widget; a second click on the old one (a double click, or a
click sent before the page redrew under load) still carries the old token and is refused —
or, once the page has redrawn, belongs to a widget that no longer exists and is dropped.
"""

from __future__ import annotations

import uuid

import streamlit as st

_SLOT = "_submission_{slot}"
SEP = "__"  # widget key = base key + SEP + token (tests find a control by its base key; "__" survives as a CSS class)


def token(slot: str) -> str:
    """The current token of a control (made on first use, kept until a submission renews it)."""
    key = _SLOT.format(slot=slot)
    if key not in st.session_state:
        st.session_state[key] = uuid.uuid4().hex
    return st.session_state[key]


def renew(slot: str) -> None:
    """After a submission reached the database: the next click is a new submission."""
    st.session_state[_SLOT.format(slot=slot)] = uuid.uuid4().hex


def widget_key(base: str, slot: str) -> str:
    return f"{base}{SEP}{token(slot)}"
