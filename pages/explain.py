"""Step explained (``explain?run=RUN&step=N``): one step of a live or finished run, phase by
phase, each phase a short plain explanation beside that step's real data; previous / next
step; on a paused run, "run one step" (the ``step`` command, as the dashboard's "Step once")
that opens the new step when the engine has run it; the runtime model beside it.
"""

from __future__ import annotations

import streamlit as st

from storage import explain_queries
from ui import data, explain_model as em, explain_view as view, identity, interventions, nav
from ui.render import md
from ui.teaching_keys import EXPLAIN_PICK_STEP, EXPLAIN_RUN_ONE, EXPLAIN_WAITING, QP_STEP

url = data.db_url()
run_id, run = nav.linked_run(url, "Step explained", "Open a step from a run's dashboard (the Steps table's "
                             "“explain” links); its link carries `?run=…&step=…`.")
db = data.get_db()
indexes = explain_queries.step_indexes(db, run_id)


def _open(index: int) -> None:
    """Show step ``index`` (a button callback)."""
    st.query_params[QP_STEP] = str(index)


@st.fragment(run_every=1.0)
def _wait_for_step(before: int) -> None:
    """Poll until the engine has run the asked-for step and paused again, then open it."""
    now = data.run_overview(url, run_id)
    if now is None or now["steps_done"] <= before or now["status"] == "running":
        st.caption("The engine is running one step… this page opens it when it is done.")
        return
    st.session_state.pop(EXPLAIN_WAITING, None)
    newest = explain_queries.step_indexes(db, run_id)[-1]
    st.switch_page(nav.pages()["explain"], query_params={"run": run_id, QP_STEP: str(newest)})


def _run_one_step() -> None:
    waiting = st.session_state.get(EXPLAIN_WAITING)
    if waiting and waiting[0] == run_id:
        _wait_for_step(waiting[1])
        return
    if run["status"] != "paused":
        if run["status"] in ("running", "queued"):
            st.caption("To watch one step at a time, pause the run on its dashboard; then “Run one step” appears here.")
        return
    if st.button("Run one step", key=EXPLAIN_RUN_ONE, icon=":material/skip_next:", type="primary",
                 disabled=not identity.may("step"),
                 help="Send the `step` command: the engine runs exactly one step, pauses again, and this page opens it."):
        out = interventions.send(db, run_id, "step", None, identity.current_actor(), reason="explain: run one step")
        if not out.ok:
            st.error(out.message)
            return
        st.session_state[EXPLAIN_WAITING] = (run_id, run["steps_done"])
        st.rerun()


st.title("Step explained")
if not indexes:
    st.info(f"Run {md(run['name'])} has not started a step yet.")
    _run_one_step()
    st.stop()
asked = st.query_params.get(QP_STEP)
index = int(asked) if asked and asked.lstrip("-").isdigit() and int(asked) in indexes else indexes[-1]
if asked and str(index) != asked:
    st.warning(f"Run {md(run_id)} has no step {md(asked)}; showing step {index}.")

head = st.columns([3, 1, 1, 1], vertical_alignment="bottom")
with head[0]:
    st.session_state[EXPLAIN_PICK_STEP] = index  # the URL decides which step is shown
    st.selectbox(f"Step (this run has steps {indexes[0]}–{indexes[-1]})", indexes, key=EXPLAIN_PICK_STEP,
                 format_func=lambda i: f"step {i}", on_change=lambda: _open(st.session_state[EXPLAIN_PICK_STEP]))
pos = indexes.index(index)
with head[1]:
    if pos > 0:
        st.button("Previous step", icon=":material/arrow_back:", on_click=_open, args=(indexes[pos - 1],))
with head[2]:
    if pos + 1 < len(indexes):
        st.button("Next step", icon=":material/arrow_forward:", on_click=_open, args=(indexes[pos + 1],))
with head[3]:
    nav.link("dashboard", "Run dashboard", run=run_id, icon=":material/monitoring:")
st.caption(f"run {md(run['name'])} (`{run_id}`, {run['status']}). A step takes parents from the frontier, "
           "reflects on their mistakes to write new versions, tests them, and keeps what improves.")
_run_one_step()

detail = explain_queries.step_detail(db, run_id, index)
if detail is None:
    st.error("This step disappeared from the database.")
    st.stop()
config = run.get("config") or {}
if detail["step"]["ended_at"] is None:
    st.warning("This step is still running: the phases below fill in as it records its work.")
kids = em.proposals(detail)
before, after = em.frontier_at(detail, index, products=False), em.frontier_at(detail, index)

main, side = st.columns([3, 1], gap="large")
with main:
    phases = (lambda: view.parents(detail, before), lambda: view.minibatch(detail),
              lambda: view.reflection(detail, kids), lambda: view.proposals(kids),
              lambda: view.acceptance(kids, config), lambda: view.frontier_update(detail, before, after))
    for tab, show in zip(st.tabs(list(view.PHASES)), phases):
        with tab:
            show()
with side:
    view.runtime_panel(detail, config)
