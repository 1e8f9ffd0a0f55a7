"""Refract studio: the Streamlit entry point.

``streamlit run app.py`` finds the ``app = st.App(...)`` below and serves this same file as
the Streamlit script through it, so the server's lifespan hook can supervise the engine
worker: started with the server, restarted if it dies, stopped with the server (see
``engine.worker.supervisor``). Set ``REFRACT_WORKER=0`` to serve the studio without starting a worker
(tests on synthetic runs, or when workers run elsewhere).

Sign-in: with an ``[auth]`` table in ``.streamlit/secrets.toml`` every page waits for
``st.login`` and roles come from its ``[roles]`` table (``ui.identity``); without one the server
refuses to listen beyond the loopback address unless forced (``ui.serving``).

When Streamlit executes this file as the page script, ``__name__`` is ``"__main__"`` and
``main()`` draws the navigation and the shared sidebar; when the server imports it as a module
it only builds the ``st.App``.
"""

from __future__ import annotations

import streamlit as st


def main() -> None:
    from storage.errors import StorageError
    from ui import data, identity, nav, sidebar
    from ui.errors import show_storage_error

    data.forget_reused()
    st.set_page_config(page_title="Refract", page_icon=":material/flare:", layout="wide")
    page = st.navigation([*nav.pages().values(), nav.runs_alias()],
                         position="hidden" if identity.signed_out() else "sidebar")
    identity.sign_in_gate(page.url_path or "runs")  # with sign-in configured, nothing below is drawn for a stranger
    try:
        sidebar.render()
        page.run()
    except StorageError as exc:  # unreachable database, a read over its time limit …: say so, not a traceback
        show_storage_error(exc)


if __name__ == "__main__":
    main()
else:
    import logging
    from contextlib import asynccontextmanager
    from pathlib import Path

    from ui.serving import check_or_exit

    check_or_exit()  # no sign-in: loopback only, unless forced (before the server listens)

    @asynccontextmanager
    async def lifespan(_app):
        from storage import settings
        from storage.db import DEFAULT_DATA_DIR, default_url
        from engine.worker.supervisor import WorkerSupervisor

        if settings.value("REFRACT_WORKER") is False:
            logging.getLogger("refract").info("REFRACT_WORKER=0: not starting an engine worker")
            yield {}
            return
        supervisor = WorkerSupervisor(default_url(), lock_dir=DEFAULT_DATA_DIR, cwd=Path(__file__).resolve().parent)
        supervisor.start()
        try:
            yield {"worker_supervisor": supervisor}
        finally:
            supervisor.stop()

    # Streamlit treats a folder named pages/ as the old (v1) multipage layout until the first
    # st.navigation call of the process: a deep link (/candidate?run=…) opened before anyone
    # loaded "/" would run that page file alone, without this file's navigation and sidebar.
    # The studio always registers its pages with st.navigation, so switch v1 off up front.
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False

    app = st.App(__file__, lifespan=lifespan)
