"""Filters that follow a live run: values that appear after the first render are shown, not
hidden behind a selection made when they did not exist yet.

A multiselect remembers the options the person removed (and those it leaves out by default,
like rejected proposals); every other option is selected, including those that appear later. A
range slider whose upper end sat at the maximum keeps following the maximum as it grows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Sequence

import streamlit as st

from ui.submission import SEP

_CHOSEN = "_{key}_chosen"
_LEFT_OUT = "_{key}_left_out"


def following_multiselect(label: str, options: Sequence, key: str, left_out: Sequence = ()) -> list:
    """A multiselect over ``options`` (which may grow between reruns) whose selection takes in
    every new option except those in ``left_out``; returns the selection.

    What is remembered is what the person left out, not what was selected: the selection is
    rebuilt from it on every run. A live page's browser sends its widgets' values back with
    every refresh, and one still drawing an earlier render sends a selection without the options
    that appeared since; taken as a change, that would record them as left out for good. So the
    widget's key also names its options (``key`` + SEP + a digest): a value sent for the options
    of an earlier render goes to a widget Streamlit has dropped, and changes nothing."""
    ss, out_key = st.session_state, _LEFT_OUT.format(key=key)
    options = list(options)
    if out_key not in ss:
        ss[out_key] = list(left_out)
    widget_key = f"{key}{SEP}{_digest(options)}"
    ss[widget_key] = [o for o in options if o not in ss[out_key]]
    return st.multiselect(label, options, key=widget_key, on_change=_remember_left_out, args=(key, widget_key, options))


def _digest(options: list) -> str:
    return hashlib.sha256(json.dumps(options, default=str).encode()).hexdigest()[:8]


def _remember_left_out(key: str, widget_key: str, options: list) -> None:
    chosen = set(st.session_state.get(widget_key) or [])
    st.session_state[_LEFT_OUT.format(key=key)] = [o for o in options if o not in chosen]


def following_range(label: str, lo: int, hi: int, key: str) -> tuple[int, int]:
    """An integer range slider over [lo, hi] (``hi`` may grow); an upper end left at the
    maximum follows the maximum. Returns the chosen (low, high). What the person chose is kept
    apart from the widget, whose key names its bounds, for the reason given above: a browser
    still drawing the old maximum would otherwise send it back as a choice to stop following."""
    ss, chosen_key = st.session_state, _CHOSEN.format(key=key)
    hi = max(hi, lo + 1)  # a slider needs two distinct ends
    low, high = ss.get(chosen_key, (lo, None))  # high None: follows the maximum
    widget_key = f"{key}{SEP}{lo}-{hi}"
    ss[widget_key] = (max(lo, min(low, hi)), hi if high is None else max(lo, min(high, hi)))
    return st.slider(label, lo, hi, key=widget_key, on_change=_remember_range, args=(key, widget_key, hi))


def _remember_range(key: str, widget_key: str, hi: int) -> None:
    low, high = st.session_state[widget_key]
    st.session_state[_CHOSEN.format(key=key)] = (low, None if high >= hi else high)
