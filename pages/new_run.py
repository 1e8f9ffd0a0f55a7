"""New run: artifact, evaluator, dataset, LM, batch shape, budgets — validated field by field.

The draft lives in session state (``_new_draft``) and is saved to ``data/drafts/<user>.json`` on
every change, so nothing typed is lost on a validation error, a page switch or a reload.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from engine.worker.jobs import PREVIEW_EXAMPLES, TRY_EXAMPLES
from storage.db import DEFAULT_DATA_DIR
from ui import (branching, form_carry, form_checks, form_drafts, identity, jobs, keys as K, lm_section, paste_limit,
                prompt_form, prompt_section, run_form, speedup, start)
from ui.sidebar import current_user

DRAFT = "_new_draft"
EDITOR_VERSION = "_new_editor_version"
PLAIN_EDITOR = "new_plain_editor"
DRAFTS_DIR = DEFAULT_DATA_DIR / "drafts"

try:
    from streamlit_ace import st_ace
except ImportError:  # the plain text area below still works
    st_ace = None


@st.cache_data(show_spinner=False)
def _default_model() -> str:
    from engine.lm.defaults import default_model

    return default_model()


@st.cache_data(show_spinner=False)
def _default_model_reason() -> str:
    from engine.lm.defaults import default_model_reason

    return default_model_reason()


def _set_draft(draft: dict) -> None:
    """Replace the whole draft, widgets included (used by callbacks, before widgets render)."""
    st.session_state[DRAFT] = draft
    st.session_state.pop(K.NEW_LOADED, None)  # a loaded example sets it again after this
    for key, value in draft.items():
        if key != K.NEW_COMPONENTS:
            st.session_state[key] = value
    for i, comp in enumerate(draft.get(K.NEW_COMPONENTS) or []):
        st.session_state[K.NEW_COMP_NAME.format(i=i)] = comp["name"]
        st.session_state[K.NEW_COMP_TEXT.format(i=i)] = comp["text"]
    st.session_state[EDITOR_VERSION] = st.session_state.get(EDITOR_VERSION, 0) + 1
    st.session_state.pop(K.NEW_ERRORS, None)
    st.session_state.pop(K.NEW_TRY_RESULT, None)


def _init() -> dict:
    if K.NEW_OPEN_EXAMPLE in st.session_state:  # "Open in the form" on the empty Runs page
        st.session_state[K.NEW_TEMPLATE] = st.session_state.pop(K.NEW_OPEN_EXAMPLE)
        _load_template()
    if K.NEW_PREFILL in st.session_state:  # "duplicate config" from the Runs page
        _set_draft(run_form.draft_from_config(st.session_state.pop(K.NEW_PREFILL), _default_model()))
    if DRAFT not in st.session_state:
        saved = form_drafts.load_draft(DRAFTS_DIR, current_user())
        draft = run_form.default_draft(_default_model())
        draft.update(saved or {})
        _set_draft(draft)
    draft = st.session_state[DRAFT]
    for key, value in draft.items():  # widgets forgotten on a page switch come back from the draft
        if key != K.NEW_COMPONENTS and key not in st.session_state:
            st.session_state[key] = value
    for i, comp in enumerate(draft.get(K.NEW_COMPONENTS) or []):
        st.session_state.setdefault(K.NEW_COMP_NAME.format(i=i), comp["name"])
        st.session_state.setdefault(K.NEW_COMP_TEXT.format(i=i), comp["text"])
    return draft


def _errors(key: str) -> None:
    """The validation messages that belong to this field, right under it."""
    for reason in (st.session_state.get(K.NEW_ERRORS) or {}).get(key, []):
        st.error(reason, icon=":material/error:")


def _shown(line: str) -> bool:
    """Whether the dataset's "field: reason" ``line`` is already shown under the dataset field
    (after a refused Start): said once, not twice."""
    shown = (st.session_state.get(K.NEW_ERRORS) or {}).get(K.NEW_DATA_SOURCE, [])
    return line.partition(": ")[2] in shown or line in shown


def _load_template() -> None:
    name = st.session_state.get(K.NEW_TEMPLATE)
    path = run_form.list_templates().get(name)
    if path is None:
        return
    draft, problems = run_form.template_draft(path, _default_model())
    _set_draft(draft)
    st.session_state[K.NEW_LOADED] = draft.get(K.NEW_NAME) or name
    if problems:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: problems}


def _load_toml() -> None:
    uploads = st.session_state.get(K.NEW_TOML) or []
    tomls = [u for u in uploads if u.name.endswith(".toml")]
    if len(tomls) != 1:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: ["config TOML: upload exactly one .toml file "
                                                             "(with the evaluator and dataset files it names)"]}
        return
    files = {u.name: u.getvalue().decode("utf-8", errors="replace") for u in uploads}
    draft, problems = run_form.draft_from_toml(files[tomls[0].name], files, _default_model())
    if draft:
        _set_draft(draft)
    if problems:
        st.session_state[K.NEW_ERRORS] = {run_form.GENERAL: problems}


def _add_component() -> None:
    comps = st.session_state[DRAFT][K.NEW_COMPONENTS]
    comps.append({"name": f"component_{len(comps) + 1}", "text": ""})
    i = len(comps) - 1
    st.session_state[K.NEW_COMP_NAME.format(i=i)] = comps[i]["name"]
    st.session_state[K.NEW_COMP_TEXT.format(i=i)] = ""


def _delete_component(i: int) -> None:
    comps = st.session_state[DRAFT][K.NEW_COMPONENTS]
    comps = [{"name": st.session_state.get(K.NEW_COMP_NAME.format(i=j), c["name"]),
              "text": st.session_state.get(K.NEW_COMP_TEXT.format(i=j), c["text"])} for j, c in enumerate(comps) if j != i]
    st.session_state[DRAFT][K.NEW_COMPONENTS] = comps
    for j, c in enumerate(comps):
        st.session_state[K.NEW_COMP_NAME.format(i=j)] = c["name"]
        st.session_state[K.NEW_COMP_TEXT.format(i=j)] = c["text"]


def _reset() -> None:
    _set_draft(run_form.default_draft(_default_model()))


draft = _init()
start.finish()  # a Start whose LMs have answered: the run is created and opened, or the problems shown
form_checks.revalidate(DRAFT, run_form.validate)
st.title("New run")

# ------------------------------------------------------------------ start from
with st.container(border=True):
    t1, t2 = st.columns([3, 2])
    with t1:
        templates = run_form.list_templates()
        st.selectbox("Start from a built-in example", list(templates), index=None, placeholder="choose an example",
                     key=K.NEW_TEMPLATE)
        st.button("Load example", key=K.NEW_LOAD_TEMPLATE, on_click=_load_template,
                  disabled=not st.session_state.get(K.NEW_TEMPLATE))
    with t2:
        st.file_uploader("…or upload a config TOML (with its evaluator / dataset files)", type=["toml", "py", "jsonl",
                         "json", "csv", "txt"], accept_multiple_files=True, key=K.NEW_TOML, on_change=_load_toml)
    for problem in (st.session_state.get(K.NEW_ERRORS) or {}).get(run_form.GENERAL, []):
        st.error(problem, icon=":material/error:")
    if st.session_state.get(K.NEW_LOADED):
        first = "Preview on three examples" if prompt_form.is_prompt(draft) else "Try evaluator on the seed"
        st.info(f"Loaded the example **{st.session_state[K.NEW_LOADED]}**: every section below is filled in. "
                f"Read it top to bottom, then **{first}** to see how the seed scores, and **Start run**, both at "
                "the bottom of the form.", icon=":material/arrow_downward:")

branching.form_note(DRAFT)

# ------------------------------------------------------------------ what to optimize
st.subheader("1 · What to optimize")
st.text_input("Run name", key=K.NEW_NAME, max_chars=200)
_errors(K.NEW_NAME)
st.text_area("Objective", key=K.NEW_OBJECTIVE, height=80,
             help="What a better candidate does. Alone (no seed), the reflection LM writes the seed from it.")
_errors(K.NEW_OBJECTIVE)
c1, c2 = st.columns(2)
with c1:
    st.text_input("Artifact kind and format", key=K.NEW_KIND,
                  placeholder="e.g. a bare Python regex on one line",
                  help="Told to the reflection LM so that it answers with the right kind of text.")
with c2:
    st.text_input("Background (optional)", key=K.NEW_BACKGROUND)
mode = st.radio("Seed", run_form.SEED_MODES, horizontal=True, key=K.NEW_SEED_MODE)
_errors(K.NEW_SEED_MODE)
if mode == run_form.SEED_MODES[0]:
    st.text_area("Seed candidate", key=K.NEW_SEED_TEXT, height=140)
elif mode == run_form.SEED_MODES[1]:
    for i, _ in enumerate(draft[K.NEW_COMPONENTS]):
        n1, n2, n3 = st.columns([2, 7, 1], vertical_alignment="center")
        n1.text_input("Component name", key=K.NEW_COMP_NAME.format(i=i))
        n2.text_area("Text", key=K.NEW_COMP_TEXT.format(i=i), height=100)
        n3.button("", icon=":material/delete:", key=K.NEW_COMP_DEL.format(i=i), on_click=_delete_component, args=(i,),
                  help="remove this component", disabled=len(draft[K.NEW_COMPONENTS]) == 1)
    st.button("Add a component", icon=":material/add:", key=K.NEW_COMP_ADD, on_click=_add_component)
else:
    st.caption("The reflection LM writes the seed from the objective.")
if mode == run_form.SEED_MODES[0] and not (st.session_state.get(K.NEW_SEED_TEXT) or "").strip():
    st.caption(":material/info: The seed is empty: the reflection LM will write it from the objective."
               if (st.session_state.get(K.NEW_OBJECTIVE) or "").strip() else
               ":material/info: The seed is empty, and so is the objective: write the seed here, or an objective "
               "above for the reflection LM to write the seed from.")

# ------------------------------------------------------------------ evaluator
st.subheader("2 · Evaluator")
kind = st.radio("How candidates are scored", prompt_form.KINDS, horizontal=True, key=K.NEW_EVAL_KIND,
                format_func=lambda k: {"code": "code: a Python evaluator", "prompt": "prompt: a task LM and assertions"}[k])
if kind == "prompt":
    prompt_section.render(DRAFT, EDITOR_VERSION, _errors)
else:
    st.caption("Python: `evaluate(candidate)` without a dataset, `evaluate(candidate, example)` with one; return a "
               "score (higher is better) or `(score, side_info)`. An optional `validate(candidate)` returns an error "
               "message for proposals that should cost no evaluation. It runs in the sandbox, never in the studio.")
    plain = st.toggle("Plain text editor", key=PLAIN_EDITOR, value=st_ace is None, disabled=st_ace is None)
    if plain or st_ace is None:
        st.text_area("evaluator.py", key=K.NEW_EVALUATOR, height=320)
    else:
        code = st_ace(value=st.session_state[K.NEW_EVALUATOR], language="python", theme="tomorrow", font_size=13,
                      tab_size=4, show_gutter=True, wrap=False, auto_update=True, min_lines=16, height=320,
                      key=f"{K.NEW_EVALUATOR_ACE}_{st.session_state.get(EDITOR_VERSION, 0)}")
        if code is not None and code != st.session_state[K.NEW_EVALUATOR]:
            st.session_state[K.NEW_EVALUATOR] = code
    _errors(K.NEW_EVALUATOR)
lm_section.own_lm("task_lm", _errors)
if kind == "prompt":
    lm_section.own_lm("judge_lm", _errors)

# ------------------------------------------------------------------ dataset
st.subheader("3 · Dataset")
source = st.radio("Examples", run_form.DATA_SOURCES, horizontal=True, key=K.NEW_DATA_SOURCE)
if source == run_form.DATA_SOURCES[1]:
    up = st.file_uploader("CSV, JSONL or JSON (a list)", type=["csv", "jsonl", "json"], key=K.NEW_DATA_UPLOAD)
    if up is not None:
        text = up.getvalue().decode("utf-8", errors="replace")
        if text != st.session_state.get(K.NEW_DATA_TEXT):
            st.session_state[K.NEW_DATA_TEXT] = text
            st.session_state[K.NEW_DATA_FORMAT] = Path(up.name).suffix.lstrip(".").lower()
    elif st.session_state.get(K.NEW_DATA_TEXT):
        st.caption("Using the examples loaded before (switch to 'paste text' to see or edit them).")
elif source == run_form.DATA_SOURCES[2]:
    st.selectbox("Format", run_form.FORMATS, key=K.NEW_DATA_FORMAT)
    st.text_area("Examples", key=K.NEW_DATA_TEXT, height=160, placeholder='{"question": "…", "answer": "…"}',
                 help=f"Up to {form_checks.PASTE_LIMIT:,} characters (a few hundred rows); upload a file for more.")
elif source == run_form.SEPARATE:
    st.selectbox("Format", run_form.FORMATS, key=K.NEW_DATA_FORMAT)
    d1, d2, d3 = st.columns(3)
    d1.text_area("Training set (reflection reads it)", key=K.NEW_DATA_TEXT, height=180)
    d2.text_area("Validation set (selection; empty: the training set)", key=K.NEW_DATA_VAL_TEXT, height=180)
    d3.text_area("Held-out test set (optional, never seen by the search)", key=K.NEW_DATA_TEST_TEXT, height=180)
_errors(K.NEW_DATA_SOURCE)
paste_limit.limit_paste_boxes((K.NEW_DATA_TEXT, K.NEW_DATA_VAL_TEXT, K.NEW_DATA_TEST_TEXT))
DATA_KEYS = (K.NEW_DATA_SOURCE, K.NEW_DATA_TEXT, K.NEW_DATA_FORMAT, K.NEW_DATA_VAL_TEXT, K.NEW_DATA_TEST_TEXT,
             K.NEW_SPLIT_VAL, K.NEW_SPLIT_TEST, K.NEW_SPLIT_SEED)
if source == run_form.SEPARATE:
    splits, err = run_form.dataset_splits({k: st.session_state.get(k) for k in DATA_KEYS})
    if err and not _shown(err):
        st.error(err.removeprefix("valset: ").removeprefix("testset: "), icon=":material/error:")
    elif splits:
        train, val, test = splits
        st.caption(f"Splits as given: {len(train)} train · {len(val) or len(train)} validation"
                   f"{' (= train: multi-task)' if not val else ''} · {len(test)} test. Training preview:")
        st.dataframe(form_checks.preview_table(train), hide_index=True, width="stretch", height=200)
elif source != run_form.DATA_SOURCES[0]:
    snapshot = {k: st.session_state.get(k) for k in (K.NEW_DATA_SOURCE, K.NEW_DATA_TEXT, K.NEW_DATA_FORMAT)}
    rows, err = run_form.dataset_rows(snapshot, require=False)  # no text yet is not an error yet
    if err and not _shown(err):
        st.error(err, icon=":material/error:")
    elif rows:
        s1, s2, s3 = st.columns(3)
        s1.slider("Validation share %", 0, 80, key=K.NEW_SPLIT_VAL,
                  help="0: multi-task search (the dataset is also the validation set)")
        s2.slider("Held-out test share %", 0, 50, key=K.NEW_SPLIT_TEST, help="never seen by the search; reported at the end")
        s3.number_input("Split seed", 0, 10_000, key=K.NEW_SPLIT_SEED)
        train, val, test = run_form.split_rows(rows, st.session_state[K.NEW_SPLIT_VAL], st.session_state[K.NEW_SPLIT_TEST],
                                               st.session_state[K.NEW_SPLIT_SEED])
        st.caption(f"{len(rows)} examples → {len(train)} train · {len(val) or len(train)} validation"
                   f"{' (= train: multi-task)' if not val else ''} · {len(test)} test. Preview:")
        st.dataframe(form_checks.preview_table(rows), hide_index=True, width="stretch", height=200)

# ------------------------------------------------------------------ LM
st.subheader("4 · Reflection LM")
lm_section.reflection(_errors, _default_model(), _default_model_reason())

# ------------------------------------------------------------------ batch shape
st.subheader("5 · Batch shape and budgets")
# no bounds on these number widgets: the browser would refuse an out-of-range number silently
# and keep the previous value (a minibatch of 0 stayed 3); the validation refuses it by name,
# under the very field (a message under the row did not say which of four it was)
for col, (label, key, help_) in zip(st.columns(4), (
        ("Parents per step (P)", K.NEW_P, "1 to 64"), ("Proposals per parent (K)", K.NEW_K, "1 to 64"),
        ("Workers (W)", K.NEW_WORKERS, "1 to 256"), ("Minibatch size", K.NEW_MINIBATCH, "1 to 1000"))):
    with col:
        st.number_input(label, step=1, key=key, help=help_)
        _errors(key)
o = st.columns(3)
o[0].selectbox("Parent selection", run_form.SELECTIONS, key=K.NEW_SELECTION)
o[1].selectbox("Children that pay a validation pass", run_form.ACCEPTS, key=K.NEW_ACCEPT,
               help="all improving children, only the best one of a step, or the top k (schedule async: every "
                    "improving child, whatever this says)")
o[2].toggle("Merge frontier candidates", key=K.NEW_MERGE,
            help="after a step, combine two frontier candidates that changed different lines of a common ancestor "
                 "(a three-way merge, no LM call)")
o2 = st.columns(3)
o2[0].selectbox("Schedule", run_form.SCHEDULES, key=K.NEW_SCHEDULE,
                help="sync: steps of P×K proposals, each step waits for its slowest reflection. async: P×K proposals "
                     "always in flight, the next starts as one ends; it pays off most when LM latencies vary")
o2[1].toggle("Merge improving siblings", key=K.NEW_MERGE_SIBLINGS,
             help="combine the improving children of a step (async: each improving child with the current best) and "
                  "validate the merge instead of each: a three-way merge when they changed different lines, the "
                  "reflection LM on a conflict")
for k in (K.NEW_SCHEDULE, K.NEW_MERGE_SIBLINGS):
    _errors(k)
st.caption(speedup.shape_note(*(st.session_state[k] for k in (K.NEW_P, K.NEW_K, K.NEW_ACCEPT, K.NEW_MERGE_SIBLINGS,
                                                                K.NEW_SCHEDULE)), model=st.session_state.get(K.NEW_MODEL, "")))
if st.session_state.get(K.NEW_CARRIED):
    st.caption("Also in this config, kept as they are (no field here: download the config as TOML below, edit it "
               "and upload it above): " + form_carry.summary(st.session_state[K.NEW_CARRIED]))
with st.expander("Predicted speed-up of this batch shape (runtime model)", expanded=True):
    speedup.estimate_panel(run_form.dataset_splits({k: st.session_state.get(k) for k in DATA_KEYS})[0])
for col, (label, key, step, help_) in zip(st.columns(4), (
        ("Max metric calls", K.NEW_MAX_CALLS, 1, "0: no limit; at most 10,000,000"),
        ("Max dollars", K.NEW_MAX_COST, 0.5, "0: no limit"), ("Max seconds", K.NEW_MAX_SECONDS, 60, "0: no limit; at most one year"),
        ("Stop at score", K.NEW_STOP_SCORE, 0.05, "0: never stop early"))):
    with col:  # unbounded, each message under its own field, as above
        st.number_input(label, step=step, key=key, help=help_)
        _errors(key)

# ------------------------------------------------------------------ save the draft
draft = form_checks.current_draft(DRAFT)
form_drafts.save_draft(DRAFTS_DIR, current_user(), draft)


# ------------------------------------------------------------------ try / validate / start
st.divider()
act = st.columns([1.4, 0.85, 0.9, 1.05, 0.9])  # the preview label is the longest
preview = prompt_form.is_prompt(draft)
try_clicked = act[0].button("Preview on three examples" if preview else "Try evaluator on the seed",
                            key=K.NEW_PREVIEW if preview else K.NEW_TRY, icon=":material/science:", width="stretch",
                            disabled=bool(identity.refusal_note("try_evaluator")))
validate_clicked = act[1].button("Validate", key=K.NEW_VALIDATE, icon=":material/rule:", width="stretch")
submit_clicked = act[2].button("Start run", key=K.NEW_SUBMIT, type="primary", icon=":material/play_arrow:", width="stretch",
                               disabled=bool(identity.refusal_note("create_run")))
if identity.refusal_note("create_run"):
    st.caption(identity.refusal_note("create_run"))
as_drawn = dict(draft)  # written when clicked (a large dataset made every rerun pay for the TOML)
act[3].download_button("Download as TOML", lambda: run_form.config_toml(as_drawn), file_name=run_form.toml_file_name(draft),
                       mime="application/toml", key=K.NEW_DOWNLOAD, on_click="ignore", icon=":material/download:",
                       width="stretch", help="this form's config as a file: every setting, the datasets and the "
                                            "evaluator inline; `python -m engine run FILE` or the upload above read it")
act[4].button("Clear the form", key=K.NEW_RESET, on_click=_reset, width="stretch")

if try_clicked or validate_clicked or submit_clicked:
    cfg, errors = run_form.validate(draft)
    st.session_state[K.NEW_ERRORS] = errors
    if errors:
        st.rerun()  # redraw with each message next to its field, and a summary by the buttons
    if try_clicked:
        # the rows as pasted (the results are labelled as the preview above numbers them); the
        # engine worker runs it in the sandbox; the panel below polls it
        jobs.start_try(cfg, run_form.dataset_rows(draft)[0], PREVIEW_EXAMPLES if preview else TRY_EXAMPLES)
    elif validate_clicked:
        note = "" if cfg.seed_candidate not in (None, "") else " No seed: the reflection LM writes it from the objective."
        st.success(f"Valid: {cfg.mode} run, {len(cfg.dataset or [])} training / {len(cfg.valset or cfg.dataset or [])} "
                   f"validation / {len(cfg.testset or [])} test examples.{note}")
    else:
        start.begin(cfg, draft)  # the run's LMs are asked first; then it is created and opened
start.waiting_panel()
errors_now = st.session_state.get(K.NEW_ERRORS) or {}
if errors_now:
    st.error(f"Not started: {sum(map(len, errors_now.values()))} problem(s) to fix, each shown under its field above: "
             + "; ".join(form_checks.field_label(k) for k in errors_now), icon=":material/arrow_upward:")

jobs.show_try(PREVIEW_EXAMPLES if preview else TRY_EXAMPLES, prompt=preview)
