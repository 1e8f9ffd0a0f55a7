"""The shared sidebar: who is signed in (or, in local mode, who am I, remembered in this browser),
which database, engine heartbeat."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import streamlit as st

from ui import analysis, data, identity, keys
from ui.render import fmt_seconds, md

STALE_AFTER_S = 30.0
BEAT_S = 2.0  # the worker beats every few seconds; its cached read lives 2 s
_NAME_OK = re.compile(r"^[\w .@'-]{1,60}$")


def current_user() -> str:
    """The person acting: the signed-in identity when sign-in is configured, else the sidebar
    name (see ``ui.identity``)."""
    actor = identity.current_actor()
    return actor.name if actor is not None else ""


def _remember(name: str) -> None:
    """Store the name in a cookie of this browser, read back by ``st.context.cookies`` next time."""
    value = json.dumps(name)  # a JS string literal; encodeURIComponent keeps the cookie well-formed
    st.html(f"<script>document.cookie = 'refract_user=' + encodeURIComponent({value}) + "
            "'; path=/; max-age=31536000; SameSite=Lax';</script>", unsafe_allow_javascript=True)


def _who_am_i() -> None:
    """Local mode's typed name, remembered in this browser."""
    if keys.WHO not in st.session_state:
        from urllib.parse import unquote

        st.session_state[keys.WHO] = (st.session_state.get(keys.WHO_KEPT)
                                      or unquote(st.context.cookies.get(keys.COOKIE_WHO, "") or ""))
    name = st.text_input("Who am I", key=keys.WHO, placeholder="your name",
                         help="Recorded on the runs, commands and comments you create; remembered in this browser.")
    name = (name or "").strip()
    st.session_state[keys.WHO_KEPT] = name
    if name and not _NAME_OK.match(name):
        st.warning("Use letters, digits, spaces and . @ ' - (at most 60 characters).")
    elif name and st.session_state.get(keys.WHO_SAVED) != name:
        _remember(name)
        st.session_state[keys.WHO_SAVED] = name


def render() -> None:
    with st.sidebar:
        if identity.auth_configured():
            actor = identity.current_actor()
            if actor is not None:
                st.caption(f"Signed in as **{md(actor.name)}** · {actor.role.label}")
                st.button("Sign out", key=keys.SIGN_OUT, icon=":material/logout:", on_click=st.logout)
        else:
            _who_am_i()
            st.caption(identity.LOCAL_MODE.capitalize() + " (sign-in is not configured).")
        st.caption(f"Database: `{data.get_db().safe_url}`")
        worker_badge()


def engine_alive() -> bool:
    """Whether the latest engine worker heartbeat is a running worker's, beating lately."""
    return analysis.worker_state(data.worker_status(data.db_url()), STALE_AFTER_S) == "alive"


@st.fragment(run_every=BEAT_S)
def worker_badge() -> None:
    """The engine worker's heartbeat, refreshed on its own: a live page never reruns the
    sidebar, so a badge drawn once would say "idle" for as long as the page stays open."""
    beat = data.worker_status(data.db_url())
    if beat is None:
        st.warning("No engine worker has run on this database yet. Start the studio with `make run`, "
                   "or run `python -m engine worker` beside it.", icon=":material/power_off:")
        return
    age = beat["age_s"]
    runs = beat.get("run_ids") or ([beat["current_run_id"]] if beat.get("current_run_id") else [])
    where = f"pid {beat['pid']}, " + (f"on run{'s' if len(runs) > 1 else ''} {', '.join(runs)}" if runs else "idle")
    state = analysis.worker_state(beat, STALE_AFTER_S)
    if state == "alive":
        st.success(f"Engine worker alive: heartbeat {fmt_seconds(age)} ago ({where})", icon=":material/bolt:")
    elif state == "stopped":
        gone = (datetime.now(timezone.utc) - beat["stopped_at"]).total_seconds()
        st.warning(f"Engine worker stopped {fmt_seconds(gone)} ago (pid {beat['pid']}). Runs will not progress until "
                   "a worker runs: `make run` starts one, or `python -m engine worker` beside the studio.",
                   icon=":material/power_off:")
    else:
        st.error(f"Engine worker silent for {fmt_seconds(age)} (last: {where}). Runs will not progress until "
                 "a worker runs; `make run` restarts it.", icon=":material/warning:")
