"""Every number the studio shows equals the same figure computed from the run's export.

For runs in several states — live (read while the engine sits between two steps), paused,
finished with sibling merges, a human edit and a veto — the dashboard, candidate and lineage
pages are rendered (AppTest, the studio's real page code and caches) and their figures are
compared with the export: best score, frontier size and members, improved / proposed, metric
calls, dollars spent, and the last point of the best-score line. And while a run advances,
mid-step, the dashboard, ``engine status`` and the export are read at the same moments and say
the same best, score, metric calls, steps, proposals and elapsed time. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.commands import send_command
from engine.records.export import export_run
from engine.runs import submit_run
from tests.support.scripted_lm import install_script
from storage import repo
from tests.support import toy
from tests.support.harness import run_optimizer, toy_config
from tests.support.merge_scripts import merging_script
from tests.support.studio import open_page

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture
def studio_db(db, tmp_path, monkeypatch):
    """The ``db`` fixture (SQLite, PostgreSQL) as the studio's database."""
    monkeypatch.setenv("REFRACT_DB", db.url)
    monkeypatch.setenv("REFRACT_DATA", str(tmp_path))
    import streamlit as st

    st.cache_data.clear()
    return db


def _render(page: str, **params) -> AppTest:
    import streamlit as st

    st.cache_data.clear()  # what a page shows now, not what a cache kept from before
    return open_page(page, **params)


def _values(v):
    """A plotly array as sent to the browser: a list, or numpy's bytes in base64 ("bdata")."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return v


def _metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label.startswith(label))


def shown(run_id: str) -> dict:
    """The figures as the dashboard, the lineage page and the best candidate's page show them."""
    dash = _render("pages/dashboard.py", run=run_id)
    spec = json.loads(next(c for c in dash.get("plotly_chart") if "mean validation score" in c.proto.spec).proto.spec)
    best_line = next(t for t in spec["data"] if t.get("name") == "best")
    frontier_chart = next(c for c in dash.get("plotly_chart") if "best on" in c.proto.spec)
    rows = json.loads(frontier_chart.proto.spec)["data"][0]["customdata"]
    link = next(el.proto for el in dash.get("page_link") if el.proto.label.startswith("Best"))
    best_id = link.label.removeprefix("Best: ")
    lineage = _render("pages/lineage.py", run=run_id)
    on_front = next(c.value for c in lineage.caption if " on the frontier" in c.value)
    cand = _render("pages/candidate.py", run=run_id, candidate=best_id)
    return {
        "best": _metric(dash, "Best val score").value,
        "best_candidate": best_id,
        "best_on_its_page": _metric(cand, "Validation score").value,
        "frontier_size": int(_metric(dash, "Frontier size").value),
        "frontier_rows": {r[0] for r in rows},
        "lineage_frontier": int(on_front.split(" on the frontier")[0].split("· ")[-1]),
        "improved_proposed": _metric(dash, "Improved").value,
        "metric_calls": int(_metric(dash, "Metric calls").proto.help.split()[0].replace(",", "")),
        "spent": _metric(dash, "Spent").value,
        "best_line_last": round(float(_values(best_line["y"])[-1]), 3),
    }


def expected(db, run_id: str) -> dict:
    """The same figures computed from the export alone."""
    doc = export_run(db, run_id)
    splits = {e["id"]: e["split"] for e in doc["examples"]}
    n_val = sum(1 for f in doc["frontier"])
    full = [c for c in doc["candidates"] if c["status"] == "accepted" and not c["vetoed"]
            and len(c["val_scores"]) == n_val]
    best = max(full, key=lambda c: sum(c["val_scores"].values()) / n_val)
    best_mean = sum(best["val_scores"].values()) / n_val
    assert doc["best"]["val_mean"] == pytest.approx(best_mean)
    members = set().union(*(set(f["candidate_ids"]) for f in doc["frontier"]))
    paid = sum(1 for e in doc["evaluations"] if not e["cached"] and splits.get(e["example_id"]) != "test")
    t = doc["run"]["totals"]
    assert t["metric_calls"] == paid
    assert t["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in doc["lm_calls"]))
    return {
        "best": f"{best_mean:.3f}",
        "best_candidate": doc["best"]["candidate_id"],
        "best_on_its_page": f"{best_mean:.3f}",
        "frontier_size": len(members),
        "frontier_rows": members,
        "lineage_frontier": len(members),
        "improved_proposed": f"{t['proposals']['improved']} / {t['proposals']['total']}",
        "metric_calls": paid,
        "spent": f"${t['cost_usd']:.4f}",
        "best_line_last": round(best_mean, 3),
    }


def _check(db, run_id: str) -> None:
    assert shown(run_id) == expected(db, run_id)


def _toy(**over):
    base = {"search": {"parents_per_step": 1, "proposals_per_parent": 3, "merge_siblings": True},
            "budget": {"max_metric_calls": 140, "stop_at_score": None}}
    for k, v in over.items():
        base[k] = {**base.get(k, {}), **v}
    return toy_config(8, **base)


def test_live_and_paused_runs_show_the_exports_numbers(studio_db, tmp_path):
    db = studio_db
    install_script(merging_script, price_per_token=1e-6)
    run_id = submit_run(db, _toy())
    checked = []

    def between_steps(ctx):
        if ctx.step_index == 2 and not checked:  # the engine waits here: a live run, read as it is
            assert repo.get_run(db, run_id).status == "running"
            _check(db, run_id)
            checked.append(True)
            send_command(db, run_id, "pause", {}, "ana", "look closer")

    assert run_optimizer(db, run_id, tmp_path, on_step=between_steps) == "paused"
    assert checked
    _check(db, run_id)


def test_finished_run_with_merges_an_edit_and_a_veto_shows_the_exports_numbers(studio_db, tmp_path):
    db = studio_db
    install_script(merging_script, price_per_token=1e-6)
    run_id = submit_run(db, _toy(budget={"max_metric_calls": 60}))
    run_optimizer(db, run_id, tmp_path)
    cands = repo.list_candidates(db, run_id)
    assert any(c.origin == "sibling_merge" for c in cands)  # merging_script merges siblings
    best = repo.get_run(db, run_id).best_candidate_id
    weakest = min((c for c in cands if c.status == "accepted" and c.id != best and c.origin != "seed"),
                  key=lambda c: c.val_mean, default=None) or next(c for c in cands if c.origin == "seed")
    solved = " ".join(w["word"] for w in toy.dataset(8))
    for kind, payload in (("budget", {"max_metric_calls": 120}), ("resume", {}), ("veto", {"candidate_id": weakest.id}),
                          ("edit", {"candidate_id": best, "content": solved})):
        send_command(db, run_id, kind, payload, "ana", "review")
    run_optimizer(db, run_id, tmp_path)
    run = repo.get_run(db, run_id)
    assert run.status == "completed"
    cands = {c.id: c for c in repo.list_candidates(db, run_id)}
    assert cands[weakest.id].vetoed and any(c.origin == "human" for c in cands.values())
    _check(db, run_id)


# ---------------------------------------------------------------- while the run advances


def _seconds(text: str) -> int:
    """``ui.render.fmt_seconds`` read back: "42s", "2m 04s", "1h 03m" (whole seconds)."""
    import re

    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+)([hms])", text))
    return parts.get("h", 0) * 3600 + parts.get("m", 0) * 60 + parts.get("s", 0)


def live_shown(run_id: str) -> dict:
    """What the dashboard shows of the run now: best, its score, metric calls, steps, proposals, elapsed."""
    dash = _render("pages/dashboard.py", run=run_id)
    line = next(m.value for m in dash.markdown if "**parsed**" in m.value)
    link = next(el.proto for el in dash.get("page_link") if el.proto.label.startswith("Best"))
    rates = [int(r) for r in __import__("re").findall(r"\((\d+)%\)", line)]
    return {"best_candidate": link.label.removeprefix("Best: "), "best": _metric(dash, "Best val score").value,
            "metric_calls": int(_metric(dash, "Metric calls").proto.help.split()[0].replace(",", "")),
            "steps": int(line.split("step ")[1].split(" ")[0]), "proposals": int(line.split(" · ")[1].split(" ")[0]),
            "elapsed": _seconds(_metric(dash, "Elapsed").value), "rates_ok": all(r <= 100 for r in rates)}


def status_shown(db, run_id: str) -> dict:
    """What ``python -m engine status RUN`` prints of the same figures."""
    import contextlib
    import io
    import re

    from engine.cli.run import print_summary

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_summary(db, run_id)
    text = out.getvalue()
    best = re.search(r"^best ([0-9.]+) \(candidate (\w+)\)", text, re.M)
    totals = re.search(r"^metric calls (\d+) .* running ([0-9.]+) s  steps (\d+)", text, re.M)
    return {"best_candidate": best.group(2), "best": f"{float(best.group(1)):.3f}", "metric_calls": int(totals.group(1)),
            "steps": int(totals.group(3)), "proposals": int(re.search(r"^proposals (\d+)", text, re.M).group(1)),
            "elapsed": float(totals.group(2)), "rates_ok": all(int(r) <= 100 for r in re.findall(r"(\d+)%", text))}


def export_shown(db, run_id: str) -> dict:
    """The export's figures; its best must be the best fully validated candidate of its own
    candidate list at that moment (it lagged until the step ended)."""
    doc = export_run(db, run_id)
    t = doc["run"]["totals"]
    n_val = len(doc["frontier"])
    full = [sum(c["val_scores"].values()) / n_val for c in doc["candidates"]
            if c["status"] == "accepted" and not c["vetoed"] and len(c["val_scores"]) == n_val]
    assert f"{max(full):.3f}" == f"{doc['best']['val_mean']:.3f}", (max(full), doc["best"])
    return {"best_candidate": doc["best"]["candidate_id"], "best": f"{doc['best']['val_mean']:.3f}",
            "metric_calls": t["metric_calls"], "steps": t["steps"], "proposals": t["proposals"]["total"],
            "elapsed": t["seconds"]}


def _quiet(db, run_id: str, settle: float = 1.0, timeout: float = 60.0) -> None:
    """Wait until the run, still running, has every proposal of its step waiting for the
    reflection LM (which the test holds): nothing it records changes until the LM answers."""
    import time

    from storage import queries

    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        ov = queries.run_overview(db, run_id)
        now = (ov["metric_calls"], ov["proposals_total"], ov["steps_done"], ov["best_candidate_id"])
        if now != last:
            last, since = now, time.monotonic()
        elif ov["proposals_reflecting"] > 0 and time.monotonic() - since >= settle:
            return
        time.sleep(0.1)
    raise AssertionError(f"the run did not settle in {timeout} s: {last}")


def test_a_running_run_shows_the_same_figures_on_the_dashboard_in_engine_status_and_in_its_export(studio_db, tmp_path):
    """Sampled while the run runs — mid-step, its reflections in flight (the test's LM holds
    them while it reads; asynchronously, so that validation passes have ended within the step) —
    at three moments of its course: the best, its score, the metric calls, the steps and the
    proposals are the same in all three views, the best is the best fully validated candidate,
    no rate is above 100 %, and the elapsed time of each view lies between the exports read just
    before and just after it."""
    import threading
    import time

    db = studio_db
    answer = threading.Event()
    answer.set()

    def held(messages, params):  # the reflection LM, held while the test reads the views
        answer.wait(120)
        return toy.endless(messages, params)

    install_script(held, latency=0.05, price_per_token=1e-6)
    run_id = submit_run(db, toy_config(8, budget={"max_metric_calls": 2000, "stop_at_score": None},
                                       search={"parents_per_step": 2, "proposals_per_parent": 2, "schedule": "async"}))
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(run_optimizer(db, run_id, tmp_path)), daemon=True)
    runner.start()
    samples = []
    try:
        for at_step in (1, 3, 5):
            while repo.get_run(db, run_id).steps_done < at_step:
                assert runner.is_alive(), outcome
                time.sleep(0.1)
            answer.clear()
            for _ in range(3):  # an evaluation still finishing as the views were read: read them again
                _quiet(db, run_id)
                before, dash, status, after = (export_shown(db, run_id), live_shown(run_id), status_shown(db, run_id),
                                               export_shown(db, run_id))
                elapsed = (before.pop("elapsed"), after.pop("elapsed"))
                if before == after:  # the run held still while it was read
                    break
            answer.set()
            assert before == after, (before, after)
            samples.append((before, dash, status, after))
            assert repo.get_run(db, run_id).status == "running"
            for view in (dash, status):
                assert view.pop("rates_ok"), view
                shown = view.pop("elapsed")
                assert int(elapsed[0]) <= shown <= elapsed[1] + 1, (shown, elapsed)
                assert view == before, (view, before)
    finally:
        answer.set()
        send_command(db, run_id, "stop", author="ana")
        runner.join(120)
    calls = [before["metric_calls"] for before, *_ in samples]
    assert len(samples) == 3 and calls == sorted(set(calls))  # three moments of its course, in order
