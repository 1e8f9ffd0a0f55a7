"""No behaviour lost: the export of the same seeded synchronous runs is the one recorded in
``tests/golden/`` up to timings (and the order in which racing threads wrote LM calls).

A run id is fixed, so every candidate id (derived from run, step and slot) is the same in each
run; what changes between two runs with the same seed is only *when* things happened. Set
REFRACT_WRITE_GOLDEN=1 to rewrite the files after a deliberate change of behaviour (and say
why in the commit).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.records.export import upgraded, export_run, import_run
from engine.runs import examples_of
from tests.support.scripted_lm import install_script, uninstall_script
from storage import repo
from storage.db import Database
from tests.support import toy
from tests.support.harness import run_optimizer, toy_config
from tests.support.merge_scripts import merging_script
from tests.support.components import _component_script, _multi_config

GOLDEN = Path(__file__).parent / "golden"
TIMING = {"created_at", "started_at", "finished_at", "ended_at", "applied_at", "seconds", "predicted_speedup",
          "measured_speedup", "worker_utilisation"}


@pytest.fixture(autouse=True)
def _no_script_left_behind():
    yield
    uninstall_script()


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def normalised(doc: dict) -> dict:
    """The export without timings; LM calls ordered by what they were for, not by which
    thread finished first, and candidates' references to them renumbered to match."""
    calls = doc["lm_calls"]
    order = sorted(range(len(calls)), key=lambda i: (calls[i]["candidate_id"] or "", calls[i]["purpose"],
                                                     json.dumps(calls[i]["messages"], sort_keys=True)))
    new_pos = {old: new for new, old in enumerate(order)}
    out = dict(doc, lm_calls=[calls[i] for i in order])
    # minibatch keys are stored in the order their evaluations finished: a set, compared as one
    out["candidates"] = sorted(({**c, "lm_call": new_pos.get(c["lm_call"]), "minibatch_keys": sorted(c["minibatch_keys"])}
                                for c in doc["candidates"]), key=lambda c: c["id"])
    return _strip(out)


def _run(db, tmp_path, cfg, script, run_id: str) -> dict:
    install_script(script)
    repo.create_run(db, cfg.name, "", cfg.stored(), examples_of(cfg), run_id=run_id)
    run_optimizer(db, run_id, tmp_path)
    return normalised(export_run(db, run_id))


def distinct_script(messages, params):
    """``merging_script``, except that no two proposals of one step write the same text: each
    adds a tag naming its minibatch and sample index. (In the product, which of two identical
    proposals for one parent is the repeat depends on thread timing.)"""
    if "You combine improvements" in messages[0]["content"]:
        return merging_script(messages, params)
    prompt, k = messages[1]["content"], params.get("sample_index", 0)
    current = toy.current_version(prompt)
    missing = [w for w in toy.missing_words(prompt) if w not in current.split()]
    keys = sorted(re.findall(r"### Example `([^`]*)`", prompt))
    tag = "tag-" + hashlib.sha256(" ".join(keys).encode()).hexdigest()[:4] + f"-{k}"
    word = missing[min(k, len(missing) - 1)] if missing else "extra"
    return f"Adding {word}.\n```\n{current} {word} {tag}\n```"


SCENARIOS = {
    # 2 parents × 2 proposals, the siblings of a step merged into one child, early-stopped validation
    "sync_2x2_sibling_merge": lambda: (toy_config(8, search={"parents_per_step": 2, "proposals_per_parent": 2,
                                                             "merge_siblings": True, "max_score": 1.0},
                                                  budget={"max_steps": 3, "stop_at_score": None}), distinct_script),
    # a multi-component candidate: children that changed different components, system-aware merge
    "sync_multi_component_merge": lambda: (_multi_config(search={"parents_per_step": 1, "proposals_per_parent": 2,
                                                                 "minibatch_size": 4, "merge": True},
                                                         budget={"max_steps": 2, "stop_at_score": None}),
                                           _component_script),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_export_of_a_seeded_sync_run_is_unchanged(sqlite_db, tmp_path, name):
    cfg, script = SCENARIOS[name]()
    got = _run(sqlite_db, tmp_path, cfg, script, "rgolden")
    path = GOLDEN / f"{name}.json"
    if os.environ.get("REFRACT_WRITE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    expected = json.loads(path.read_text())
    assert got == expected


def test_an_old_export_reads_in_todays_words():
    """The refract-run/1 recordings of the same runs, upgraded, are today's recordings: improved
    proposals were counted as "accepted", sibling merges had origin "merge"."""
    for name in SCENARIOS:
        old = json.loads((GOLDEN / "v1" / f"{name}.json").read_text())
        new = json.loads((GOLDEN / f"{name}.json").read_text())
        up = upgraded(old)
        assert up["format"] == new["format"]
        assert up["candidates"] == new["candidates"]
        # the v1 recordings were made with an earlier reflection prompt: their prompt tokens differ
        totals, today = ({k: v for k, v in t.items() if k != "tokens_in"} for t in (up["run"]["totals"], new["run"]["totals"]))
        assert totals == today


def test_an_old_export_imports(sqlite_db, tmp_path):
    cfg, script = SCENARIOS["sync_2x2_sibling_merge"]()
    install_script(script)
    repo.create_run(sqlite_db, cfg.name, "", cfg.stored(), examples_of(cfg), run_id="rold")
    run_optimizer(sqlite_db, "rold", tmp_path)
    doc = export_run(sqlite_db, "rold")
    old = json.loads(json.dumps(doc).replace('"sibling_merge"', '"merge"').replace('"improved": ', '"accepted": '))
    old["format"] = "refract-run/1"
    old["run"]["config"]["search"] = {**{k: v for k, v in cfg.search.model_dump().items() if k != "improvement"},
                                      "acceptance": "strict"}
    target = Database(f"sqlite:///{tmp_path / 'other.db'}")
    target.create_all()
    try:
        import_run(target, old)
        again = export_run(target, "rold")
        assert again["run"]["totals"] == doc["run"]["totals"]
        assert [c["origin"] for c in again["candidates"]] == [c["origin"] for c in doc["candidates"]]
        assert RunConfig.model_validate(again["run"]["config"]).search.improvement == "strict"
    finally:
        target.dispose()
