"""The new-run form's logic, without Streamlit: the draft (widget key → value), turning it into a
config dict, splitting a dataset, mapping ``ConfigError`` lines to form fields, built-in
templates and uploaded TOML files, and saving drafts to disk.

A draft is a plain dict keyed by the widget keys of ``ui.keys``, so the page can hand it to
widgets as session state and tests can build one directly.
"""

from __future__ import annotations

import functools
import json
import random
import re
import tomllib
from pathlib import Path
from typing import Any, Optional

from engine.config import LOCAL_MODEL, ConfigError, default_proposals, default_shape, parse_config, parse_toml
from engine.lm.providers import is_local
from engine.datasets import DatasetError, parse_dataset
from ui import form_carry, form_checks, keys as K, lm_form, prompt_form

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples"
SEED_MODES = ("single text", "named components", "objective only")
DATA_SOURCES = ("no dataset (single-task)", "upload a file", "paste text", "separate train / val / test")
SEPARATE = DATA_SOURCES[3]
FORMATS = ("jsonl", "json", "csv")
SELECTIONS = ("pareto", "best", "epsilon_greedy", "top_k_pareto")
ACCEPTS = ("all", "best", "top_k")
SCHEDULES = ("sync", "async")

EVALUATOR_TEMPLATE = '''"""evaluate(candidate, example) -> score | (score, side_info). Higher is better."""


def evaluate(candidate, example):
    answer = example["answer"]
    ok = answer.lower() in candidate.lower()
    return (1.0 if ok else 0.0), {"expected": answer, "feedback": "mention the answer" if not ok else "ok"}
'''


_DEFAULT_SHAPE = default_shape(4, "sync")  # the form's 2×2 step


def default_draft(model: str = "") -> dict:
    # on the local model one parent and its samples of one prompt, as a config that does not say (engine.config)
    local = is_local(model or LOCAL_MODEL)
    p, k = (1, default_proposals(True)) if local else (2, 2)
    shape = default_shape(p * k, "sync", local)
    return {
        K.NEW_NAME: "", K.NEW_OBJECTIVE: "", K.NEW_BACKGROUND: "", K.NEW_KIND: "",
        K.NEW_SEED_MODE: SEED_MODES[0], K.NEW_SEED_TEXT: "",
        K.NEW_COMPONENTS: [{"name": "system_prompt", "text": ""}],
        K.NEW_EVALUATOR: EVALUATOR_TEMPLATE,
        K.NEW_DATA_SOURCE: DATA_SOURCES[0], K.NEW_DATA_TEXT: "", K.NEW_DATA_FORMAT: "jsonl",
        K.NEW_DATA_VAL_TEXT: "", K.NEW_DATA_TEST_TEXT: "",
        K.NEW_SPLIT_VAL: 0, K.NEW_SPLIT_TEST: 0, K.NEW_SPLIT_SEED: 0,
        **lm_form.defaults(model),
        K.NEW_P: p, K.NEW_K: k, K.NEW_WORKERS: 4, K.NEW_MINIBATCH: 3,
        K.NEW_SELECTION: "pareto", K.NEW_ACCEPT: shape["accept"], K.NEW_MERGE: False,
        K.NEW_MERGE_SIBLINGS: shape["merge_siblings"], K.NEW_SCHEDULE: "sync",
        K.NEW_CARRIED: {}, K.NEW_BRANCH: None,
        K.NEW_MAX_CALLS: 500, K.NEW_MAX_COST: 0.0, K.NEW_MAX_SECONDS: 0, K.NEW_STOP_SCORE: 0.0,
        **prompt_form.defaults(),
    }


# ---------------------------------------------------------------- draft → config


def split_rows(rows: list, val_pct: int, test_pct: int, seed: int) -> tuple[list, list, list]:
    """Shuffle (Random(seed)) and cut into train / val / test by percentages."""
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    n = len(rows)
    n_test = round(n * test_pct / 100)
    n_val = round(n * val_pct / 100)
    test, val, train = rows[:n_test], rows[n_test:n_test + n_val], rows[n_test + n_val:]
    return train, val, test


def dataset_rows(draft: dict, require: bool = True) -> tuple[Optional[list], Optional[str]]:
    """The parsed dataset of a draft in the order given (None when it has none), or the error
    message. ``require=False`` (a preview while typing): no text yet is no error."""
    source = draft.get(K.NEW_DATA_SOURCE, DATA_SOURCES[0])
    if source == DATA_SOURCES[0]:
        return None, None
    text = draft.get(K.NEW_DATA_TEXT) or ""
    if not text.strip():
        return None, "dataset: empty; upload or paste examples, or choose 'no dataset'" if require else None
    where = "the uploaded file" if source == DATA_SOURCES[1] else "the pasted text"
    if source != DATA_SOURCES[1] and form_checks.paste_cut(text):
        return None, f"dataset: {form_checks.PASTE_CUT}"
    rows, err = parsed(text, draft.get(K.NEW_DATA_FORMAT) or "jsonl", where)
    return (list(rows), None) if err is None else (None, f"dataset: {err}")


@functools.lru_cache(maxsize=8)
def parsed(text: str, fmt: str, name: str) -> tuple[tuple, Optional[str]]:
    """``parse_dataset`` remembered: every rerun of the form reads the dataset several times
    (its preview, the prompt's placeholders, the speed-up estimate, the validation), and
    10,000 rows took seconds a rerun. (rows, None) or ((), the error)."""
    try:
        return tuple(parse_dataset(text, fmt, name=name)), None
    except DatasetError as exc:
        return (), str(exc)


def dataset_splits(draft: dict) -> tuple[Optional[tuple[list, list, list]], Optional[str]]:
    """(train, val, test) of a draft: as given with separate sets, else the shuffled shares of
    ``split_rows``. None when the draft has no dataset; else the error message."""
    rows, err = dataset_rows(draft)
    if err or rows is None:
        return None, err
    if draft.get(K.NEW_DATA_SOURCE) != SEPARATE:
        return split_rows(rows, int(draft.get(K.NEW_SPLIT_VAL) or 0), int(draft.get(K.NEW_SPLIT_TEST) or 0),
                          int(draft.get(K.NEW_SPLIT_SEED) or 0)), None
    sets = [rows]
    for key, field, name in ((K.NEW_DATA_VAL_TEXT, "valset", "validation set"), (K.NEW_DATA_TEST_TEXT, "testset", "test set")):
        text = draft.get(key) or ""
        if not text.strip():
            sets.append([])
            continue
        if form_checks.paste_cut(text):
            return None, f"{field}: {form_checks.PASTE_CUT}"
        rows, err = parsed(text, draft.get(K.NEW_DATA_FORMAT) or "jsonl", name)
        if err is not None:
            return None, f"{field}: {err}"
        sets.append(list(rows))
    return (sets[0], sets[1], sets[2]), None


def config_from_draft(draft: dict) -> tuple[dict, list[str]]:
    """The config dict a draft describes, and the problems found before validation (dataset)."""
    d = draft
    cfg: dict[str, Any] = {"name": (d.get(K.NEW_NAME) or "").strip(), "objective": d.get(K.NEW_OBJECTIVE) or "",
                           "background": d.get(K.NEW_BACKGROUND) or "", "artifact_kind": d.get(K.NEW_KIND) or "",
                           "evaluator": d.get(K.NEW_EVALUATOR) or ""}
    mode = d.get(K.NEW_SEED_MODE, SEED_MODES[0])
    if mode == SEED_MODES[0] and (d.get(K.NEW_SEED_TEXT) or "").strip():
        cfg["seed_candidate"] = d[K.NEW_SEED_TEXT]
    elif mode == SEED_MODES[1]:
        cfg["seed_candidate"] = {c["name"].strip(): c["text"] for c in d.get(K.NEW_COMPONENTS) or [] if c["name"].strip()}
    problems: list[str] = []
    if mode == SEED_MODES[1]:
        names = [c["name"].strip() for c in d.get(K.NEW_COMPONENTS) or []]
        if any(not n for n in names):
            problems.append("seed_candidate: every component needs a name")
        if len(set(names)) != len(names):
            problems.append("seed_candidate: two components have the same name")
    splits, err = dataset_splits(d)
    if err:
        problems.append(err)
    elif splits is not None:
        train, val, test = splits
        cfg["dataset"] = train
        if val:
            cfg["valset"] = val
        if test:
            cfg["testset"] = test
        if not train:
            problems.append("dataset: the split leaves no training examples; lower the validation / test shares")
    # the numbers as typed (0 included): the config refuses them by name, never silently replaced
    cfg["search"] = {"parents_per_step": _whole(d.get(K.NEW_P)), "proposals_per_parent": _whole(d.get(K.NEW_K)),
                     "minibatch_size": _whole(d.get(K.NEW_MINIBATCH)), "selection": d.get(K.NEW_SELECTION) or "pareto",
                     # asynchronously every improving child is validated: "all" is the one rule there
                     "accept": ("all" if d.get(K.NEW_SCHEDULE) == "async"
                                else d.get(K.NEW_ACCEPT) or _DEFAULT_SHAPE["accept"]),
                     "merge": bool(d.get(K.NEW_MERGE)),
                     "merge_siblings": bool(d.get(K.NEW_MERGE_SIBLINGS)), "schedule": d.get(K.NEW_SCHEDULE) or "sync"}
    cfg["budget"], budget_problems = form_checks.budget(d)
    problems += budget_problems
    cfg.update(lm_form.config_part(d))
    cfg["executor"] = {"workers": _whole(d.get(K.NEW_WORKERS))}
    if prompt_form.is_prompt(d):
        del cfg["evaluator"]
        cfg.update(prompt_form.config_part(d))
    form_carry.apply(cfg, d.get(K.NEW_CARRIED) or {})
    if d.get(K.NEW_BRANCH):  # a branch (engine/branch.py): its base run and candidates go with it
        cfg["branch"] = d[K.NEW_BRANCH]
    return cfg, problems


def _whole(value: Any) -> Any:
    """A number field's value as a whole number when it is one; anything else as it is (the
    config then says what is wrong with it)."""
    return int(value) if isinstance(value, (int, float)) and float(value).is_integer() else value


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def config_toml(draft: dict) -> str:
    """The draft's config as a TOML file that ``python -m engine run`` (or the upload above the form)
    reads back to the same config: datasets and the evaluator inline, unset values left out (TOML
    has no null)."""
    import tomli_w

    cfg, _ = config_from_draft(draft)
    return tomli_w.dumps(_without_none(cfg), multiline_strings=True)


def toml_file_name(draft: dict) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", (draft.get(K.NEW_NAME) or "").lower()).strip("-")
    return f"{slug or 'refract-run'}.toml"


# which widget a "field: reason" line belongs next to
FIELD_KEYS = {
    "name": K.NEW_NAME, "objective": K.NEW_OBJECTIVE, "background": K.NEW_BACKGROUND, "artifact_kind": K.NEW_KIND,
    "seed_candidate": K.NEW_SEED_MODE, "evaluator": K.NEW_EVALUATOR, "dataset": K.NEW_DATA_SOURCE,
    "valset": K.NEW_DATA_SOURCE, "testset": K.NEW_DATA_SOURCE,
    "search.parents_per_step": K.NEW_P, "search.proposals_per_parent": K.NEW_K, "search.minibatch_size": K.NEW_MINIBATCH,
    "search.selection": K.NEW_SELECTION, "search.accept": K.NEW_ACCEPT, "search.schedule": K.NEW_SCHEDULE,
    "search.merge_siblings": K.NEW_MERGE_SIBLINGS, "search": K.NEW_P,
    "budget.max_metric_calls": K.NEW_MAX_CALLS, "budget.max_cost_usd": K.NEW_MAX_COST,
    "budget.max_seconds": K.NEW_MAX_SECONDS, "budget.stop_at_score": K.NEW_STOP_SCORE, "budget": K.NEW_MAX_CALLS,
    "executor.workers": K.NEW_WORKERS, "executor": K.NEW_WORKERS,
    **lm_form.FIELD_KEYS, **prompt_form.FIELD_KEYS,
}
GENERAL = form_checks.GENERAL
def errors_by_field(message: str) -> dict[str, list[str]]:
    """Map each "field: reason" line of a ConfigError to the widget key it belongs next to.
    Lines about the config as a whole ("(config)") go where their text points (seed / dataset)."""
    out: dict[str, list[str]] = {}
    for line in message.splitlines():
        if not line.strip():
            continue
        field, _, reason = line.partition(": ")
        if not reason:
            field, reason = "(config)", line
        key = None
        parts = field.split(".")
        for n in range(len(parts), 0, -1):
            key = FIELD_KEYS.get(".".join(parts[:n]))
            if key:
                break
        if key is None:  # model-level errors name the field in their text
            for word, k in (("seed_candidate", K.NEW_SEED_MODE), ("dataset", K.NEW_DATA_SOURCE),
                            ("testset", K.NEW_DATA_SOURCE), ("valset", K.NEW_DATA_SOURCE)):
                if word in reason:
                    key = k
                    break
        out.setdefault(key or GENERAL, []).append(reason if key else line)
    return out


# the config's words for a problem, in the form's (its labels, not the config's names)
FORM_WORDS = {"missing; give a seed_candidate, or an objective from which the reflection LM writes the seed":
              "the seed candidate is empty, and so is the objective: write the seed, or an objective (above) for "
              "the reflection LM to write the seed from"}


def _in_form_words(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    return {key: [FORM_WORDS.get(reason, reason) for reason in reasons] for key, reasons in errors.items()}


def validate(draft: dict):
    """(RunConfig, {}) when the draft is valid, else (None, errors by widget key)."""
    cfg, problems = config_from_draft(draft)
    if problems:
        return None, _in_form_words(errors_by_field("\n".join(problems)))
    try:
        run_cfg = parse_config(cfg, base_dir=ROOT)
    except ConfigError as exc:
        return None, _in_form_words(errors_by_field(str(exc)))
    try:
        from engine.sandbox import EvaluatorCompileError, check_evaluator_source

        check_evaluator_source(run_cfg.evaluator)
    except EvaluatorCompileError as exc:
        return None, {K.NEW_PROMPT_ASSERTS if prompt_form.is_prompt(draft) else K.NEW_EVALUATOR: [str(exc)]}
    return run_cfg, {}


# ---------------------------------------------------------------- templates and TOML


def list_templates(folder: Path = EXAMPLES_DIR) -> dict[str, Path]:
    """Built-in examples: every ``examples/*/config.toml`` (and ``examples/*.toml``), by name."""
    found: dict[str, Path] = {}
    for path in sorted(list(folder.glob("*/config.toml")) + list(folder.glob("*.toml"))):
        try:
            name = tomllib.loads(path.read_text()).get("name") or path.parent.name
        except (OSError, tomllib.TOMLDecodeError):
            continue
        found[f"{name} ({path.parent.name if path.name == 'config.toml' else path.stem})"] = path
    return found


def draft_from_toml(text: str, files: dict[str, str], model_default: str = "") -> tuple[dict, list[str]]:
    """A draft from a config TOML; ``files`` maps file names to contents for *_file entries
    (the folder of a built-in example, or other files uploaded with the TOML)."""
    try:
        data = parse_toml(text, "the TOML file")
    except ConfigError as exc:
        return {}, [str(exc)]
    problems = []
    for key in ("evaluator", "dataset", "valset", "testset"):
        fkey = f"{key}_file"
        if fkey in data:
            name = Path(str(data.pop(fkey))).name
            if name not in files:
                problems.append(f"{fkey}: {name} was not uploaded; upload it together with the TOML, or paste it")
                continue
            if key == "evaluator":
                data["evaluator"] = files[name]
            else:
                try:
                    data[key] = parse_dataset(files[name], Path(name).suffix, name=name)
                except DatasetError as exc:
                    problems.append(f"{fkey}: {exc}")
    return draft_from_config(data, model_default), problems


def draft_from_config(cfg: dict, model_default: str = "") -> dict:
    """A draft holding a (stored or TOML) config. A dataset alone is pasted as JSONL; separate
    validation / test sets are kept as they are (the "separate train / val / test" source), so a
    built-in example or a duplicated run keeps its exact splits."""
    model = (cfg.get("reflection_lm") or {}).get("model") or model_default or LOCAL_MODEL
    d = default_draft(model)  # the P × K a config that sets neither runs with its reflection LM
    d[K.NEW_NAME] = cfg.get("name", "")
    d[K.NEW_OBJECTIVE] = cfg.get("objective", "")
    d[K.NEW_BACKGROUND] = cfg.get("background", "")
    d[K.NEW_KIND] = cfg.get("artifact_kind", "")
    seed = cfg.get("seed_candidate")
    if isinstance(seed, dict):
        d[K.NEW_SEED_MODE] = SEED_MODES[1]
        d[K.NEW_COMPONENTS] = [{"name": k, "text": v} for k, v in seed.items()]
    elif seed:
        d[K.NEW_SEED_MODE], d[K.NEW_SEED_TEXT] = SEED_MODES[0], seed
    else:
        d[K.NEW_SEED_MODE] = SEED_MODES[2]
    if cfg.get("prompt_evaluator"):  # a stored config also holds the generated source: the table wins
        d.update(prompt_form.draft_part(cfg))
    elif cfg.get("evaluator"):
        d[K.NEW_EVALUATOR] = cfg["evaluator"]
    train, val, test = cfg.get("dataset") or [], cfg.get("valset") or [], cfg.get("testset") or []
    if train:
        d[K.NEW_DATA_SOURCE] = SEPARATE if (val or test) else DATA_SOURCES[2]
        d[K.NEW_DATA_FORMAT] = "jsonl"
        d[K.NEW_DATA_TEXT], d[K.NEW_DATA_VAL_TEXT], d[K.NEW_DATA_TEST_TEXT] = (_jsonl(rows) for rows in (train, val, test))
    s, b = cfg.get("search") or {}, cfg.get("budget") or {}
    ex = cfg.get("executor") or {}
    d[K.NEW_P] = s.get("parents_per_step", d[K.NEW_P])
    d[K.NEW_K] = s.get("proposals_per_parent", d[K.NEW_K])
    d[K.NEW_MINIBATCH] = s.get("minibatch_size", d[K.NEW_MINIBATCH])
    d[K.NEW_SELECTION] = s.get("selection", d[K.NEW_SELECTION])
    d[K.NEW_SCHEDULE] = s.get("schedule", "sync")
    d[K.NEW_MERGE] = bool(s.get("merge", False))
    # a file that sets neither key runs the default shape of its P × K: the form shows that one
    shape = default_shape(int(d[K.NEW_P] or 1) * int(d[K.NEW_K] or 1), d[K.NEW_SCHEDULE], is_local(model))
    if "accept" not in s and "merge_siblings" not in s and not (d[K.NEW_SCHEDULE] == "async" and d[K.NEW_MERGE]):
        d[K.NEW_ACCEPT], d[K.NEW_MERGE_SIBLINGS] = shape["accept"], shape["merge_siblings"]
    else:
        d[K.NEW_ACCEPT] = s.get("accept", "all")
        d[K.NEW_MERGE_SIBLINGS] = bool(s.get("merge_siblings", False))
    d[K.NEW_CARRIED] = form_carry.carried(cfg)
    d[K.NEW_BRANCH] = cfg.get("branch") or None
    d[K.NEW_MAX_CALLS] = b.get("max_metric_calls") or 0
    d[K.NEW_MAX_COST] = float(b.get("max_cost_usd") or 0.0)
    d[K.NEW_MAX_SECONDS] = int(b.get("max_seconds") or 0)
    d[K.NEW_STOP_SCORE] = float(b.get("stop_at_score") or 0.0)
    d.update(lm_form.draft_part(cfg, model_default))
    d[K.NEW_WORKERS] = ex.get("workers", d[K.NEW_WORKERS])
    return d


def _jsonl(rows: list) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def template_draft(path: Path, model_default: str = "") -> tuple[dict, list[str]]:
    files = {p.name: p.read_text() for p in path.parent.iterdir() if p.is_file() and p.suffix in
             (".py", ".jsonl", ".json", ".csv", ".txt")} if path.name == "config.toml" else {}
    return draft_from_toml(path.read_text(), files, model_default)
