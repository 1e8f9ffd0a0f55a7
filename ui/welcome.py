"""What the Runs page shows before the first run: what a run is, in a few plain sentences, and
the built-in examples, each one click from a filled-in New run form.

A newcomer who has never seen GEPA lands here first; the words are the studio's own (seed,
evaluator, reflection LM, frontier, step), each said once in passing so the other pages read."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from ui import keys, nav, run_form

INTRO = (
    "**Refract improves a text by trying changes and keeping what scores better.** "
    "The text can be a prompt, a piece of code or a config — or only an objective, and the first "
    "version is written for you. You give it a **seed** (the version you have), an **evaluator** "
    "(how a version is scored on your examples, and what went wrong) and a **reflection LM** (the "
    "model that reads those scores and that feedback and writes improved versions, a batch per "
    "**step**). Every version that is best on at least one example stays on the **frontier**; the "
    "run's dashboard shows it live, and you can pin, veto or edit versions between steps."
)


@dataclass(frozen=True)
class Example:
    label: str  # as the New run form's example list names it
    slug: str  # its folder's name, for the button's key (and so its CSS class)
    name: str
    objective: str
    how: str  # how it is scored, in a few words


def examples() -> list[Example]:
    """The built-in examples, in the order the New run form lists them."""
    found = []
    for label, path in run_form.list_templates().items():
        cfg = tomllib.loads(path.read_text())
        slug = path.parent.name if path.name == "config.toml" else path.stem
        found.append(Example(label, slug, cfg.get("name") or label, cfg.get("objective", ""), _how(cfg, path)))
    return found


def _how(cfg: dict, path: Path) -> str:
    if "prompt_evaluator" in cfg:
        return "a prompt, scored by a task LM and assertions: no Python"
    if not cfg.get("dataset_file") and not cfg.get("dataset"):
        return "one text, no dataset: a Python evaluator scores it"
    rows = path.parent / cfg["dataset_file"] if cfg.get("dataset_file") else None
    n = sum(1 for line in rows.read_text().splitlines() if line.strip()) if rows and rows.is_file() else 0
    return f"a Python evaluator over {n} training examples" if n else "a Python evaluator over examples"


def _open(label: str) -> None:
    st.session_state[keys.NEW_OPEN_EXAMPLE] = label


def show() -> None:
    """The empty Runs page."""
    st.markdown(INTRO)
    cards = examples()
    if cards:  # none when the examples folder is not there
        _cards(cards)
    st.subheader("Other ways in")
    c1, c2, c3 = st.columns(3)
    with c1:
        nav.link("new", "Start from an empty form", icon=":material/add_circle:")
    with c2:
        nav.link("playground", "See how batch shape changes a run's speed", icon=":material/tune:")
    with c3:
        st.caption("Once a run has a step, **Step explained** walks through what that step did, phase by phase.")


def _cards(cards: list[Example]) -> None:
    st.subheader("Start from an example")
    st.caption("Each opens the New run form filled in; read it, try the evaluator on the seed, then start the run. "
               "With the built-in local model (no API key) the ISO date regex takes from half a minute to under three minutes on two cores.")
    for row in range(0, len(cards), 3):
        cols = st.columns(3)
        for col, ex in zip(cols, cards[row:row + 3]):
            with col.container(border=True, height="stretch"):
                st.markdown(f"**{ex.name}**")
                st.caption(ex.how)
                st.write(ex.objective)
                if st.button("Open in the form", key=keys.RUNS_EXAMPLE.format(slug=ex.slug), on_click=_open,
                             args=(ex.label,), icon=":material/edit_note:"):
                    nav.go("new")
