"""Analyze benchmark → docs/benchmarks-analyze.md.

Wall-clock of ``engine.analyze.analyze`` (every finding of a run, from its records: the reads,
the validation matrix, the checks) for synthetic runs of 2,000 candidates (tests/support/synthetic.py)
with 20 and with 200 validation examples — the second is the studio benchmark's run — on SQLite,
target ≤ 1 s. Each size is analysed ``--repeat`` times in one process; the table gives the
median and the slowest, and how the time splits between reading the records and the checks.

Usage: .venv/bin/python bench/analyze.py [--candidates 2000] [--val 20,200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(db, run_id: str, repeat: int) -> dict:
    from engine.analyze import analyze_records
    from engine.analyze.records import RunRecords

    from sqlalchemy import event

    statements: list[str] = []

    def count(conn, cursor, statement, *rest):
        if not statement.lstrip().upper().startswith(("BEGIN", "PRAGMA")):
            statements.append(statement)

    event.listen(db.reader, "before_cursor_execute", count)
    total, reads, found = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        recs = RunRecords.load(db, run_id)
        t1 = time.perf_counter()
        found = analyze_records(recs)
        total.append(time.perf_counter() - t0)
        reads.append(t1 - t0)
    event.remove(db.reader, "before_cursor_execute", count)
    return {"median": statistics.median(total), "max": max(total), "reads": statistics.median(reads),
            "findings": found, "statements": len(statements) // repeat}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=2000)
    ap.add_argument("--val", default="20,200")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-analyze.md"))
    args = ap.parse_args()

    from sqlalchemy import func, select

    from storage.db import open_db
    from storage.models import Evaluation
    from tests.support.synthetic import generate_run

    load = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="refract-bench-analyze-")
    db = open_db(f"sqlite:///{tmp}/bench.db")
    rows = []
    for n_val in (int(v) for v in args.val.split(",")):
        run_id = generate_run(db, n_candidates=args.candidates, n_val=n_val, run_id=f"rbench{n_val}")
        with db.read() as s:
            evaluations = s.execute(select(func.count()).select_from(Evaluation).where(Evaluation.run_id == run_id)).scalar()
        m = measure(db, run_id, args.repeat)
        kinds = ", ".join(f"{f.kind} ({f.severity})" for f in m["findings"])
        rows.append((args.candidates, n_val, evaluations, m, kinds))
        print(f"{args.candidates} × {n_val}: median {m['median']:.3f} s, max {m['max']:.3f} s, reads {m['reads']:.3f} s")
    end_load = os.getloadavg()[0]
    lines = [
        "# Analyze: findings of a big run", "",
        "`bench/analyze.py`: `engine.analyze.analyze` (every finding, from the run's records) on synthetic runs of "
        "tests/support/synthetic.py, SQLite, in one process. Target: **≤ 1 s for a 2,000-candidate run**.", "",
        f"Machine: {os.cpu_count()} cores, load average {load:.1f} at the start and {end_load:.1f} at the end "
        "(shared with other work: absolute times move with it).", "",
        "| candidates | validation examples | evaluations | median | slowest | of which reading the records | "
        "SQL statements | findings |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n, v, evs, m, kinds in rows:
        lines.append(f"| {n:,} | {v} | {evs:,} | {m['median']:.2f} s | {m['max']:.2f} s | {m['reads']:.2f} s | "
                     f"{m['statements']} | {kinds} |")
    lines += ["", f"{args.repeat} analyses of each run. The reads are eight statements (``storage.analyze_queries``: "
              "the run, its examples, candidates, steps, LM calls and commands, every score of the run from the "
              "covering index, the latest 2,000 evaluations' seconds) and one for the side information of at most "
              "24 candidates; the per-example and per-candidate aggregates and the validation matrix are built "
              "with pandas and numpy (aggregates and joins in SQL cost more than reading the scores once). The "
              "synthetic run's scores are random around each candidate's skill, so its findings (noise, "
              "degenerate members below the seed) are what such a run deserves.", "",
              "The dashboard's Analyze panel re-computes the findings only when a step ends, a command is applied "
              "or the frontier or the run's status changes (its cache key), not at every metric call; between "
              "those a refresh reads the run row alone.", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
