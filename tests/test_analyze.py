"""Analyze: the degenerate-member rule, findings on real sick runs (each names its planted problem
first), healthy runs without a severe finding, the CLI, the written diagnosis as a job."""

from __future__ import annotations

import json

import pytest

from engine.analyze import analyze
from engine.analyze.degenerate import BELOW_REFERENCE, CONSTANT, TRIVIAL_WINS, degenerate_members
from engine.analyze.diagnosis import parse
from engine.analyze.finding import SEVERE
from engine.config import load_config
from engine.worker.jobs import ANALYZE, JobRunner, request_job
from engine.access import local_actor
from storage import jobs, repo
from storage.analyze_queries import last_diagnosis
from tests.support import sick_runs
from tests.support.harness import ROOT, run_toy
from tests.support.scripted_lm import install_script
from tests.support.synthetic import generate_run

# ---------------------------------------------------------------- the pure rule


def test_a_constant_member_below_the_best_somewhere_is_degenerate():
    scores = {"seed": {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0},
              "hedge": {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5},
              "good": {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}}
    found = degenerate_members(scores, reference="seed")
    assert set(found) == {"hedge"}
    assert found["hedge"].rule == CONSTANT and found["hedge"].wins == ("b", "d")


def test_winning_only_where_a_trivial_answer_wins_and_below_the_seed():
    scores = {"seed": {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0},
              "nothing": {"a": 0.4, "b": 0.4, "c": 0.4, "d": 0.4},
              "copycat": {"a": 0.0, "b": 0.4, "c": 0.0, "d": 0.0},  # best only on b, which "nothing" wins too
              "worse": {"a": 0.0, "b": 0.0, "c": 0.0, "d": 1.0}}  # holds d (with the seed), mean below it
    found = degenerate_members(scores, reference="seed")
    assert found["nothing"].rule == CONSTANT
    assert found["copycat"].rule == TRIVIAL_WINS
    assert found["worse"].rule == BELOW_REFERENCE and found["worse"].reference_mean == pytest.approx(0.75)
    assert "seed" not in found  # the reference is the baseline, never degenerate itself


def test_a_measured_trivial_answer_and_uncontested_examples():
    # every candidate scores 0 on "z": holding it wins nothing, so "flat" is no member there
    scores = {"seed": {"x": 0.0, "y": 1.0, "z": 0.0}, "flat": {"x": 0.0, "y": 0.0, "z": 0.0},
              "negatives": {"x": 1.0, "y": 0.0, "z": 0.0}, "real": {"x": 1.0, "y": 1.0, "z": 0.0}}
    assert degenerate_members(scores, reference="seed") == {}
    found = degenerate_members(scores, reference="seed", trivial={"x": 1.0, "y": 0.0, "z": 0.0})
    assert set(found) == {"negatives"} and found["negatives"].rule == TRIVIAL_WINS
    assert degenerate_members({}, reference=None) == {}


def _rule_as_written(scores, reference, tol=1e-9):
    """The docstring's three rules, one candidate at a time (the oracle of the vectorised rule)."""
    keys = {k for per in scores.values() for k in per}
    best = {k: max(p[k] for p in scores.values() if k in p) for k in keys}
    low = {k: min(p[k] for p in scores.values() if k in p) for k in keys}
    wins = {c: {k for k, v in p.items() if best[k] > low[k] + tol and v >= best[k] - tol} for c, p in scores.items()}
    members = [c for c in scores if wins[c] and c != reference]
    out = {}
    for c in members:
        v = list(scores[c].values())
        if len(v) >= 3 and max(v) - min(v) <= tol and any(best[k] > v[0] + tol for k in scores[c]):
            out[c] = CONSTANT
    trivial = [wins[c] for c in out]
    ref = scores.get(reference)
    for c in members:
        if c in out:
            continue
        if any(wins[c] <= t for t in trivial):
            out[c] = TRIVIAL_WINS
            continue
        shared = [k for k in scores[c] if ref and k in ref]
        if shared and sum(scores[c][k] for k in shared) / len(shared) < sum(ref[k] for k in shared) / len(shared) - tol:
            out[c] = BELOW_REFERENCE
    return out


def test_the_vectorised_rule_is_the_rule_as_written_on_random_score_tables():
    import random

    rng = random.Random(7)
    for _ in range(200):
        n, m = rng.randint(1, 8), rng.randint(1, 6)
        levels = [0.0, 0.5, 1.0] if rng.random() < 0.5 else [round(rng.random(), 2) for _ in range(4)]
        scores = {f"c{i}": {f"e{j}": rng.choice(levels) for j in range(m) if rng.random() < 0.85} for i in range(n)}
        scores = {c: p for c, p in scores.items() if p}
        if not scores:
            continue
        reference = rng.choice(sorted(scores) + [None])
        got = {c: d.rule for c, d in degenerate_members(scores, reference=reference).items()}
        assert got == _rule_as_written(scores, reference), (scores, reference)


def test_from_the_kept_frontier_and_aggregates_the_rule_finds_the_same_members():
    """``degenerate_kept.from_aggregates`` (what the dashboard uses at any size) against
    ``degenerate_members`` over every score, on random score tables: candidates validated on
    part of the set, aggregates a release before them did not record, ties and constant rows."""
    import random

    from engine.analyze.degenerate_kept import Aggregate, from_aggregates

    rng = random.Random(11)
    tol = 1e-9
    for _ in range(400):
        n, m = rng.randint(1, 9), rng.randint(1, 6)
        levels = [0.0, 0.5, 1.0] if rng.random() < 0.5 else [round(rng.random(), 2) for _ in range(4)]
        scores = {f"c{i}": {f"e{j}": rng.choice(levels) for j in range(m) if rng.random() < 0.85} for i in range(n)}
        for c in list(scores):
            if rng.random() < 0.2:  # answers alike
                scores[c] = {k: levels[0] for k in scores[c]}
        scores = {c: p for c, p in scores.items() if p}
        if not scores:
            continue
        reference = rng.choice(sorted(scores) + [None])
        keys = {k for p in scores.values() for k in p}
        best = {k: max(p[k] for p in scores.values() if k in p) for k in keys}
        lowest = {k: min(p[k] for p in scores.values() if k in p) for k in keys}
        aggs = {c: Aggregate(len(p), sum(p.values()) / len(p), *((None, None) if rng.random() < 0.1 else
                                                                  (min(p.values()), max(p.values()))),
                             sum(1 for k, v in p.items() if v >= best[k] - tol)) for c, p in scores.items()}
        contested = {k for k in keys if lowest[k] < best[k] - tol}
        reads = []

        def rows(ids):
            reads.append(list(ids))
            return {c: scores[c] for c in ids}

        def holding_above(ids, above):
            return {c for c in ids if any(k in contested and best[k] > above + tol and v >= best[k] - tol
                                          for k, v in scores[c].items())}

        got = {c: d.rule for c, d in from_aggregates(aggs, best, contested, reference, rows, holding_above).items()}
        want = {c: d.rule for c, d in degenerate_members(scores, reference=reference).items()}
        assert got == want, (scores, reference)


# ---------------------------------------------------------------- sick runs, real engine runs


@pytest.fixture(scope="module")
def sick(tmp_path_factory):
    """Every sick run, built once for this module's tests: (database, {builder name: run id})."""
    from storage.db import Database

    tmp = tmp_path_factory.mktemp("sick")
    db = Database(f"sqlite:///{tmp / 'sick.db'}")
    db.create_all()
    runs = {}
    for build in sick_runs.PLANTED:
        (tmp / build.__name__).mkdir()
        runs[build.__name__] = build(db, tmp / build.__name__)
    yield db, runs
    db.dispose()


@pytest.mark.parametrize("build", list(sick_runs.PLANTED), ids=lambda b: b.__name__)
def test_each_sick_run_has_its_planted_problem_named_first(sick, build):
    db, runs = sick
    findings = analyze(db, runs[build.__name__])
    assert findings, "no finding at all"
    assert findings[0].kind == sick_runs.PLANTED[build], [(f.kind, f.severity, f.title) for f in findings]
    assert findings[0].id == "F1" and findings[0].evidence
    if build is not sick_runs.lm_bound:  # how much a wider step saves is the runtime model's, from measured latencies
        assert findings[0].severity == SEVERE


def test_the_degenerate_member_is_one_veto_away_and_the_veto_is_an_ordinary_command(sqlite_db, tmp_path):
    from engine.commands import send_command

    def pause_after_step_3(ctx):
        if ctx.step_index == 3:
            send_command(ctx.db, ctx.run_id, "pause", author="ana")

    run_id = sick_runs.degenerate_member(sqlite_db, tmp_path, on_step=pause_after_step_3)
    assert repo.get_run(sqlite_db, run_id).status == "paused"
    first = analyze(sqlite_db, run_id)[0]
    (member,) = first.evidence["candidates"]
    assert repo.get_candidate(sqlite_db, member).content == {"text": "unsure"}
    veto = first.actions[0]
    assert (veto.kind, veto.payload) == ("veto", {"candidate_id": member})
    send_command(sqlite_db, run_id, veto.kind, veto.payload, author="ana", reason=veto.reason)
    (cmd,) = repo.pending_commands(sqlite_db, run_id)
    assert cmd.kind == "veto" and cmd.reason.startswith("Analyze: degenerate")


def test_healthy_runs_raise_no_severe_finding(sqlite_db, tmp_path):
    toy_run = sick_runs.healthy(sqlite_db, tmp_path / "toy")
    example = load_config(ROOT / "examples" / "toy_words" / "config.toml").model_copy(
        update={"reflection_lm": load_config(ROOT / "examples" / "toy_words" / "config.toml").reflection_lm.model_copy(
            update={"model": "scripted/toy", "num_retries": 0})})
    example_run = run_toy(sqlite_db, tmp_path / "example", example)[0]
    for run_id in (toy_run, example_run):
        findings = analyze(sqlite_db, run_id)
        assert not [f for f in findings if f.severity == SEVERE], [(f.kind, f.title) for f in findings]


# ---------------------------------------------------------------- records on both databases, the CLI


def test_findings_of_a_synthetic_run_on_both_databases(db):
    run_id = generate_run(db, n_candidates=60, n_val=12)
    findings = analyze(db, run_id)
    kinds = {f.kind for f in findings}
    # the synthetic run draws its validation scores at random around each candidate's skill
    assert "noisy_evaluator" in kinds and "degenerate_members" in kinds
    assert [f.id for f in findings] == [f"F{i}" for i in range(1, len(findings) + 1)]
    assert json.dumps([f.to_dict() for f in findings])  # plain data


def test_cli_analyze_text_and_json(sick, capsys):
    from engine.cli import main

    db, runs = sick
    run_id, url = runs["repeating_lm"], db.url
    assert main(["analyze", run_id, "--db", url]) == 0
    out = capsys.readouterr().out
    assert "F1 [severe]" in out and "repeated a text already tried" in out
    # a finished run: no feedback to send, a branch with a hotter reflection LM instead
    assert "python -m engine feedback" not in out
    assert f"→ Branch with a hotter reflection LM: python -m engine branch {run_id} --set reflection_lm.temperature=1.1" in out
    assert main(["analyze", run_id, "--db", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"][0]["kind"] == "repeating_lm"
    assert doc["findings"][0]["links"][0].startswith(f"/candidate?run={run_id}&candidate=")
    assert main(["analyze", "r-none", "--db", url]) == 2
    assert "error: run: no run with id 'r-none'" in capsys.readouterr().err


# ---------------------------------------------------------------- layer 2: the written diagnosis


def test_parse_checks_every_claim_against_the_findings():
    fs = ["F1", "F2"]
    items = parse("Some preamble.\n1. Veto the hedge. [F1]\n   It wastes parents.\n2) Raise K now [F2][F9]\n"
                  "- Guess, with no finding.\n3. [F1][F2] [F3]", fs)
    assert [i["cites"] for i in items] == [["F1"], ["F2"], []]  # the last item is citations alone: dropped
    assert items[0]["text"] == "Veto the hedge. [F1] It wastes parents."
    assert items[1]["unknown"] == ["F9"]


def _diagnosis_script(messages, params):
    prompt = messages[1]["content"]
    assert "Objective of the run:" in prompt and "[F1]" in prompt
    return "1. Write a different version each time: the LM repeats itself. [F1]\n2. Watch the stall. [F2]"


def test_the_written_diagnosis_runs_as_a_job_and_is_recorded_as_an_lm_call(sick, tmp_path, monkeypatch):
    sqlite_db, runs = sick
    run_id = runs["repeating_lm"]
    install_script(_diagnosis_script)
    before = repo.get_run(sqlite_db, run_id).lm_calls
    job_id = request_job(sqlite_db, ANALYZE, {"run_id": run_id}, local_actor("ana"))
    assert JobRunner(sqlite_db, "w").run_once() == job_id
    job = jobs.job_view(sqlite_db, job_id)
    assert job["status"] == "done", job["error"]
    result = job["result"]
    assert [i["cites"] for i in result["items"]] == [["F1"], ["F2"]]
    assert result["findings"][0]["title"].startswith("23 of 24")
    call = last_diagnosis(sqlite_db, run_id)
    assert call["id"] == result["lm_call_id"] and call["answer"].startswith("1. Write")
    assert repo.get_run(sqlite_db, run_id).lm_calls == before + 1  # counted in the run's totals
    system = call["messages"][1]["content"]
    assert "repeated a text already tried" in system and "Write the 2 or 3 things" in system
    ids = analyze(sqlite_db, run_id)[0].evidence["candidates"]
    assert "evidence:" not in system and not any(c in system for c in ids)  # ids tell the LM nothing
    # a finished run keeps its last analysis in the report: the findings and this diagnosis
    from engine.records.report import build_report

    html = build_report(sqlite_db, run_id)
    assert "<h2>Analysis</h2>" in html and "repeated a text already tried" in html
    assert "Last written diagnosis" in html and "Write a different version each time" in html
