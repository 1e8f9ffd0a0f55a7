"""Who is using the studio, and with which role.

Two modes, chosen by ``.streamlit/secrets.toml``:

- **signed in**: an ``[auth]`` table is configured, so people sign in with OpenID Connect
  (``st.login``; Streamlit keeps the identity in a signed cookie) and their role comes from the
  ``[roles]`` table (``engine.access.RoleMap``). The identity is the ID token's e-mail; nothing a
  person types can change it.
- **local mode**: no ``[auth]``. The studio serves on the loopback address only (``ui.serving``),
  everyone who reaches it is an admin, and the name comes from the sidebar's "Who am I".

The studio passes ``current_actor()`` to the command layer, which checks the role itself
(``engine.access.check``); ``may`` only decides which controls are drawn enabled.
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from engine.access import Actor, Role, RoleMap, local_actor
from ui import keys

LOCAL_MODE = "local mode: everyone who reaches this port is an admin"


def auth_configured() -> bool:
    """True when ``.streamlit/secrets.toml`` has an ``[auth]`` table (sign-in is on)."""
    try:
        return st.secrets.load_if_toml_exists() and "auth" in st.secrets
    except Exception:  # noqa: BLE001 -- an unreadable secrets file: Streamlit logs it; no sign-in then
        return False


def role_map() -> RoleMap:
    """The ``[roles]`` table; a bad one stops the page with its ``roles.key: reason``."""
    try:
        section = st.secrets.get("roles") if st.secrets.load_if_toml_exists() else None
        return RoleMap.from_config(section.to_dict() if hasattr(section, "to_dict") else section)
    except ValueError as exc:
        st.error(f"The [roles] table of .streamlit/secrets.toml is wrong: {exc}", icon=":material/error:")
        st.stop()


def _claims() -> dict[str, Any]:
    try:
        return st.user.to_dict()
    except AttributeError:
        return {}


def current_actor() -> Optional[Actor]:
    """The person acting, with their role; None when nobody is signed in (or, in local mode, no
    name was given yet)."""
    if auth_configured():
        claims = _claims()
        if not claims.get("is_logged_in"):
            return None
        email = str(claims.get("email") or claims.get("sub") or "")
        return Actor(name=email, role=role_map().role_of(email, claims), signed_in=True)
    name = (st.session_state.get(keys.WHO) or st.session_state.get(keys.WHO_KEPT) or "").strip()
    return local_actor(name) if name else None


def may(action: str) -> bool:
    """Whether the current person may do ``action`` (``engine.access.NEEDS``): for drawing controls."""
    actor = current_actor()
    return actor is not None and actor.may(action)


def refusal_note(action: str) -> Optional[str]:
    """Why a control is disabled for the current person's role, or None when they may use it (or
    nobody is named yet: local mode lets an unnamed person start runs, recorded without an owner)."""
    actor = current_actor()
    if actor is None or actor.may(action):
        return None
    return f"You are signed in as a {actor.role.label}: this needs an editor (an admin grants roles)."


def sign_in_gate() -> None:
    """With sign-in configured, stop every page until the person is signed in and has a role."""
    if not auth_configured():
        return
    claims = _claims()
    if not claims.get("is_logged_in"):
        st.title("Refract")
        st.write("This studio is shared by a team: sign in to see its runs.")
        st.button("Sign in", key=keys.SIGN_IN, icon=":material/login:", type="primary", on_click=st.login)
        st.stop()
    actor = current_actor()
    if actor is not None and actor.role == Role.NONE:
        st.error(f"You are signed in as {actor.name}, but no rule of the [roles] table gives you a role. "
                 "Ask an admin to add you.", icon=":material/block:")
        st.button("Sign out", key=keys.SIGN_OUT, on_click=st.logout)
        st.stop()
