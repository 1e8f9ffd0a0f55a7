"""The studio's pages, registered once (``app.py`` hands them to ``st.navigation``).

Pages link to each other through these objects and the ``run`` / ``candidate`` query
parameters, so every view has a URL a colleague can open.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import keys

ROOT = Path(__file__).resolve().parent.parent
PAGE_FILES = {
    "runs": ("pages/runs.py", "Runs", ":material/list:"),
    "new": ("pages/new_run.py", "New run", ":material/add_circle:"),
    "dashboard": ("pages/dashboard.py", "Run dashboard", ":material/monitoring:"),
    "candidate": ("pages/candidate.py", "Candidate", ":material/description:"),
    "lineage": ("pages/lineage.py", "Lineage", ":material/account_tree:"),
    "compare": ("pages/compare.py", "Compare candidates", ":material/compare:"),
    "compare_runs": ("pages/compare_runs.py", "Compare runs", ":material/stacked_line_chart:"),
    "explain": ("pages/explain.py", "Step explained", ":material/school:"),
    "playground": ("pages/playground.py", "Runtime playground", ":material/tune:"),
    "roles": ("pages/roles.py", "Roles", ":material/admin_panel_settings:"),
}


# The Runs page is the default one, served at "/"; Streamlit still reserves its url_path, and
# answered "/runs" (typed, or from a bookmark) with "Page not found". So the default page
# reserves a name nobody types, and a hidden page at "/runs" sends its visitor to "/".
DEFAULT_RESERVED = "home"


def pages() -> dict[str, st.Page]:
    return {name: st.Page(str(ROOT / path), title=title, icon=icon, default=(name == "runs"),
                          url_path=DEFAULT_RESERVED if name == "runs" else name)
            for name, (path, title, icon) in PAGE_FILES.items()}


def _to_runs() -> None:
    st.switch_page(pages()["runs"], query_params=dict(st.query_params))


def runs_alias() -> st.Page:
    """The hidden page at ``/runs``: it switches to the Runs page (see ``DEFAULT_RESERVED``)."""
    return st.Page(_to_runs, title="Runs", url_path="runs", visibility="hidden")


def query_run() -> str | None:
    return st.query_params.get(keys.QP_RUN) or None


def current_run() -> str | None:
    """The run in the page's link; without one (the sidebar's links carry no ``?run=``), the run
    this browser session opened last, written into the link so that it can be shared."""
    run_id = query_run()
    if run_id:
        st.session_state[keys.LAST_RUN] = run_id
        return run_id
    last = st.session_state.get(keys.LAST_RUN)
    if last:
        st.query_params[keys.QP_RUN] = last
    return last


def query_candidate() -> str | None:
    return st.query_params.get(keys.QP_CANDIDATE) or None


def go(page: str, run: str | None = None, candidate: str | None = None) -> None:
    """Switch page, carrying the run / candidate in the URL."""
    params = {}
    if run:
        params[keys.QP_RUN] = run
    if candidate:
        params[keys.QP_CANDIDATE] = candidate
    st.switch_page(pages()[page], query_params=params)


def link(page: str, label: str, run: str | None = None, candidate: str | None = None, icon: str | None = None,
         runs: list[str] | None = None) -> None:
    """A link to ``page``; ``runs``: the runs the compare-runs page puts side by side."""
    params = {}
    if run:
        params[keys.QP_RUN] = run
    if candidate:
        params[keys.QP_CANDIDATE] = candidate
    if runs:
        params[keys.QP_RUNS] = ",".join(runs)
    st.page_link(pages()[page], label=label, query_params=params, icon=icon)


def url(page: str, run: str | None = None, candidate: str | None = None, runs: list[str] | None = None) -> str:
    """A relative URL for link columns in tables."""
    q = []
    if run:
        q.append(f"{keys.QP_RUN}={run}")
    if candidate:
        q.append(f"{keys.QP_CANDIDATE}={candidate}")
    if runs:
        q.append(f"{keys.QP_RUNS}={','.join(runs)}")
    return f"/{page}" + (("?" + "&".join(q)) if q else "")


def linked_run(url: str, title: str, how: str) -> tuple[str, dict]:
    """(run id, overview) of the run in the page's link (``?run=``). Without one the page is
    titled ``title``, says ``how`` to get here and stops; an unknown run stops as in
    ``require_run``."""
    run_id = current_run()
    if not run_id:
        st.title(title)
        st.info(how)
        link("runs", "Runs", icon=":material/list:")
        st.stop()
    return run_id, require_run(url, run_id)


def require_run(url: str, run_id: str) -> dict:
    """The run overview for ``run_id``, or a clear message and the page stops (a mistyped or
    stale link, or a link into another database)."""
    from ui import data
    from ui.render import md

    run = data.run_overview(url, run_id)
    if run is None:
        if st.session_state.get(keys.LAST_RUN) == run_id:  # deleted since: the sidebar forgets it
            del st.session_state[keys.LAST_RUN]
        st.error(f"There is no run with id {md(run_id)} in this database (a mistyped or stale link, or another "
                 "database?). Pick a run on the Runs page.")
        link("runs", "Runs", icon=":material/list:")
        st.stop()
    return run
