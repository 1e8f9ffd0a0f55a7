"""Start run on the New run page: the person is named, the last try did not fail, and the run's
LMs answer one short request — only then is the run created. Every refusal is shown at its field
and nothing is stored.

The LMs are asked by the engine worker (a ``check_lm`` job with the config, ``engine.lm.check``),
never by the page: ``begin`` queues it, ``waiting_panel`` polls it, and ``finish`` — at the top of
the next full run of the page — creates the run or puts the problems under their fields. A run
whose LMs are all the built-in local model (nothing to connect to) is created at once.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

import streamlit as st

from engine.access import Refused
from engine.config import ConfigError, RunConfig
from engine.worker.jobs import CHECK_LM, request_job
from engine.lm.providers import is_local
from engine.sandbox import EvaluatorCompileError
from storage import jobs as job_store
from storage.errors import StorageError
from ui import data, identity, jobs, keys as K, lm_form, nav, run_form
from ui.errors import shows_storage_errors
from ui.render import fmt_seconds
from ui.sidebar import engine_alive

NO_NAME = ("Who am I: enter your name in the sidebar first — the run is recorded as yours, and steering it "
           "(pause, pin, veto, edit) records who did it.")


def begin(cfg: RunConfig, draft: dict) -> None:
    """Start was clicked on a valid form (``draft``): refuse it at its field, or ask the LMs, or
    create the run."""
    if identity.current_actor() is None:  # local mode, nobody named: said by the button
        st.error(NO_NAME, icon=":material/person:")
        return
    problem = _refusal(cfg, draft)
    if problem:
        _refuse(cfg, problem)
    if all(is_local(lm.model) for lm in (cfg.reflection_lm, cfg.task_lm, cfg.judge_lm) if lm is not None):
        _create(cfg)
        return
    try:
        job = request_job(data.get_db(), CHECK_LM, {"config": cfg.stored()}, identity.current_actor(),
                          roles=identity.role_map())
    except Refused as exc:
        st.error(str(exc), icon=":material/block:")
        return
    st.session_state[K.NEW_START_CHECK] = {"job": job, "config": cfg.stored()}
    st.rerun()


def _refusal(cfg: RunConfig, draft: dict) -> Optional[dict[str, list[str]]]:
    """Why Start must not go on, by form field: the last try of this evaluator and seed failed
    (at the LM's field when its LM did not answer)."""
    refusal = jobs.try_refusal(cfg)
    if refusal is None:
        return None
    section, message = refusal
    if section is None:
        return {K.NEW_PROMPT_ASSERTS if cfg.prompt_evaluator else K.NEW_EVALUATOR: [message]}
    own = section != "reflection_lm" and not draft.get(lm_form.OWN[section][0], True)
    return {lm_form.OWN[section][1] if own else K.NEW_MODEL: [message]}


def finish() -> None:
    """A finished LM check: create the run and open it, or show each problem under its field."""
    pending = st.session_state.get(K.NEW_START_CHECK)
    if not pending:
        return
    job = job_store.job_view(data.get_db(), pending["job"])
    if job is not None and job["status"] in job_store.ACTIVE:
        return
    st.session_state.pop(K.NEW_START_CHECK)
    result = (job or {}).get("result") or {}
    if job is None or job["error"]:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: [
            f"Not started: the LMs could not be checked ({(job or {}).get('error') or 'the check disappeared'})"]}
    elif not result.get("ok"):
        _refuse(RunConfig.model_validate(pending["config"]), run_form.errors_by_field("\n".join(result.get("problems") or [])))
    else:
        _create(RunConfig.model_validate(pending["config"]))


def waiting_panel() -> None:
    """While the LMs are being asked: what is happening, refreshed until the answer comes."""
    pending = st.session_state.get(K.NEW_START_CHECK)
    if not pending:
        return

    @st.fragment(run_every=jobs.POLL_S)
    @shows_storage_errors
    def panel() -> None:
        job = job_store.job_view(data.get_db(), pending["job"])
        if job is None or job["status"] not in job_store.ACTIVE:
            st.rerun(scope="app")  # answered: the page creates the run or shows the problems
        age = (datetime.now(timezone.utc) - (job["started_at"] or job["created_at"])).total_seconds()
        st.info(f"Asking each LM of the run one short question before the run is created… ({fmt_seconds(age)})",
                icon=":material/network_check:")
        if not engine_alive():
            st.warning("No engine worker is running, so the LMs cannot be asked yet: start the studio with `make run`, "
                       "or run `python -m engine worker` beside it.", icon=":material/power_off:")

    panel()


def _create(cfg: RunConfig) -> None:
    """Store the run and open its dashboard; a refusal at its field."""
    from engine.runs import submit_run

    try:
        run_id = submit_run(data.get_db(), cfg, actor=identity.current_actor(), roles=identity.role_map())
    except Refused as exc:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: [str(exc)]}
    except (EvaluatorCompileError, ConfigError) as exc:  # the evaluator loaded in the sandbox: said at its field
        _refuse(cfg, run_form.errors_by_field(str(exc)))
    except StorageError as exc:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: [f"The run could not be stored: {exc}"]}
    else:
        st.toast(f"Run {run_id} queued")
        nav.go("dashboard", run=run_id)
        return
    st.rerun()


def _refuse(cfg: RunConfig, errors: dict[str, list[str]]) -> None:
    """Show ``errors`` under their fields, and keep them there while ``cfg`` is unchanged."""
    st.session_state[K.NEW_ERRORS] = errors
    st.session_state[K.NEW_HELD_ERRORS] = {"config": cfg.stored(), "errors": errors}
    st.rerun()
