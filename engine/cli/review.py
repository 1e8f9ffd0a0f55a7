"""The review verbs of the command line: ``approve``, ``report``, ``analyze`` and ``export --approved``.

``approve`` goes through ``engine.commands.send_command`` like every command (recorded with who
and why, applied at once); ``report`` writes ``engine.records.report``'s self-contained HTML.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from storage import repo
from storage.db import Database

from engine.state import SINGLE


class ReviewError(ValueError):
    """Bad input for a review verb; ``str()`` is ``field: reason``."""


def approved_text(db: Database, run_id: str) -> str:
    """The approved candidate's text: a single text as it is, several components as a JSON
    object of name → text. ``ReviewError`` when the run has no approved candidate."""
    run = repo.get_run(db, run_id)
    if not run.approved_candidate_id:
        raise ReviewError(f"--approved: run {run_id} has no approved candidate; approve one first "
                          f"(`python -m engine approve {run_id} CANDIDATE --reason \"…\"`)")
    content = repo.get_candidate(db, run.approved_candidate_id).content
    if list(content) == [SINGLE]:
        return content[SINGLE]
    return json.dumps(content, indent=1, ensure_ascii=False)


def write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReviewError(f"--out: cannot write {path}: {exc.strerror or exc}") from None


def cmd_approve(args, db: Database) -> int:
    from engine.commands import send_command

    candidate = None if args.candidate == "none" else args.candidate
    cid = send_command(db, args.run, "approve", {"candidate_id": candidate}, author=args.author, reason=args.reason)
    print(f"command {cid}: " + (f"{candidate} approved" if candidate else "approval withdrawn"))
    if candidate:  # is the gain real? said, not enforced: the approval stands
        from engine.gain import held_out_gain

        gain = held_out_gain(db, args.run, candidate)
        for warning in gain.warnings() if gain is not None else []:
            print(f"warning: {warning}", file=sys.stderr)
        if gain is not None:
            print(gain.line())
    return 0


def cmd_report(args, db: Database) -> int:
    from engine.records.report import build_report

    write(args.out, build_report(db, args.run))
    print(f"wrote {args.out} (one file: open it in any browser, no network needed)")
    return 0


def add_review(add, with_db) -> None:
    """Register ``approve`` and ``report`` on the CLI's parser (``add`` as in ``engine.cli``)."""
    sp = add("approve", with_db(cmd_approve), "approve a candidate of a run (`none` withdraws the approval)")
    sp.add_argument("run")
    sp.add_argument("candidate")
    sp = add("report", with_db(cmd_report), "write a run as one self-contained HTML file")
    sp.add_argument("run")
    sp.add_argument("--out", required=True)
    sp = add("analyze", with_db(cmd_analyze), "what is wrong with a run and what to do (findings from its records)")
    sp.add_argument("run")
    sp.add_argument("--json", action="store_true", help="the findings as JSON, with their evidence and actions")
    sp.add_argument("--diagnose", action="store_true",
                    help="also ask the run's reflection LM for a written diagnosis of the findings (a draft)")


def cmd_analyze(args, db: Database) -> int:
    """What is wrong with a run and what to do (``engine.analyze``); ``--diagnose`` also asks the
    run's reflection LM for a written diagnosis (recorded as an LM call of purpose ``analysis``)."""
    from engine.analyze import analyze
    from engine.analyze.report_text import as_json, as_text

    findings = analyze(db, args.run)
    diagnosis = None
    if args.diagnose:
        from engine.analyze.diagnosis import diagnose

        diagnosis = diagnose(db, args.run, findings)
    if args.json:
        print(json.dumps(as_json(args.run, findings, diagnosis), indent=1, ensure_ascii=False, default=str))
        return 0
    print(as_text(args.run, findings))
    if diagnosis:
        from engine.analyze.diagnosis import as_text as diagnosis_text

        print("\n" + diagnosis_text(diagnosis))
    return 0
