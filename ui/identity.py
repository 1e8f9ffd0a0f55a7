"""Who is using the studio, and with which role.

Two modes, chosen by ``.streamlit/secrets.toml``:

- **signed in**: an ``[auth]`` table is configured, so people sign in with OpenID Connect
  (``st.login``; Streamlit keeps the identity in a signed cookie) and their role comes from the
  ``[roles]`` table plus the database's grants (``engine.access.RoleMap.with_grants``). The identity is the ID token's e-mail; nothing a
  person types can change it.
- **local mode**: no ``[auth]``. The studio serves on the loopback address only (``ui.serving``),
  everyone who reaches it is an admin, and the name comes from the sidebar's "Who am I".

The studio passes ``current_actor()`` to the command layer, which checks the role itself
(``engine.access.check``); ``may`` only decides which controls are drawn enabled.
"""

from __future__ import annotations

import json
from typing import Any, Optional
from urllib.parse import unquote

import streamlit as st

from engine.access import NEEDS, Actor, Role, RoleMap, local_actor
from ui import keys

LOCAL_MODE = "local mode: everyone who reaches this port is an admin"


def auth_configured() -> bool:
    """True when ``.streamlit/secrets.toml`` has an ``[auth]`` table (sign-in is on)."""
    try:
        return st.secrets.load_if_toml_exists() and "auth" in st.secrets
    except Exception:  # noqa: BLE001 -- an unreadable secrets file: Streamlit logs it; no sign-in then
        return False


def file_roles() -> RoleMap:
    """The ``[roles]`` table alone (the bootstrap); a bad one stops the page with its ``roles.key: reason``."""
    try:
        section = st.secrets.get("roles") if st.secrets.load_if_toml_exists() else None
        return RoleMap.from_config(section.to_dict() if hasattr(section, "to_dict") else section)
    except ValueError as exc:
        st.error(f"The [roles] table of .streamlit/secrets.toml is wrong: {exc}", icon=":material/error:")
        st.stop()


def role_map() -> RoleMap:
    """Who is what: the ``[roles]`` table and the database's grants (``engine.access``)."""
    from ui import data

    return file_roles().with_grants(data.role_grants(data.db_url()))


def _claims() -> dict[str, Any]:
    try:
        return st.user.to_dict()
    except AttributeError:
        return {}


def signed_out() -> bool:
    """Sign-in is configured and nobody is signed in on this session."""
    return auth_configured() and not _claims().get("is_logged_in")


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
    need = NEEDS.get(action, Role.ADMIN).label
    return f"You are signed in as {'an' if actor.role.label[0] in 'ae' else 'a'} {actor.role.label}: this needs " \
           f"{'an' if need[0] in 'ae' else 'a'} {need} (an admin grants roles on the Roles page)."


def sign_in_gate(page_path: str) -> None:
    """With sign-in configured, stop every page until the person is signed in and has a role.

    Streamlit brings a person back to the home page after signing in, so the page they were
    opening (``page_path`` and its run and candidate) is kept in a short-lived cookie and opened
    once they are back: a link to any view works for someone not yet signed in."""
    if not auth_configured():
        return
    claims = _claims()
    if not claims.get("is_logged_in"):
        _keep_link(page_path)
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
    _follow_link(page_path)


def _keep_link(page_path: str) -> None:
    from ui import nav

    if page_path not in nav.pages():
        return
    link = "|".join([page_path, nav.query_run() or "", nav.query_candidate() or ""])
    st.html(f"<script>document.cookie = '{keys.COOKIE_NEXT}=' + encodeURIComponent({json.dumps(link)}) + "
            "'; path=/; max-age=600; SameSite=Lax';</script>", unsafe_allow_javascript=True)


def _follow_link(page_path: str) -> None:
    """Once per session: open the page kept by ``_keep_link`` (only one of the studio's own pages)."""
    from ui import nav

    if st.session_state.get(keys.NEXT_FOLLOWED):
        return
    st.session_state[keys.NEXT_FOLLOWED] = True
    kept = unquote(st.context.cookies.get(keys.COOKIE_NEXT, "") or "")
    if not kept:
        return
    st.html(f"<script>document.cookie = '{keys.COOKIE_NEXT}=; path=/; max-age=0; SameSite=Lax';</script>",
            unsafe_allow_javascript=True)
    # Streamlit lands a person on the home page after signing in: only there is the kept link
    # theirs to follow. (The switch below can drop the clearing script above, so the cookie may
    # outlive its use; a page opened later by its own link must stay that page.)
    if page_path != "runs":
        return
    target, run, candidate = (kept.split("|") + ["", ""])[:3]
    if target in nav.pages() and (target, run) != (page_path, nav.query_run() or ""):
        nav.go(target, run=run or None, candidate=candidate or None)
