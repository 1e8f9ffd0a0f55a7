"""The new-run page's engine jobs: "Try evaluator on the seed" and "Test connection".

The page never runs the work itself (a sandbox pool, a model that may take minutes to load): a
click queues a job (``storage.jobs``) that the engine worker runs, and a fragment polls it once
a second, showing what the worker reported so far and then the result. The job id lives in
session state, so the result stays on the page across reruns until the draft changes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Optional

import pandas as pd
import streamlit as st

from engine.access import Refused, local_actor
from engine.worker.jobs import CHECK_LM, TRY_EVALUATOR, TRY_EXAMPLES, request_job
from storage import jobs
from storage.states import JobStatus
from ui import data, identity, keys as K
from ui.errors import shows_storage_errors
from ui.prompt_view import is_prompt_side_info, show_evaluation
from ui.render import fmt_seconds, md, show_text
from ui.sidebar import engine_alive

POLL_S = 1.0


def start_try(cfg, rows: Optional[list] = None, examples: int = TRY_EXAMPLES) -> None:
    """Queue a try of the evaluator on the seed of a validated config, on the first ``examples``
    of ``rows`` (the dataset as pasted, so that the results are labelled as the preview numbers
    them; a prompt's Preview: ``PREVIEW_EXAMPLES``). An editor's, within their hourly limit:
    ``engine.worker.jobs.request_job`` checks; a refusal is shown here."""
    payload = {"config": cfg.stored(), "examples": examples, **({"rows": rows[:examples]} if rows else {})}
    request_into(TRY_EVALUATOR, payload, K.NEW_TRY_RESULT)


def try_refusal(cfg) -> Optional[tuple[Optional[str], str]]:
    """Why a run of ``cfg`` must not start: the last "Try evaluator" of this same evaluator, seed
    and sandbox could not run it, or the seed's ``validate`` refused it, or it failed on every
    example tried. ``(section, message)``: ``section`` is the LM (``task_lm`` / ``judge_lm``) when it
    failed because that LM did not answer, else None (the evaluator's fault). None when nothing
    refuses it (no try yet, a try still running, a try of another version)."""
    job_id = st.session_state.get(K.NEW_TRY_RESULT)
    job = jobs.job_view(data.get_db(), job_id) if job_id else None
    if job is None or job["status"] in jobs.ACTIVE:
        return None
    tried, now = job["payload"]["config"], cfg.stored()
    if tried.get("seed_candidate") in (None, "") or any(tried.get(k) != now.get(k) for k in TRIED_FIELDS):
        return None
    res = job["result"] or {}
    rows = res.get("results") or []
    if job["error"]:
        why = f"\"Try evaluator\" could not run it: {_last_line(job['error'])}"
    elif res.get("validate"):
        why = f"validate(seed) refused the seed in \"Try evaluator\": {_last_line(res['validate'])}"
    elif rows and all(r["error"] for r in rows):
        section = lm_that_failed(rows)
        if section:
            which = "task LM" if section == "task_lm" else "judge"
            return section, (f"Not started: the {which} did not answer in \"{'Preview' if cfg.prompt_evaluator else 'Try evaluator'}\" "
                             f"(first, {rows[0]['example']}: {_lm_reason(rows[0]['error'])}). The evaluator is fine: "
                             f"fix this LM's model, API base or key variable, then try again.")
        why = (f"the evaluator failed on all {len(rows)} example(s) \"Try evaluator\" ran (first, "
               f"{rows[0]['example']}: {_last_line(rows[0]['error'])})")
    else:
        return None
    return None, f"Not started: {why}. Fix the evaluator (the traceback is below), then try it again."


def lm_that_failed(rows: list[dict]) -> Optional[str]:
    """``task_lm`` / ``judge_lm`` when every failed example of a try failed because that LM did
    not answer (the engine's ``lm()`` handler says "task LM failed: …"), else None."""
    for section, marker in (("task_lm", "task LM failed: "), ("judge_lm", "judge LM failed: ")):
        if rows and all(marker in (r["error"] or "") for r in rows):
            return section
    return None


def _lm_reason(error: str) -> str:
    """The LM's own words in an evaluation error ("LMError: RuntimeError: task LM failed: X (evaluator.py, line 20)")."""
    tail = _last_line(error).split(" LM failed: ", 1)[-1]
    return tail.rsplit(" (evaluator", 1)[0]


TRIED_FIELDS = ("evaluator", "seed_candidate", "executor")  # what a try tried: another version is untried


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else text


def start_check(model: str, api_base: str, api_key_env: str, result_key: str = K.NEW_LM_RESULT) -> None:
    """Queue a connection test; its panel is drawn by ``show_check(result_key)``."""
    payload = {"model": model.strip(), "api_base": api_base.strip(), "api_key_env": api_key_env.strip()}
    request_into(CHECK_LM, payload, result_key)


def request_into(kind: str, payload: dict, key: str) -> None:
    """Queue a job of ``kind`` as the current person and keep its id under ``key``; a refusal is shown."""
    try:
        st.session_state[key] = request_job(data.get_db(), kind, payload, identity.current_actor() or local_actor(""),
                                            roles=identity.role_map())
    except Refused as exc:
        st.session_state.pop(key, None)
        st.error(str(exc), icon=":material/block:")


def show_try(examples: int = TRY_EXAMPLES, prompt: bool = False) -> None:
    """The try's panel; ``prompt``: it is the prompt path's Preview (the seed prompt's answers)."""
    title = "Preview: the seed prompt's answers" if prompt else "Evaluator on the seed"
    show_job(K.NEW_TRY_RESULT, title,
          f"waiting for the engine to run the evaluator on up to {examples} examples in the sandbox…", _try_result)


def show_check(result_key: str = K.NEW_LM_RESULT, field: str = "reflection_lm.model") -> None:
    """The connection test's panel; a failure is told as ``field: reason`` (the config field of
    the model tested), then the whole transcript."""
    show_job(result_key, "Connection test", "waiting for the engine to ask the model for one word…",
          lambda job: _check_result(job, field))


def show_job(key: str, title: str, waiting: str, render: Callable[[dict], None]) -> None:
    """The panel of the job whose id is under ``key``: its progress while it runs (polled), then ``render(job)``."""
    job_id = st.session_state.get(key)
    if not job_id:
        return
    first = jobs.job_view(data.get_db(), job_id)
    active = first is not None and first["status"] in jobs.ACTIVE

    @st.fragment(run_every=POLL_S if active else None)
    @shows_storage_errors
    def panel() -> None:
        job = jobs.job_view(data.get_db(), job_id)
        if job is None:
            st.session_state.pop(key, None)
            return
        if active and job["status"] not in jobs.ACTIVE:
            st.rerun(scope="app")  # finished: redraw once without polling
        with st.container(border=True):
            st.markdown(f"**{title}**")
            if job["status"] in jobs.ACTIVE:
                _progress(job, waiting)
            if job["error"]:
                st.error("It could not be done:")
                show_text(job["error"])
            render(job)

    panel()


def _progress(job: dict, waiting: str) -> None:
    since = job["started_at"] or job["created_at"]
    age = (datetime.now(timezone.utc) - since).total_seconds()
    text = md(job["progress"]) + "…" if job["status"] == JobStatus.RUNNING and job["progress"] else waiting
    st.info(f"{text} ({fmt_seconds(age)})", icon=":material/hourglass_top:")
    if not engine_alive():
        st.warning("No engine worker is running, so nothing will happen yet: the job waits for one. Start the "
                   "studio with `make run`, or run `python -m engine worker` beside it.", icon=":material/power_off:")


def _try_result(job: dict) -> None:
    res = job["result"] or {}
    if res.get("validate"):
        st.warning("validate(seed) rejected the seed:")
        show_text(res["validate"])
    rows = res.get("results") or []
    if not rows:
        return
    st.dataframe(pd.DataFrame([_try_row(r) for r in rows]), hide_index=True, width="stretch",
                 column_config={"score": st.column_config.NumberColumn(format="%.3f"),
                                "seconds": st.column_config.NumberColumn(format="%.2f")})
    for r in rows:
        label = f"{md(r['example'])} · score {r['score']:.3f} · {r['seconds']:.2f} s" + (" · failed" if r["error"] else "")
        with st.expander(label, expanded=bool(r["error"])):
            if r["error"]:
                show_text(r["error"])
            show_evaluation(r["side_info"])


def _try_row(r: dict) -> dict:
    """One example of a try as a table row; a prompt evaluator's answer and failed assertions
    in it, so that they show without opening each example."""
    row = {"example": r["example"], "score": r["score"]}
    side = r.get("side_info") or {}
    if is_prompt_side_info(side):
        row["answer"] = side["output"]
        row["failed assertions"] = ", ".join(a["assertion"] for a in side["assertions"] if not a["passed"])
    row["seconds"] = r["seconds"]
    row["error"] = (r["error"] or "").strip().splitlines()[-1] if r["error"] else ""
    return row


def _check_result(job: dict, field: str) -> None:
    res = job["result"] or {}
    if "ok" not in res:
        return
    if res["ok"]:
        st.success("The model answered.", icon=":material/check_circle:")
    else:
        st.error(f"{field}: {failure_reason(res['output'])}", icon=":material/error:")
    show_text(res["output"])


def failure_reason(output: str) -> str:
    """The reason in ``python -m engine check-lm``'s transcript, from its last ``error…:`` line
    (``error after 0.41 s: OPENAI_API_KEY not set…`` → ``no answer after 0.41 s: OPENAI_API_KEY not set…``)."""
    errors = [line for line in output.splitlines() if line.startswith("error")]
    if not errors:
        return _last_line(output) or "the model did not answer"
    head, _, reason = errors[-1].partition(": ")
    when = head.removeprefix("error").strip()  # "after 0.41 s" when the model was asked
    return f"no answer {when}: {reason}" if when else reason or head
