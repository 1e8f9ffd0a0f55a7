"""Studio benchmark → docs/benchmarks-studio.md.

Server-side time to build the run dashboard and the lineage page for a synthetic run of 2,000
candidates × 200 validation examples (target ≤ 1 s each), measured with Streamlit's AppTest
(the whole script run: queries, pandas, plotly figures, element serialisation; no browser),
cold (caches cleared), warm, after a metric call and after a validation pass; the time of each
live fragment's data call in the same four states; and the number of SQL statements per
live-fragment refresh (target ≤ 3), counted with a SQLAlchemy ``before_cursor_execute`` listener.

Usage: .venv/bin/python bench/studio.py [--candidates 2000] [--val 200] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")


def live_again(db, run_id: str) -> None:
    """The synthetic run marked running (an UPDATE of the benchmark's own database: no engine
    would take a completed run back), so that the studio reads it as a live run."""
    from sqlalchemy import update

    from storage.models import Run

    with db.write() as s:
        s.execute(update(Run).where(Run.id == run_id).values(status="running", finished_at=None))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=2000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-studio.md"))
    args = ap.parse_args()

    load_at_start = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="refract-bench-")
    url = f"sqlite:///{tmp}/bench.db"
    os.environ["REFRACT_DB"] = url
    os.environ["REFRACT_DATA"] = tmp

    import logging

    logging.getLogger("streamlit").setLevel(logging.ERROR)
    logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)
    from sqlalchemy import event
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from storage import repo
    from storage.db import open_db
    from tests.support.synthetic import generate_run
    from tests.support.synthetic_live import add_validated
    from ui import analysis, charts, data

    db = open_db(url)
    t = time.perf_counter()
    run_id = generate_run(db, n_candidates=args.candidates, n_val=args.val)
    gen_s = time.perf_counter() - t
    # what the generator leaves in this process (the kept frontier it holds for add_validated: 2.5 M
    # scores at 10,000 × 500) is frozen, so that Python's collector does not walk it during the page
    # builds, as it never would in a studio process, which holds none of it
    import gc

    gc.collect()
    gc.freeze()
    from storage import queries

    cands = queries.candidate_rows(db, run_id)
    from sqlalchemy import func, select

    from storage.models import Evaluation, Example

    with db.read() as session:  # a count, not the 2.5 M rows themselves
        n_evals = session.execute(select(func.count()).select_from(Evaluation)
                                  .join(Example, Example.pk == Evaluation.example_pk)
                                  .where(Evaluation.run_id == run_id, Example.split == "val")).scalar_one()

    statements: list[str] = []
    control = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA")  # transaction control is not a query

    def on_execute(_conn, _cursor, statement, *_rest):
        if not statement.lstrip().upper().startswith(control):
            statements.append(statement)

    for engine in {db.reader, db.writer}:
        event.listen(engine, "before_cursor_execute", on_execute)

    def forget_all() -> None:  # every cache: the token-keyed reads and the incremental stores
        st.cache_data.clear()
        data._scores_of.clear()
        data._steps_of.clear()

    def page_time(at: AppTest, cold: bool) -> tuple[float, int]:
        if cold:
            forget_all()
        statements.clear()
        t0 = time.perf_counter()
        at.run()
        dt = time.perf_counter() - t0
        if at.exception:
            raise SystemExit(f"page raised: {at.exception[0].message}")
        return dt, len(statements)

    rows = []
    for page, name in (("pages/dashboard.py", "run dashboard"), ("pages/lineage.py", "lineage")):
        # one AppTest per page, rerun like a browser session: its one-time setup (component
        # discovery, imports) is not part of building the page
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.query_params["run"] = run_id
        at.switch_page(page)
        page_time(at, cold=True)
        cold = [page_time(at, cold=True) for _ in range(args.repeat)]
        warm = [page_time(at, cold=False) for _ in range(args.repeat)]
        advancing = []
        live_again(db, run_id)  # the synthetic run is completed: advancing, it is a live run again
        for _ in range(args.repeat):  # the run recorded a metric call, then ended a validation pass
            repo.bump_run(db, run_id, metric_calls=1)
            data.run_overview.clear()
            advancing.append(page_time(at, cold=False))
            add_validated(db, run_id)
            data.run_overview.clear()
            advancing.append(page_time(at, cold=False))
        rows.append((name, statistics.median(c[0] for c in cold), statistics.median(w[0] for w in warm),
                     statistics.median(a[0] for a in advancing[0::2]), statistics.median(a[0] for a in advancing[1::2]),
                     cold[0][1], warm[0][1]))

    def refresh(fn, prepare) -> tuple[float, int]:
        """(seconds, SQL statements) of one call of a fragment's data read after ``prepare``."""
        prepare()
        statements.clear()
        t0 = time.perf_counter()
        fn(run_id)
        return time.perf_counter() - t0, len(statements)

    def expire_run_row():
        data.run_overview.clear()

    def metric_call():
        repo.bump_run(db, run_id, metric_calls=1)
        data.run_overview.clear()

    def validation_pass():
        add_validated(db, run_id)
        data.run_overview.clear()

    def expire_steering():  # the commands' 0.25 s cache expired too
        data.run_overview.clear()
        data.command_log.clear()
        data.candidate_live.clear()

    def steering_metric_call():
        metric_call()
        expire_steering()

    def steering_validation_pass():
        validation_pass()
        expire_steering()

    def frontier_fragment(rid: str) -> None:
        """What the frontier fragment reads: the run and its frontier, the heatmap's rows, the
        degenerate members."""
        run, view = data.frontier_snapshot(rid)
        scored = view.aggregates[view.aggregates["val_count"] > 0]
        rows = charts.heatmap_rows(view, analysis.ranked(scored, len(view.best)).set_index("id")["full_mean"],
                                   pinned=list(scored.loc[scored["pinned"], "id"]))
        data.frontier_matrix_of(data.db_url(), run, rows)
        data.degenerate_of(data.db_url(), run)

    best = queries.run_overview(db, run_id)["best_candidate_id"]
    fragments = []
    for label, fn, idle_prep, call_prep, pass_prep in (
            ("live overview (run, candidates, steps)", data.live_snapshot, expire_run_row, metric_call, validation_pass),
            ("frontier (run, kept frontier, heatmap rows, degenerate members)", frontier_fragment, expire_run_row,
             metric_call, validation_pass),
            ("run controls (run, commands)", data.controls_snapshot, expire_steering, steering_metric_call,
             steering_validation_pass),
            ("command log (commands, run, steps)", data.log_snapshot, expire_steering, steering_metric_call,
             steering_validation_pass),
            ("candidate state (flags, run status, comments, commands)", lambda r: data.candidate_snapshot(r, best),
             expire_steering, steering_metric_call, steering_validation_pass)):
        forget_all()
        fragments.append((label, refresh(fn, lambda: None), refresh(fn, idle_prep), refresh(fn, call_prep),
                          refresh(fn, pass_prep)))

    scale = f"{args.candidates}x{args.val}"
    lines = [
        f"<!-- bench/studio.py {scale}: begin (written by the benchmark; a run at this scale replaces it) -->",
        f"## {len(cands):,} candidates × {args.val} validation examples",
        "",
        f"Produced by `bench/studio.py --candidates {args.candidates} --val {args.val}` on {time.strftime('%Y-%m-%d')} "
        f"({os.cpu_count()} cores, 1-minute load average {load_at_start:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end: other work on the machine slows every figure; SQLite). Synthetic run "
        f"(`tests/support/synthetic.py`, seed 42): {len(cands):,} candidates ({int((cands.status == 'accepted').sum()):,} "
        f"accepted, validated on {args.val} examples; the rest rejected or failed), {n_evals:,} validation evaluations. "
        f"Generating it took {gen_s:.1f} s.",
        "",
        "### Server-side page build (target ≤ 1 s)",
        "",
        "Time of one full script run in Streamlit's AppTest (queries, pandas, plotly figures, serialisation; no "
        f"browser), median of {args.repeat}. *Cold*: every cache cleared first; *warm*: the cached reads are reused, "
        "as on every refresh of an unchanged run. *After a metric call*: the run recorded one more metric call since "
        "the last build; *after a validation pass*: a new candidate was validated on every example (its scores "
        "written, the kept frontier updated and the run's `frontier_version` bumped, as the engine does), as a live "
        "run does many times a minute. For these two the run is marked running (it is generated completed).",
        "",
        "| page | cold (s) | warm (s) | after a metric call (s) | after a validation pass (s) | SQL queries cold | "
        "SQL queries warm |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {n} | {c:.2f} | {w:.2f} | {m:.2f} | {v:.2f} | {qc} | {qw} |" for n, c, w, m, v, qc, qw in rows]
    lines += [
        "",
        "### Live fragments: the time of their data reads and their SQL statements (target ≤ 3)",
        "",
        "One call of each fragment's data read (`ui.data.live_snapshot`; for the frontier `frontier_snapshot`, "
        "then the heatmap's rows `frontier_matrix_of` and `degenerate_of`; the steering fragments' "
        "`controls_snapshot`, `log_snapshot`, `candidate_snapshot`), its statements counted with a SQLAlchemy "
        "`before_cursor_execute` listener, transaction control (`BEGIN`) not counted; seconds / statements. "
        "*Cold*: every cache cleared. *Idle*: the short caches expired (run row 1 s, commands and comments 0.25 s), "
        "nothing else changed. *After a metric call*: the candidates and steps are read again (the steps after the "
        "last one seen ended), the frontier is not. *After a validation pass*: the frontier's rows (a few hundred) "
        "and the heatmap's rows are read again. The candidate state is one call of three statements "
        "(`queries.candidate_live`), never cached longer than 0.25 s.",
        "",
        "| fragment | cold | idle | after a metric call | after a validation pass |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {label} | " + " | ".join(f"{t:.3f} s / {n}" for t, n in cells) + " |"
              for label, *cells in fragments]
    lines.append(f"<!-- bench/studio.py {scale}: end -->")
    write_section(Path(args.out), scale, "\n".join(lines))
    print("\n".join(lines))


def write_section(out: Path, scale: str, section: str, script: str = "bench/studio.py") -> None:
    """Put ``section`` in ``out`` in place of the one of the same script and scale (between its
    markers), or at the end: a run at one scale leaves the others, and the text around them, as
    they are (``bench/studio_browser.py`` writes its sections to the same page)."""
    text = out.read_text() if out.exists() else "# Studio benchmark\n"
    begin, end = f"<!-- {script} {scale}: begin", f"<!-- {script} {scale}: end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)


if __name__ == "__main__":
    main()
