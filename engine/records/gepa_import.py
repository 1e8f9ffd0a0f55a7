"""Import a GEPA 0.1.4 ``run_dir`` as a finished Refract run, for review in the studio.

What GEPA writes there, and what is read (text only):
- ``candidates.json``: every accepted candidate (a dict of named texts), in index order;
- ``run_log.json``: one record per iteration: the parents chosen (``tasks[].parent_idx``), the
  minibatch scores, the new candidates' indices, and for a merge the two merged candidates;
- ``generated_best_outputs_valset/task_<id>/iter_<i>_prog_<k>.json``: ``[score, candidate,
  side_info]`` of the seed on every validation example (``iter_0_prog_0``), and of each
  candidate that became the best on an example;
- ``run_log.txt``: the per-example validation scores of each new candidate, on the lines
  ``Individual valset scores for new program: {…}`` — a Python literal, read with
  ``ast.literal_eval`` (which evaluates no code).
``gepa_state.bin`` is a pickle and is never opened: unpickling a file runs code.

What GEPA does not write is not invented: the examples' contents (an example is known by its
validation id), the texts of rejected proposals, LM calls and costs. The import goes through
``engine.records.export.import_run``, so it is one transaction.
"""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

from storage.db import Database
from storage.models import new_id

from engine.config import RunConfig
from engine.datasets import TooDeep, open_regular, read_json, read_text_file
from engine.records.export import FORMAT, import_run, iso
from engine.search.frontier import mean
from engine.state import SINGLE, deterministic_id

STR_KEY = "current_candidate"  # GEPA's component name for a plain-text candidate
_SCORES_LINE = re.compile(r"^Iteration (\d+): Individual valset scores for new program: (\{.*\})\s*$")
_INDEX_LINE = re.compile(r"^Iteration (\d+): New program candidate index: (\d+)\s*$")
_OUTPUT_FILE = re.compile(r"^iter_(\d+)_prog_(\d+)\.json$")


class GepaImportError(ValueError):
    """The folder is not a GEPA run directory that can be read; the message says what is missing."""


def _read_text(path: Path, strict: bool = True) -> str:
    """A file of the run directory as text (a regular file; UTF-8, or with undecodable bytes
    replaced when not ``strict``), or GepaImportError saying why not."""
    try:
        if not strict:
            with open_regular(path) as f:
                return f.read().decode("utf-8", errors="replace")
        return read_text_file(path)
    except OSError as exc:
        raise GepaImportError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:  # not UTF-8, or not a regular file
        raise GepaImportError(str(exc)) from None


def _read_json(path: Path) -> Any:
    try:
        return read_json(_read_text(path))
    except json.JSONDecodeError as exc:
        raise GepaImportError(f"{path}: not valid JSON: {exc}") from None
    except TooDeep as exc:
        raise GepaImportError(f"{path}: {exc}") from None


def _val_scores_from_log(path: Path) -> dict[int, dict[str, float]]:
    """Candidate index -> {validation id: score}, from run_log.txt (empty when it is absent)."""
    if not path.exists():
        return {}
    out, pending = {}, None
    for line in _read_text(path, strict=False).splitlines():  # a log: a stray byte is no reason to refuse
        m = _SCORES_LINE.match(line)
        if m:
            try:
                pending = {str(k): float(v) for k, v in ast.literal_eval(m.group(2)).items()}
            except (ValueError, SyntaxError, TypeError, AttributeError):
                pending = None
            continue
        m = _INDEX_LINE.match(line)
        if m and pending is not None:
            out[int(m.group(2))] = pending
            pending = None
    return out


def _outputs(folder: Path) -> dict[tuple[int, str], tuple[float, dict]]:
    """(candidate index, validation id) -> (score, side_info) from the best-outputs files."""
    out: dict[tuple[int, str], tuple[float, dict]] = {}
    for task_dir in sorted(d for d in folder.glob("task_*") if d.is_dir()):
        val_id = task_dir.name.removeprefix("task_")
        for f in task_dir.iterdir():
            m = _OUTPUT_FILE.match(f.name)
            data = _read_json(f) if m else None
            if isinstance(data, list) and data and isinstance(data[0], (int, float)) and not isinstance(data[0], bool):
                side = data[2] if len(data) > 2 and isinstance(data[2], dict) else {}
                out[(int(m.group(2)), val_id)] = (float(data[0]), side)
    return out


def _list(entry: dict, key: str) -> list:
    """``entry[key]`` when it is a list, else [] (run_log.json is read, not trusted)."""
    value = entry.get(key)
    return value if isinstance(value, list) else []


def _indices(values: list, n: int) -> list[int]:
    """The candidate indices among ``values`` (whole numbers below ``n``), in order."""
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n]


def _tasks(entry: dict) -> list[dict]:
    return [t for t in _list(entry, "tasks") if isinstance(t, dict)]


def _merged(entry: dict, n: int) -> list[int]:
    return _indices(_list(entry, "merged_entities"), n)[:2] if entry.get("merged") is True else []


def _parents(entry: dict, child: int, candidates: list[dict]) -> tuple[list[int], str]:
    """The parents of a candidate made in this iteration, and its origin."""
    if _merged(entry, len(candidates)):
        return _merged(entry, len(candidates)), "merge"
    tasks = _indices([t.get("parent_idx") for t in _tasks(entry)], len(candidates))
    tasks = tasks or _indices([entry.get("selected_program_candidate")], len(candidates)) or [0]
    # several parents in one iteration (GEPA's P×N sampling): the child is a one-component
    # rewrite, so its parent is the one it shares the most component texts with
    shared = lambda p: sum(candidates[p].get(k) == v for k, v in candidates[child].items())  # noqa: E731
    return [max(dict.fromkeys(tasks), key=shared)], "reflection"


def read_run_dir(folder: Path) -> dict[str, Any]:
    """A Refract export document (``engine.records.export`` format) built from a GEPA run directory."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GepaImportError(f"{folder}: not a folder; give the run_dir of a GEPA run")
    if not (folder / "candidates.json").exists():
        raise GepaImportError(f"{folder}: no candidates.json; is this a GEPA run_dir (GEPA writes it after the "
                              "first iteration)?")
    candidates = _read_json(folder / "candidates.json")
    if not isinstance(candidates, list) or not candidates:
        raise GepaImportError(f"{folder / 'candidates.json'}: expected a list of candidates (dicts of texts)")
    for i, cand in enumerate(candidates):
        if not isinstance(cand, dict) or not cand:
            raise GepaImportError(f"{folder / 'candidates.json'}: candidate {i} is not a dict of named texts")
        for name, text in cand.items():
            if not isinstance(text, str):
                raise GepaImportError(f"{folder / 'candidates.json'}: candidate {i}: component {name!r} must be text, "
                                      f"not {type(text).__name__} (GEPA candidates are dicts of texts)")
    log = _read_json(folder / "run_log.json") if (folder / "run_log.json").exists() else []
    outputs = _outputs(folder / "generated_best_outputs_valset")
    scores = _val_scores_from_log(folder / "run_log.txt")
    scores.setdefault(0, {vid: s for (k, vid), (s, _) in outputs.items() if k == 0})
    return _document(folder, candidates, log, scores, outputs)


def _content(cand: dict) -> dict:
    return {SINGLE: cand[STR_KEY]} if set(cand) == {STR_KEY} else dict(cand)


def _document(folder: Path, candidates: list[dict], log: list, scores: dict, outputs: dict) -> dict[str, Any]:
    start = datetime.now(timezone.utc)
    run_id, now = new_id("r"), iso(start)
    # GEPA records no times; candidates get one apart each, so that they keep GEPA's order
    made_at = [iso(start + timedelta(milliseconds=i)) for i in range(len(candidates))]
    cid = [deterministic_id(run_id, "gepa", i) for i in range(len(candidates))]
    made: dict[int, tuple[list[int], str, int, dict]] = {}  # index -> (parents, origin, step, task record)
    steps, proposals = [], 0
    entries = [e for e in log if isinstance(e, dict)] if isinstance(log, list) else []
    for step, entry in enumerate(entries):
        news = [i for i in _indices(_list(entry, "new_program_indices"), len(candidates)) if i > 0]
        for i in news:
            parents, origin = _parents(entry, i, candidates)
            made[i] = (parents, origin, step, entry)
        tasks = _tasks(entry)
        proposals += sum(1 for t in tasks if "new_subsample_scores" in t) + (1 if entry.get("merged") is True else 0)
        chosen = _merged(entry, len(cid)) or _indices([t.get("parent_idx") for t in tasks], len(cid))
        calls = sum(len(_list(t, "subsample_scores")) + len(_list(t, "new_subsample_scores")) for t in tasks) \
            + len(_list(entry, "new_program_subsample_scores")) + len(news) * len(_list(entry, "evaluated_val_indices"))
        steps.append({"index": step, "parent_ids": [cid[p] for p in dict.fromkeys(chosen)],
                      "parent_reasons": {}, "proposal_ids": [cid[i] for i in news], "accepted_ids": [cid[i] for i in news],
                      "applied_command_ids": [], "metric_calls": calls, "started_at": now, "ended_at": now,
                      "cost_usd": 0.0, "seconds": 0.0, "predicted_speedup": None, "measured_speedup": None,
                      "worker_utilisation": None})
    val_ids = sorted({v for s in scores.values() for v in s} | {v for _, v in outputs},
                     key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit() else 0, v))
    cands, evals = [], []
    for i, cand in enumerate(candidates):
        parents, origin, step, entry = made.get(i, ([], "seed" if i == 0 else "reflection", 0, {}))
        own = scores.get(i) or {}
        task = (_tasks(entry) or [{}])[0]
        cands.append({"id": cid[i], "parent_ids": [cid[p] for p in parents if 0 <= p < len(cid)], "origin": origin,
                      "step": step, "content": _content(cand), "status": "accepted", "component": None,
                      "reason": "" if own else "its validation scores are not in the run directory (no run_log.txt)",
                      "pinned": False, "vetoed": False, "author": "gepa",
                      "val_mean": mean(own.values()) if own else None, "val_scores": own, "val_cut_short": "",
                      "minibatch_score": _total(task.get("new_subsample_scores")) if origin == "reflection" else None,
                      "parent_minibatch_score": _total(task.get("subsample_scores")) if origin == "reflection" else None,
                      "minibatch_keys": [], "frontier_version": 0, "created_at": made_at[i], "started_at": made_at[i],
                      "finished_at": made_at[i], "lm_call": None})
        for vid, score in own.items():
            side = outputs.get((i, vid), (score, {}))[1]
            evals.append({"candidate_id": cid[i], "example_id": vid, "score": score, "side_info": side, "error": None,
                          "cached": False, "seconds": 0.0, "cost_usd": 0.0, "created_at": now})
    return _wrap(folder, run_id, now, cands, evals, steps, val_ids, max(proposals, len(cands) - 1))


def _total(values: Any) -> Optional[float]:
    """The sum of a list of scores; None when there is none (or it holds something else)."""
    ok = isinstance(values, list) and values and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in values)
    return float(sum(values)) if ok else None


def _wrap(folder: Path, run_id: str, now: str, cands: list, evals: list, steps: list, val_ids: list,
          proposals: int) -> dict[str, Any]:
    scored = [c for c in cands if c["val_mean"] is not None]
    best = max(scored, key=lambda c: c["val_mean"]) if scored else None
    seed = cands[0]["content"]
    config = RunConfig.model_validate({
        "name": f"GEPA import: {folder.resolve().name}", "seed_candidate": seed.get(SINGLE, seed),
        "evaluator": "# imported from a GEPA run directory: GEPA's evaluator is not part of it\n",
        "budget": {"max_metric_calls": None}}).stored()
    calls = len(val_ids) + sum(s["metric_calls"] for s in steps)
    return {
        "format": FORMAT,
        "run": {"id": run_id, "name": config["name"], "owner": "", "config": config, "status": "completed",
                "status_reason": f"imported from the GEPA run directory {folder.resolve()} ({len(cands)} candidates, "
                                 f"{len(steps)} iterations; metric calls counted from run_log.json)",
                "created_at": now, "started_at": now, "finished_at": now,
                "totals": {"metric_calls": calls, "cost_usd": 0.0, "tokens_in": 0, "tokens_out": 0, "seconds": 0.0,
                           "steps": len(steps), "budget_overshoot": 0,
                           "proposals": {"total": proposals, "parsed": proposals, "valid": proposals,
                                         "improved": len(cands) - 1}}},
        "examples": [{"id": v, "split": "val", "payload": None} for v in val_ids],
        "candidates": cands, "evaluations": evals, "lm_calls": [], "steps": steps, "commands": [], "comments": [],
        "best": {"candidate_id": best["id"] if best else None, "val_mean": best["val_mean"] if best else None,
                 "test_mean": None},
    }


def import_gepa_run(db: Database, folder: str | Path) -> str:
    """Read a GEPA run directory into ``db`` as a completed run; returns its id."""
    return import_run(db, read_run_dir(Path(folder)))
