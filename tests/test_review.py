"""Review tools on the command line (in process): approve, ``export --approved``, the HTML report
(escaped, self-contained; tests/e2e/test_report_browser.py opens it in Chromium offline), and the
activity feed."""

from __future__ import annotations

import re

from engine.access import Actor, Role
from engine.cli import main
from engine.commands import send_command
from storage import activity, repo
from tests.support.reviewed_run import EVIL, reviewed  # noqa: F401  (reviewed: the fixture)


def test_approve_then_export_just_the_approved_text(reviewed, tmp_path, capsys):
    db, run_id, cand_id = reviewed
    out = tmp_path / "prompt.txt"
    assert main(["export", run_id, "--approved", "--out", str(out), "--db", db.url]) == 2
    assert "--approved: run " + run_id + " has no approved candidate" in capsys.readouterr().err
    assert main(["approve", run_id, cand_id, "--db", db.url, "--author", "ana", "--reason", "clearest"]) == 0
    assert main(["export", run_id, "--approved", "--out", str(out), "--db", db.url]) == 0
    content = repo.get_candidate(db, cand_id).content
    assert out.read_text() == __import__("json").dumps(content, indent=1, ensure_ascii=False)  # two components
    assert main(["approve", run_id, cand_id, "--db", db.url]) == 2  # no reason
    assert "reason: say why" in capsys.readouterr().err


def test_the_report_escapes_every_text_and_loads_nothing(reviewed, tmp_path):
    db, run_id, cand_id = reviewed
    send_command(db, run_id, "approve", {"candidate_id": cand_id}, reason=f"because {EVIL}",
                 actor=Actor("ed@example.com", Role.EDITOR))
    out = tmp_path / "report.html"
    assert main(["report", run_id, "--out", str(out), "--db", db.url]) == 0
    page = out.read_text()
    assert "<script>document.title" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;") >= 4  # name, text, diff, comment, reason
    assert not re.search(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""", page)  # nothing external
    assert "The approved candidate" in page and cand_id in page
    assert re.search(r"Approved by ed@example.com on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: because &lt;script&gt;", page)
    assert "Content-Security-Policy" in page


def test_activity_feed_newest_first_filtered_by_person(reviewed):
    db, run_id, cand_id = reviewed
    send_command(db, run_id, "approve", {"candidate_id": cand_id}, reason="good", author="ana")
    repo.add_comment(db, run_id, cand_id, "ana", "second thoughts")
    feed = activity.run_activity(db, run_id)
    assert [(f["who"], f["what"]) for f in feed[:2]] == [("ana", "comment"), ("ana", "approve")]
    assert feed == sorted(feed, key=lambda f: f["when"], reverse=True)
    assert {f["who"] for f in activity.run_activity(db, run_id, person="ana")} == {"ana"}
    assert any(f["who"] == "bo@example.com" for f in feed)


def test_approving_says_whether_the_gain_is_real(reviewed, capsys):
    db, run_id, cand_id = reviewed
    assert main(["approve", run_id, cand_id, "--db", db.url, "--reason", "clearest"]) == 0
    out, err = capsys.readouterr()
    # the synthetic run has no test set: the gain is measured on validation, and the warning says so
    assert "warning: No held-out test score of this candidate" in err
    assert re.search(rf"validation \(not held out\) gain of {cand_id} over the seed: [+-]\d\.\d{{4}} \(95 % interval", out)
    assert repo.get_run(db, run_id).approved_candidate_id == cand_id  # said, not enforced


def test_the_report_shows_results_first_the_datasets_by_size_and_feedback_with_the_comments(reviewed, tmp_path):
    from engine.records.report import build_report

    db, run_id, cand_id = reviewed
    repo.transition_run(db, run_id, "running", "")  # feedback steers a running search
    send_command(db, run_id, "feedback", {"candidate_id": cand_id, "text": "shorter, please"}, author="ana")
    repo.transition_run(db, run_id, "completed", "the run ended before the next step")
    config = {**repo.get_run(db, run_id).config, "dataset": [{"question": f"row-question-{i}", "answer": "a"} for i in range(40)]}
    repo.set_run_fields(db, run_id, config=config)
    page = build_report(db, run_id)
    assert page.count("row-question-17") == 0  # 40 rows were a page of JSON before any result (count: no 3 MB diff)
    config = page.index("<h2>Config</h2>")
    assert config > page.index("<h2>Per-example scores</h2>") > page.index("<h2>Score over the budget</h2>")
    assert "&quot;dataset&quot;: &quot;40 rows (the rows are in the export)&quot;" in page
    assert page.count("<summary>the evaluator (", config) == 1
    comments = page[page.index("<h2>Comments and feedback</h2>"):config]
    assert comments.count("shorter, please") == 1
    assert comments.count("feedback (never read: the run ended before it was applied)") == 1
    assert comments.count("nice &lt;script&gt;") == 1
